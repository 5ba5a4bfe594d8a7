"""One sandbox worker: a long-lived jailed supervisor process and the framed pipes to it."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import weakref

from astra_sandbox.config import SandboxConfig
from astra_sandbox.errors import SandboxUnavailable, WorkerLost
from astra_sandbox.inside.framing import read_frame, write_frame
from astra_sandbox.jail import explain_failure, launch_command

STARTUP_TIMEOUT_S = 20.0
GRACE_S = 2.0  # the supervisor enforces the limits; the host waits this much longer before giving up on it


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

    def start(self) -> Worker:
        argv, env = launch_command(self.config)
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                        env=env, close_fds=True, start_new_session=True)
        self._finalizer = weakref.finalize(self, _kill, self.process)
        os.set_blocking(self.process.stdin.fileno(), False)
        try:
            ready = read_frame(self.process.stdout.fileno(), time.monotonic() + STARTUP_TIMEOUT_S)
        except (TimeoutError, ValueError, OSError):
            ready = None
        if not ready or not ready.get("ready"):
            self.kill()
            raise SandboxUnavailable(explain_failure(self.log(), self.process.returncode))
        self.info = ready
        # the supervisor pre-forks blank episodes with these limits; requests may only lower them
        self.request({"op": "configure", "limits": self.config.limits()}, STARTUP_TIMEOUT_S)
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def request(self, message: dict, timeout: float) -> dict:
        """Send one op; the supervisor answers within `timeout` (it enforces the limits itself)."""
        if not self.alive:
            raise WorkerLost(f"the sandbox worker is not running ({self._exit_text()})")
        deadline = time.monotonic() + timeout + GRACE_S
        try:
            write_frame(self.process.stdin.fileno(), message, deadline)
            reply = read_frame(self.process.stdout.fileno(), deadline)
        except TimeoutError:
            self.kill()
            raise WorkerLost(f"the sandbox worker did not answer within {timeout + GRACE_S:g}s") from None
        except (OSError, ValueError) as exc:
            self.kill()
            raise WorkerLost(f"the sandbox worker's channel broke: {exc}") from None
        if reply is None:
            self.kill()
            raise WorkerLost(f"the sandbox worker exited ({self._exit_text()})")
        return reply

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
