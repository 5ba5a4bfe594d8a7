"""When the jail cannot run, the error names the fix; the unsafe mode says so on every start."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from astra_sandbox import SandboxConfig, SandboxUnavailable, SessionPool, run_code
from astra_sandbox.jail import LIBNL_FIX

CLI = str(Path(sys.executable).with_name("astra-sandbox"))


def fake_nsjail(tmp_path: Path, message: str, code: int) -> str:
    """A stand-in binary that fails the way a broken machine makes nsjail fail."""
    path = tmp_path / "nsjail"
    path.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit {code}\n")
    path.chmod(0o755)
    return str(path)


def test_missing_binary(tmp_path):
    with pytest.raises(SandboxUnavailable, match="not found"):
        SessionPool(size=1, config=SandboxConfig(nsjail_path=str(tmp_path / "nope")))


def test_missing_libnl_names_the_apt_packages(tmp_path):
    binary = fake_nsjail(tmp_path, "nsjail: error while loading shared libraries: libnl-route-3.so.200: "
                                   "cannot open shared object file: No such file or directory", 127)
    with pytest.raises(SandboxUnavailable) as caught:
        SessionPool(size=1, config=SandboxConfig(nsjail_path=binary))
    assert LIBNL_FIX in str(caught.value) and "libnl-route-3.so.200" in str(caught.value)


def test_no_namespaces_names_the_fix(tmp_path):
    binary = fake_nsjail(tmp_path, "[E][2026-11-22T00:00:00+0000] clone(flags=CLONE_NEWNS|CLONE_NEWUSER) failed: "
                                   "Operation not permitted", 255)
    with pytest.raises(SandboxUnavailable, match="cannot create the jail's namespaces") as caught:
        run_code({"code": "print(1)"}, config=SandboxConfig(nsjail_path=binary))
    assert "--no-sandbox-jail" in str(caught.value)


def test_not_root_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxUnavailable, match="must be started as root"):
        SessionPool(size=1)


def test_cli_prints_the_fix_and_fails(tmp_path):
    # a real process: the user sees this message on stderr
    binary = fake_nsjail(tmp_path, "nsjail: error while loading shared libraries: libnl-3.so.200: cannot open", 127)
    done = subprocess.run([CLI, "check"], capture_output=True, text=True, env={**os.environ, "ASTRA_NSJAIL": binary},
                          timeout=60)
    assert done.returncode == 1
    assert "apt-get install -y libnl-route-3-200 libnl-3-200" in done.stderr and done.stdout == ""


def test_unsafe_mode_warns_on_every_start(capfd):
    config = SandboxConfig(jail=False)
    for _ in range(2):
        assert run_code({"code": "print(1)"}, config=config)["status"] == "Success"
    assert capfd.readouterr().err.count("WITHOUT the jail") == 2
