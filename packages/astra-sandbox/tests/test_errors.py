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


def test_no_user_namespaces_without_root_names_the_sysctl(tmp_path, monkeypatch):
    binary = fake_nsjail(tmp_path, "[E][2026-11-22T00:00:00+0000] clone(flags=CLONE_NEWUSER) failed: "
                                   "Operation not permitted", 255)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxUnavailable, match="without root.*kernel.unprivileged_userns_clone=1"):
        run_code({"code": "print(1)"}, config=SandboxConfig(nsjail_path=binary))


def test_a_python_the_one_user_cannot_reach_names_the_way_out(tmp_path):
    binary = fake_nsjail(tmp_path, "[W][2026-11-22T00:00:00+0000][1] mountSinglePoint():222 mount('/root/.pyenv' -> "
                                   "'/run/user/nsjail.0.root//root/.pyenv'): try 'chmod o+x' on source path: "
                                   "Permission denied", 255)
    with pytest.raises(SandboxUnavailable, match="one user cannot reach it.*chmod o\\+x.*--sandbox-users two"):
        run_code({"code": "print(1)"}, config=SandboxConfig(nsjail_path=binary, users="one"))


def test_a_jail_of_two_users_without_root_is_refused_with_the_way_out(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxUnavailable, match="two users must be started as root.*--sandbox-users one"):
        SessionPool(size=1, config=SandboxConfig(users="two"))


def test_without_root_the_jail_has_one_user_unless_told_otherwise(monkeypatch):
    assert SandboxConfig().one_user == (os.geteuid() != 0)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert SandboxConfig().one_user and SandboxConfig(users="one").one_user and not SandboxConfig(users="two").one_user
    with pytest.raises(ValueError, match="users must be one of auto, two, one"):
        SandboxConfig(users="three")


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
