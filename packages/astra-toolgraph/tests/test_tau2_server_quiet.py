"""The tau2 MCP server (in `.venv-tau2`) says nothing on stderr when it starts: tau2's import-time
"No .env file found" warning would otherwise reach the log of every run that serves a tau2 domain."""

import subprocess

from astra_toolgraph.evolve.tau2 import server_script, tau2_python


def test_describing_a_tau2_domain_prints_no_warning():
    done = subprocess.run([tau2_python(), str(server_script()), "airline", "--describe"], capture_output=True,
                          text=True, timeout=300, check=True)
    assert '"id"' in done.stdout.splitlines()[-1]
    assert "No .env file found" not in done.stderr and done.stderr.strip() == ""
