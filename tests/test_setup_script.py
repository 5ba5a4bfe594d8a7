"""scripts/setup installs missing Debian packages as root or through sudo, and where it cannot (no sudo, no
apt-get, apt-get failing) it stops naming the packages and why they are needed.

Its `apt_install` function runs in bash with a PATH holding only what each case needs: `id` says which user
runs it, and stand-ins for sudo and apt-get log how they were called (the real ones would change the machine).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[1] / "scripts" / "setup"


def apt_install_source() -> str:
    text = SETUP.read_text()
    say = re.search(r"^say\(\) \{.*\}$", text, re.M).group(0)
    function = re.search(r"^apt_install\(\) \{.*?^\}$", text, re.M | re.S).group(0)
    return f"{say}\n{function}\n"


def tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def run_apt_install(tmp_path: Path, uid: int, tools: dict[str, str]) -> tuple[subprocess.CompletedProcess, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bash").symlink_to("/bin/bash")
    tool(bin_dir, "id", f"echo {uid}")
    log = tmp_path / "calls.log"
    for name, body in tools.items():
        tool(bin_dir, name, body.replace("LOG", str(log)))
    script = apt_install_source() + 'apt_install "the nsjail binary links them" pkg-a pkg-b\necho reached\n'
    done = subprocess.run(["/bin/bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True,
                          env={"PATH": str(bin_dir)}, timeout=30)
    return done, log.read_text() if log.exists() else ""


APT_OK = 'echo "apt-get $*" >> LOG'
SUDO = 'echo "sudo $1" >> LOG; exec "$@"'


@pytest.mark.parametrize("uid, expected_calls", [
    (0, ["apt-get update -qq", "apt-get install -y -qq pkg-a pkg-b"]),
    (1000, ["sudo apt-get", "apt-get update -qq", "sudo apt-get", "apt-get install -y -qq pkg-a pkg-b"]),
])
def test_it_installs_as_root_or_through_sudo(tmp_path, uid, expected_calls):
    done, calls = run_apt_install(tmp_path, uid, {"apt-get": APT_OK, "sudo": SUDO})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "reached\n"
    assert calls.splitlines() == expected_calls
    assert "installing pkg-a pkg-b (the nsjail binary links them)" in done.stderr


@pytest.mark.parametrize("uid, tools, reason", [
    (1000, {"apt-get": APT_OK}, "not root and no sudo: ask an administrator to install them"),
    (0, {}, "there is no apt-get here: install the equivalent with this system's package manager"),
    (1000, {"sudo": SUDO}, "there is no apt-get here"),
    (1000, {"sudo": SUDO, "apt-get": 'echo "E: Unable to locate package" >&2; exit 100'},
     "apt-get failed (see above): ask an administrator to install them"),
])
def test_where_it_cannot_install_it_stops_naming_what_is_missing(tmp_path, uid, tools, reason):
    done, calls = run_apt_install(tmp_path, uid, tools)
    assert done.returncode == 1
    assert "reached" not in done.stdout
    assert "missing system packages: pkg-a pkg-b (the nsjail binary links them)" in done.stderr
    assert reason in done.stderr
    if "apt-get" not in tools:
        assert "apt-get" not in calls  # nothing was attempted
