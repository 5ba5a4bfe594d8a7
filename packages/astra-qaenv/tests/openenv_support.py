"""Helpers of the OpenEnv tests (astra-qaenv's served environment, astra-grpo's client side).

OpenEnv needs the mcp SDK 1.x, astra-toolgraph mcp 2.x: OpenEnv lives in .venv-openenv (scripts/setup makes it,
with astra-grpo, astra-qaenv and TRL), so its servers, clients and trainers run there as subprocesses, on
127.0.0.1, and the tests read what they wrote.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from astra_core.benchenv import env_python

PLAY = Path(__file__).with_name("openenv_scripts") / "play.py"  # episodes with OpenEnv's MCPToolClient


def openenv_python() -> str:
    python = env_python("openenv")
    if python is None:
        pytest.fail("no .venv-openenv: scripts/setup makes it (OpenEnv cannot share the workspace's .venv)")
    return python


def openenv_bin(command: str) -> str:
    return str(Path(openenv_python()).with_name(command))


def read_jsonl(path) -> list[dict]:
    path = Path(path)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def write_jsonl(path, records) -> str:
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


class Server:
    """A server process in .venv-openenv that announces its port in a file: started, waited for, stopped."""

    def __init__(self, argv: list[str], workdir: Path, *, timeout_s: float = 60.0):
        self.port_file = workdir / f"port-{time.monotonic_ns()}"
        self.log = workdir / f"{self.port_file.name}.log"
        self.process = subprocess.Popen([*argv, "--port", "0", "--port-file", str(self.port_file)],
                                        stdout=subprocess.DEVNULL, stderr=self.log.open("w"),
                                        start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not self.port_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the server did not start: {self.log.read_text()}")
            time.sleep(0.1)
        self.port = int(self.port_file.read_text())
        self.base_url = f"http://127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


class AppServer(Server):
    """A published environment's ASGI app served as its README says (`python -m uvicorn APP --port N`, from `cwd`,
    in `python`'s virtualenv) on a free port of 127.0.0.1, ready once its /health route answers."""

    def __init__(self, python: str, app: str, cwd: Path, workdir: Path, *, env: dict | None = None,
                 timeout_s: float = 90.0):
        import socket
        import urllib.request

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.log = workdir / f"{app.replace(':', '-')}-{self.port}.log"
        self.process = subprocess.Popen([python, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(self.port)],
                                        cwd=cwd, stdout=subprocess.DEVNULL, stderr=self.log.open("w"),
                                        start_new_session=True, env={**os.environ, **(env or {})})
        self.base_url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=5):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"{app} did not start: {self.log.read_text()[-3000:]}") from None
                time.sleep(0.2)


def serve_samples(samples_path, workdir: Path, *extra: str) -> Server:
    """`astra-qaenv serve-openenv SAMPLES` on a free port of 127.0.0.1."""
    return Server([openenv_bin("astra-qaenv"), "serve-openenv", str(samples_path), *extra], workdir)


def run_script(script: Path, *args, timeout: float = 600.0, env: dict | None = None) -> subprocess.CompletedProcess:
    """A test script under .venv-openenv's Python (its output captured)."""
    return subprocess.run([openenv_python(), str(script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def qaenv_samples(workdir: Path, every: int = 20) -> tuple[list[dict], list[dict]]:
    """rl_samples and their gold trajectories from the real pipeline on the bundled knowledge base (every
    `every`-th entity): programmatic -> validate -> build-env (nsjail) -> export without distractors."""
    from astra_core.testing import RecordedLLM
    from astra_qaenv.cli import main
    from click.testing import CliRunner

    runner = CliRunner()
    entities = runner.invoke(main, ["sample-data", "entities"]).output.splitlines()
    write_jsonl(workdir / "starts.jsonl", [json.loads(line) for line in entities[::every]])
    steps = [["programmatic", "starts.jsonl", "--max-hops", "3", "-o", "qa.jsonl"],
             ["validate", "--no-judge", "qa.jsonl", "-o", "valid.jsonl"],
             ["build-env", "valid.jsonl", "-o", "env.jsonl"],
             ["export", "env.jsonl", "--mixing", "none", "-o", "rl.jsonl", "--gold-trajectories", "gold.jsonl"]]
    server = RecordedLLM(replies=[]).start()  # the LLM stages open their endpoint; none is asked anything
    try:
        for args in steps:
            args = [str(workdir / a) if a.endswith(".jsonl") else a for a in args]
            result = runner.invoke(main, args, env={"ASTRA_LLM_BASE_URL": server.base_url}, catch_exceptions=False)
            assert result.exit_code == 0, result.output
    finally:
        server.stop()
    return read_jsonl(workdir / "rl.jsonl"), read_jsonl(workdir / "gold.jsonl")
