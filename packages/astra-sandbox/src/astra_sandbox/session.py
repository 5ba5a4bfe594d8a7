"""Environment sessions: an environment's tool code loaded once per episode, then called turn by turn.

    with pool.session(environment["code"]) as session:
        result = session.call("get_capital", {"country": "Norway"})   # -> ToolResult
        result.output        # '{"capital": "Oslo"}'  (what the model sees)

Every failure (unknown tool, bad arguments, an exception, a timeout, a crash, code that does not
load) comes back as a ToolResult with ok=False and output "Error: ...": an episode never crashes.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from astra_sandbox.config import SandboxConfig
from astra_sandbox.errors import SandboxError, WorkerLost
from astra_sandbox.jail import warn_if_unsafe
from astra_sandbox.requirements import resolve_requirements
from astra_sandbox.worker import Worker

KINDS = ("ok", "unknown_tool", "bad_arguments", "exception", "timeout", "load_error")


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    output: str
    """The observation for the model: a str return value as is, anything else as JSON; on failure "Error: ..."."""
    error: str | None
    kind: str
    """One of: ok, unknown_tool, bad_arguments, exception, timeout, load_error."""
    duration_s: float
    stdout: str = ""
    """What the tool printed (not part of the observation)."""

    @classmethod
    def failed(cls, kind: str, error: str, duration_s: float = 0.0) -> ToolResult:
        return cls(ok=False, output=f"Error: {error}", error=error, kind=kind, duration_s=duration_s)

    def to_dict(self) -> dict:
        return asdict(self)


def _end_episode(worker: Worker, timeout: float, release: Callable[[Worker], None] | None) -> None:
    """Close the worker's episode and hand the worker back (also runs if a session is never closed)."""
    if worker.alive:
        try:
            worker.post({"op": "close"}, timeout)
        except WorkerLost:
            pass
    if release is not None:
        release(worker)


class Session:
    """One episode of one environment on one worker. Use as a context manager; `close()` ends it."""

    def __init__(self, worker: Worker, config: SandboxConfig, code: str, requirements: Iterable[str] = (),
                 release: Callable[[Worker], None] | None = None):
        self.config = config
        self.tools: list[str] = []
        self.load_error: str | None = None
        self._worker: Worker | None = worker
        self._lock = threading.Lock()
        self._dead: ToolResult | None = None  # the error later calls get once the environment is gone
        self._finalizer = weakref.finalize(self, _end_episode, worker, config.call_timeout_s, release)
        self._open(code, list(requirements))

    # -- lifecycle -------------------------------------------------------------------------
    def _open(self, code: str, requirements: list[str]) -> None:
        try:
            site = resolve_requirements(requirements)
        except SandboxError as exc:
            self._fail_load(str(exc))
            return
        message = {"op": "open", "code": code, "limits": self.config.limits(), **site}
        try:
            reply = self._worker.request(message, self.config.call_timeout_s)
        except WorkerLost as exc:
            self._fail_load(str(exc))
            return
        self._worker.episodes += 1
        if reply.get("ok"):
            self.tools = reply.get("tools", [])
            return
        error = reply.get("error") or "the environment did not load"
        if reply.get("kind") == "timeout":
            error = f"loading the environment timed out after {self.config.call_timeout_s:g}s"
        self._fail_load(error)

    def _fail_load(self, error: str) -> None:
        self.load_error = error
        self._dead = ToolResult.failed("load_error", f"the environment failed to load: {error}")

    @property
    def alive(self) -> bool:
        return self._dead is None

    def close(self) -> None:
        with self._lock:
            if self._worker is None:
                return
            self._worker = None
            if self._dead is None:
                self._dead = ToolResult.failed("exception", "the session is closed")
            self._finalizer()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- calls -------------------------------------------------------------------------------
    def call(self, name: str, arguments: dict | str | None = None) -> ToolResult:
        """Call one tool; never raises for anything the environment does."""
        started = time.monotonic()
        with self._lock:
            if self._dead is not None:
                return self._dead
            reply = self._request({"op": "call", "name": name, "arguments": arguments})
        duration = time.monotonic() - started
        if reply.get("ok"):
            return ToolResult(ok=True, output=reply.get("output", ""), error=None, kind="ok", duration_s=duration,
                              stdout=reply.get("stdout", ""))
        kind = reply.get("kind") if reply.get("kind") in KINDS else "exception"
        result = ToolResult.failed(kind, reply.get("error") or "unknown failure", duration)
        result = ToolResult(**{**result.to_dict(), "stdout": reply.get("stdout", "")})
        if reply.get("dead"):
            cause = "timed out" if kind == "timeout" else "crashed"
            self._dead = ToolResult.failed(kind, f"the environment is no longer running (it {cause} earlier: "
                                                 f"{result.error})")
        return result

    def state(self) -> dict:
        """JSON-able snapshot of the environment's state: `get_state()` if the code defines it, else its
        public module globals (functions, classes, modules and `_private` names left out)."""
        with self._lock:
            if self._dead is not None:
                raise SandboxError(f"no state: {self._dead.error}")
            reply = self._request({"op": "state"})
        if not reply.get("ok"):
            if reply.get("dead"):
                self._dead = ToolResult.failed(reply.get("kind", "exception"), reply.get("error", "died"))
            raise SandboxError(f"reading the environment's state failed: {reply.get('error')}")
        return reply["state"]

    def _request(self, message: dict) -> dict:
        try:
            return self._worker.request(message, self.config.call_timeout_s)
        except WorkerLost as exc:
            return {"ok": False, "kind": "exception", "error": str(exc), "dead": True}


def open_session(code: str, requirements: Iterable[str] = (), *, config: SandboxConfig | None = None) -> Session:
    """A session on a worker of its own (a cold start, ~50 ms); the worker stops when the session closes."""
    config = config or SandboxConfig()
    warn_if_unsafe(config)
    worker = Worker(config).start()
    return Session(worker, config, code, requirements, release=lambda w: w.stop())
