"""Shared helpers: running the astra-eval CLI as a user would, and the benchmark environments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from astra_eval import benchenv

HELPERS = Path(__file__).parent / "eval_bench_scripts"


def bench_python(bench: str) -> str:
    """The interpreter of .venv-bfcl / .venv-tau2; these tests need it (scripts/setup creates it)."""
    env = benchenv.env_dir(bench)
    if env is None:
        pytest.fail(f".venv-{bench} is missing: run scripts/setup (it creates the benchmark environments)")
    return str(env / "bin" / "python")


def cli(*args: str, env: dict | None = None, check: bool = True, timeout: float = 900,
        input: str | None = None) -> subprocess.CompletedProcess:  # noqa: A002 - subprocess's name for stdin
    """`astra-eval ARGS` from the main environment (bfcl/tau2 hand over to their own environment)."""
    full_env = {**os.environ, **(env or {})}
    done = subprocess.run([sys.executable, "-m", "astra_eval.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, input=input if input is not None else "")
    if check and done.returncode != 0:
        raise AssertionError(f"astra-eval {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done


def helper(bench: str, script: str, *args: str, timeout: float = 900) -> dict:
    """Run tests/eval_bench_scripts/SCRIPT in the benchmark's environment; it prints one JSON object."""
    done = subprocess.run([bench_python(bench), str(HELPERS / script), *args], capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"{script} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
