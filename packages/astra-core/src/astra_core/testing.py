"""Pytest fixtures shared by every package's tests (registered as the `astra_core` pytest plugin).

- `embedded_llm`: base URL of a real embedded model server (SmolLM2 over HTTP), one per session.
- `llm_env`: sets ASTRA_LLM_BASE_URL to it for the test.
- `recorded_llm`: a real loopback HTTP server that answers chat requests with recorded replies
  (for testing parsing and control flow deterministically), can fail on purpose, and keeps
  every request it received.
- `local_ray`: a local Ray (on 127.0.0.1) in this process, one per session, that `astra-core ray` runs invoked
  in-process use (the `ray` extra); `ray_cluster`: a Ray cluster of two nodes started with `ray start` on this
  machine, for `astra-core ray --address` runs in subprocesses (slow tests); `records_as_run` and `summary_of`
  compare what two runs wrote and said.

Importing this module is cheap: nothing heavy loads until a fixture is used.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from astra_core.http_server import HTTPServer

Reply = str | dict | Callable[[dict], "str | dict | Failure"]


@dataclass
class Failure:
    """A deliberate failure: an HTTP status (with optional Retry-After), a stall of `sleep` seconds, or (status 200)
    a reply `body` of the wrong shape."""

    status: int = 503
    retry_after: float | None = None
    sleep: float = 0.0
    body: str = '{"error": {"message": "failing on purpose", "type": "server_error"}}'


@dataclass
class RecordedLLM:
    """Serves `failures` first (one per request), then `replies` in order (the last one repeats).

    A reply is the assistant content (str), a full assistant message (dict with content/tool_calls),
    or a function of the request body returning either, or a Failure (a server that refuses some requests).
    """

    replies: list[Reply] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    embeddings: Callable[[str], list[float]] | None = None
    embedding_data: Callable[[list[str]], Any] | None = None  # the whole `data` for the inputs (a wrong reply)
    model_name: str = "recorded"
    lists_models: bool = True  # False: GET /models is a 404, as on servers without the route
    requests: list[dict] = field(default_factory=list)
    max_in_flight: int = 0
    base_url: str = ""
    _in_flight: int = 0
    _served: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: HTTPServer | None = None

    def _next(self, body: dict) -> Failure | dict:
        with self._lock:
            self.requests.append(body)
            if self.failures:
                return self.failures.pop(0)
            reply = self.replies[min(self._served, len(self.replies) - 1)] if self.replies else ""
            self._served += 1
        reply = reply(body) if callable(reply) else reply
        if isinstance(reply, Failure):
            return reply
        return {"role": "assistant", "content": reply} if isinstance(reply, str) else {"role": "assistant", **reply}

    def start(self) -> RecordedLLM:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: str, headers: dict | None = None) -> None:
                data = payload.encode()
                # a client that gave up waiting (a timeout test) has gone: nothing to answer, nothing to report
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                if not recorder.lists_models:
                    self._send(404, '{"detail": "Not Found"}')
                    return
                self._send(200, json.dumps({"object": "list", "data": [{"id": recorder.model_name}]}))

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with recorder._lock:
                    recorder._in_flight += 1
                    recorder.max_in_flight = max(recorder.max_in_flight, recorder._in_flight)
                try:
                    self._answer(body)
                finally:
                    with recorder._lock:
                        recorder._in_flight -= 1

            def _answer(self, body: dict) -> None:
                if self.path.rstrip("/").endswith("/embeddings"):
                    recorder.requests.append(body)
                    vectors = [recorder.embeddings(text) for text in body["input"]] if recorder.embeddings else []
                    data = [{"index": i, "embedding": v, "object": "embedding"} for i, v in enumerate(vectors)]
                    if recorder.embedding_data is not None:
                        data = recorder.embedding_data(body["input"])
                    self._send(200, json.dumps({"object": "list", "data": data}))
                    return
                outcome = recorder._next(body)
                if isinstance(outcome, Failure):
                    time.sleep(outcome.sleep)
                    headers = {"Retry-After": str(outcome.retry_after)} if outcome.retry_after is not None else {}
                    self._send(outcome.status, outcome.body, headers)
                    return
                finish = "tool_calls" if outcome.get("tool_calls") else "stop"
                self._send(200, json.dumps({
                    "id": "chatcmpl-recorded", "object": "chat.completion", "model": recorder.model_name,
                    "choices": [{"index": 0, "message": outcome, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}))

        self._server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def chat_requests(self) -> list[dict]:
        return [r for r in self.requests if "messages" in r]


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (an endpoint that does not answer)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # free again once the probe is closed


@pytest.fixture
def recorded_llm() -> Iterator[Callable[..., RecordedLLM]]:
    """Factory: `server = recorded_llm(replies=[...], failures=[Failure(503)])`; stopped after the test."""
    started: list[RecordedLLM] = []

    def make(replies: list[Reply] | None = None, failures: list[Failure] | None = None, **kwargs: Any) -> RecordedLLM:
        server = RecordedLLM(replies=list(replies or []), failures=list(failures or []), **kwargs).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def embedded_llm() -> Iterator[str]:
    """Base URL (…/v1) of a real embedded model server, shared by the whole test session."""
    from astra_core.embedded import start_server, stop_server

    process, base_url = start_server(extra_args=["--max-tokens-cap", "256"])
    yield base_url
    stop_server(process)


@pytest.fixture
def llm_env(embedded_llm: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point ASTRA_LLM_BASE_URL at the embedded server for this test (stages and subprocesses see it)."""
    monkeypatch.setenv("ASTRA_LLM_BASE_URL", embedded_llm)
    monkeypatch.delenv("ASTRA_LLM_MODEL", raising=False)
    return embedded_llm


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    """A local Ray instance in this process (as `astra-core ray` starts without --address: on 127.0.0.1, this
    machine's CPUs), shared by the session's in-process `astra-core ray` runs; shut down at its end. Ray's driver
    turns SIGTERM into SystemExit for good (ray.init sets a handler that shutdown leaves): the handler the
    process had is put back, or a later test of a trainer's own SIGTERM handling gets Ray's."""
    import signal

    from astra_core.ray_stage import connect

    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        ray = connect(None)
    finally:  # also when Ray fails to start after ray.init set its handler (every later test would meet it)
        signal.signal(signal.SIGTERM, sigterm)
    try:
        yield
    finally:
        ray.shutdown()


@dataclass
class RayCluster:
    address: str  # host:port of its head
    env: dict[str, str]  # what a driver's environment needs to connect (RAY_AUTH_MODE=token)

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """`astra-core ray --address ADDRESS ARGS...` in a subprocess, as a user runs it."""
        command = [str(_bin("astra-core")), "ray", "--address", self.address, *map(str, args)]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=self.env)

    def add_node(self) -> None:
        """A node of 1 CPU joins the cluster (after a test has killed one)."""
        subprocess.run([str(_bin("ray")), "start", f"--address={self.address}", *_NODE], env=self.env, check=True,
                       capture_output=True, timeout=300)

    def worker_raylet(self) -> int:
        """The process of the second node's raylet (the one not started with --head)."""
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    command = handle.read().split(b"\0")
            except OSError:
                continue
            if command[0].endswith(b"/raylet") and b"--head" not in command and self._ours(command):
                return int(entry)
        raise LookupError("no raylet of a second node is running")

    def _ours(self, command: list[bytes]) -> bool:
        return any(arg.endswith(f":{self.address.rsplit(':', 1)[1]}".encode()) for arg in command)


_NODE = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]


def _bin(name: str):
    from pathlib import Path

    return Path(sys.executable).with_name(name)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """A Ray cluster of two nodes on this machine, each with 1 CPU, as docs/ray.md starts one: `ray start --head`,
    then a second node joining with token authentication (the head turns it on). The cluster has a token of its
    own (RAY_AUTH_TOKEN in every command's environment): `ray start` with token authentication does not make one,
    and the user's ~/.ray/auth_token exists only once a `ray.init()` has run as that user. Addresses are given as
    127.0.0.1 (Ray registers a node of a cluster of several under the machine's address). `ray stop` at the end,
    also after a failure. Session-wide: `ray stop` ends every Ray of this user on the machine."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    env["RAY_AUTH_MODE"] = "token"
    env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    port = closed_port()
    ray = str(_bin("ray"))
    try:
        subprocess.run([ray, "start", "--head", f"--port={port}", "--include-dashboard=false", *_NODE], env=env,
                       check=True, capture_output=True, timeout=300)
        cluster = RayCluster(f"127.0.0.1:{port}", env)
        cluster.add_node()
        yield cluster
    finally:
        try:
            _shut_down_ray_here()  # `ray stop` would end local_ray's Ray too, and a driver whose Ray died exits
        finally:
            subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=300)


def _shut_down_ray_here() -> None:
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()


def records_as_run(path) -> list[str]:
    """The records of a JSONL file (outputs or rejects) as a sorted list of canonical JSON texts, the times of their
    provenance steps left out: what two runs of a stage wrote, compared as sets of records (order aside)."""
    texts = []
    with open(path, "rb") as handle:
        for line in handle:
            record = json.loads(line)
            for holder in (record, record.get("record")):
                if isinstance(holder, dict):
                    for step in (holder.get("meta") or {}).get("provenance", []):
                        step.pop("time", None)
            texts.append(json.dumps(record, sort_keys=True, ensure_ascii=False))
    return sorted(texts)


def summary_of(stderr: str, command: str) -> list[str]:
    """The counts a stage printed at its end (`command: read ... · wrote ... · rejected ...` and the lines under it)
    without their elapsed time or how Ray ran it: what a run on Ray and one in one process must print alike."""
    lines = stderr.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith(f"{command}: read "))
    head = lines[start].rsplit(" · ", 1)[0]  # (the elapsed time)
    rest = [line for line in lines[start + 1:] if line.startswith("  ") and not line.startswith("  ray: ")]
    return [head, *rest]
