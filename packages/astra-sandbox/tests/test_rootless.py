"""The sandbox without root, as on a cluster: this package's tests, the hostile suite among them, run again
by an unprivileged user (nobody), whose jail then has one user (`SandboxConfig.users`).

Run as root (CI), through the repository's scripts/as_nobody.py: nobody, in a private mount namespace that
makes the Python, its virtualenv and the working directory reachable (see there). Without root, the whole
suite already runs like this."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.nsjail

TESTS = Path(__file__).parent
AS_NOBODY = TESTS.parents[2] / "scripts" / "as_nobody.py"


@pytest.mark.skipif(os.geteuid() != 0, reason="without root, this whole suite is the run without root")
def test_the_sandbox_and_its_hostile_suite_without_root(request):
    selected = ["-m", request.config.option.markexpr] if request.config.option.markexpr else []  # (make test: not slow)
    command = [sys.executable, str(AS_NOBODY), sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               *selected, "--ignore", f"{TESTS}/test_rootless.py", str(TESTS)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=TESTS, timeout=600)
    summary = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 0, summary
    security = [line for line in done.stdout.splitlines() if line.startswith("astra-sandbox security")]
    assert security and "(one user)" in security[0] and "NOT contained" not in security[0], summary
    assert " skipped" not in done.stdout.splitlines()[-1], summary
