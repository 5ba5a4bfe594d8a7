"""scripts/as_nobody.py: a virtualenv and a working directory that sit below directories only root may search
(pytest's own tmp_path, a checkout in /root) are reachable to the command it runs as nobody, whether TMPDIR is
below such a directory or not, and nothing is left in TMPDIR."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "as_nobody.py"
_spec = importlib.util.spec_from_file_location("as_nobody", SCRIPT)
as_nobody = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(as_nobody)


def private_tree(root: Path) -> Path:
    """root/outer/inner/target, with outer and inner searchable by their owner only."""
    target = root / "outer" / "inner" / "target"
    target.mkdir(parents=True)
    for directory in (root / "outer", root / "outer" / "inner"):
        directory.chmod(0o700)
    root.chmod(0o755)
    return target


def test_every_private_directory_on_the_way_is_a_step_down_to_the_target_parent(tmp_path):
    target = private_tree(tmp_path)
    steps = as_nobody.unsearchable_steps([str(target)])
    assert steps[str(tmp_path / "outer")] == ["inner"]
    assert steps[str(tmp_path / "outer" / "inner")] == ["target"]  # the target's own parent
    assert list(steps).index(str(tmp_path / "outer")) < list(steps).index(str(tmp_path / "outer" / "inner"))


@pytest.mark.skipif(os.geteuid() != 0, reason="as_nobody.py needs root: it makes a mount namespace and switches user")
def test_a_virtualenv_below_private_directories_is_the_one_nobody_runs(tmp_path):
    venv = private_tree(tmp_path)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    covered = tmp_path / "tmp"  # below pytest's 0700 directory, which the namespace covers
    covered.mkdir()
    uncovered = Path(tempfile.mkdtemp(prefix="as-nobody-test-"))
    try:
        for temporary in (covered, uncovered):
            done = subprocess.run([python, SCRIPT, python, "-c", "import os, sys; print(os.getuid(), sys.prefix)"],
                                  capture_output=True, text=True, cwd=tmp_path, timeout=60,
                                  env={**os.environ, "TMPDIR": str(temporary)})
            assert done.returncode == 0, done.stderr
            assert done.stdout.split() == ["65534", str(venv)]  # not the base Python: its pyvenv.cfg was readable
            assert not list(temporary.iterdir())  # the stashes of the namespace's set-up were left behind
    finally:
        shutil.rmtree(uncovered)


@pytest.mark.skipif(os.geteuid() != 0, reason="as_nobody.py needs root: it makes a mount namespace and switches user")
def test_nobodys_temporary_files_go_to_the_callers_tmpdir_and_go_with_the_run(tmp_path):
    """A TMPDIR nobody can reach holds nobody's HOME and TMPDIR; one nobody cannot reach leaves them to /tmp. Either
    way nothing nobody wrote there is left (pytest as nobody wrote /tmp/pytest-of-nobody, whatever TMPDIR was)."""
    reachable = Path(tempfile.mkdtemp(prefix="as-nobody-test-"))
    reachable.chmod(0o755)
    unreachable = Path(tempfile.mkdtemp(prefix="as-nobody-test-"))  # 0700, root's
    write = "import os, tempfile; print(tempfile.gettempdir(), os.environ['HOME']); tempfile.mkstemp()"
    try:
        for temporary in (reachable, unreachable):
            done = subprocess.run([sys.executable, SCRIPT, sys.executable, "-c", write], capture_output=True,
                                  text=True, cwd=tmp_path, timeout=60, env={**os.environ, "TMPDIR": str(temporary)})
            assert done.returncode == 0, done.stderr
            nobodys_tmp, home = map(Path, done.stdout.split())
            assert nobodys_tmp == home / "tmp"
            assert home.parent == Path(os.path.realpath(temporary if temporary == reachable else "/tmp"))
            assert not home.exists() and not list(temporary.iterdir())
    finally:
        shutil.rmtree(reachable)
        shutil.rmtree(unreachable)
