"""One sandbox worker: a long-lived jailed supervisor process and the framed pipes to it."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import weakref
from typing import NoReturn

from astra_sandbox.config import SandboxConfig
from astra_sandbox.errors import SandboxUnavailable, WorkerLost
from astra_sandbox.inside.framing import FrameReader, decode, write_frame
from astra_sandbox.jail import explain_failure, launch_command

STARTUP_TIMEOUT_S = 20.0
GRACE_S = 2.0  # the supervisor enforces the limits; the host waits this much longer before giving up on it


def valid_unicode(value):
    """`value` with every string valid Unicode. Code in the jail can send a lone surrogate (a JSON escape such as
    \\ud800, from a tool's text or a forged reply), which no UTF-8 writer downstream accepts: each becomes '?'."""
    if isinstance(value, str):
        return value if value.isascii() else value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {valid_unicode(key): valid_unicode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [valid_unicode(item) for item in value]
    return value


def _may_hold_surrogates(body: bytes) -> bool:
    """Whether a reply needs `valid_unicode`. The jail's own frames are ASCII JSON (non-ASCII text escaped), so a
    lone surrogate comes as a \\uDxxx escape, or in a forged frame that is not ASCII (json.loads decodes bytes
    with surrogatepass); the walk costs ~130 us on a large state, the test ~nothing."""
    return not body.isascii() or b"\\ud" in body or b"\\uD" in body


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


class Worker:
    """Start with `start()`; `request(message, timeout)` sends one op and returns the reply."""

    def __init__(self, config: SandboxConfig):
        self.config = config
        self.process: subprocess.Popen | None = None
        self.info: dict = {}
        self.episodes = 0
        self._log = None
        self._finalizer = None
        self._replies: FrameReader | None = None
        self._owed = 0  # replies to ops sent without waiting, read before the next reply

    def start(self) -> Worker:
        argv, env = launch_command(self.config)
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                        env=env, close_fds=True, start_new_session=True)
        self._finalizer = weakref.finalize(self, _kill, self.process)
        os.set_blocking(self.process.stdin.fileno(), False)
        self._replies = FrameReader(self.process.stdout.fileno())
        try:
            ready = self._replies.read(time.monotonic() + STARTUP_TIMEOUT_S)
        except (TimeoutError, ValueError, OSError):
            ready = None
        if not ready or not ready.get("ready"):
            self.kill()
            raise SandboxUnavailable(explain_failure(self.log(), self.process.returncode))
        self.info = ready
        # the supervisor pre-forks blank episodes with these limits; requests may only lower them
        self.request({"op": "configure", "limits": self.config.limits(), "ready": self.config.ready_episodes},
                     STARTUP_TIMEOUT_S)
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def request(self, message: dict, timeout: float) -> dict:
        """Send one op; the supervisor answers within `timeout` (it enforces the limits itself)."""
        deadline = time.monotonic() + timeout + GRACE_S
        self._send(message, timeout, deadline)
        while self._owed:
            self._receive(timeout, deadline)
            self._owed -= 1
        return self._receive(timeout, deadline)

    def post(self, message: dict, timeout: float) -> None:
        """Send an op whose reply nobody waits for (closing an episode): the next request reads it."""
        self._send(message, timeout, time.monotonic() + timeout + GRACE_S)
        self._owed += 1

    def _send(self, message: dict, timeout: float, deadline: float) -> None:
        # returncode is set once the worker is known dead; a death not noticed yet shows on the channel
        if self.process is None or self.process.returncode is not None:
            raise WorkerLost(f"the sandbox worker is not running ({self._exit_text()})")
        try:
            write_frame(self.process.stdin.fileno(), message, deadline)
        except (OSError, ValueError) as exc:  # TimeoutError included
            self._lose(exc, timeout)

    def _receive(self, timeout: float, deadline: float) -> dict:
        try:
            body = self._replies.read_body(deadline)
            reply = None if body is None else decode(body)
        except (OSError, ValueError) as exc:  # TimeoutError included
            self._lose(exc, timeout)
        if reply is None:
            self.kill()
            raise WorkerLost(f"the sandbox worker exited ({self._exit_text()})")
        return valid_unicode(reply) if _may_hold_surrogates(body) else reply

    def _lose(self, exc: OSError | ValueError, timeout: float) -> NoReturn:
        self.kill()
        if isinstance(exc, TimeoutError):
            raise WorkerLost(f"the sandbox worker did not answer within {timeout + GRACE_S:g}s") from None
        raise WorkerLost(f"the sandbox worker's channel broke: {exc}") from None

    def log(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-20000:].decode("utf-8", "replace")

    def _exit_text(self) -> str:
        if self.process is None:
            return "never started"
        code = self.process.poll()
        tail = self.log().strip().splitlines()[-1:] or [""]
        return f"exit code {code}; {tail[0]}" if code is not None else "running"

    def stop(self) -> None:
        """Close the channel (the supervisor exits on end of input, taking its jail down)."""
        if self.process is None:
            return
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        if self.process is not None:
            _kill(self.process)
