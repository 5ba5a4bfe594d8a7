"""SessionPool: warm, pre-started jailed workers, one episode (or program) per worker at a time.

Starting nsjail and Python costs tens of milliseconds; a warm worker serves each tool call in well
under one, and keeps its next blank episode prepared (the pool's ready queue: one per worker), so
opening an episode never waits for process start-up. A worker that dies or stops answering is
replaced in the background.

    with SessionPool(size=4, config=config) as pool:
        with pool.session(code) as session: ...       # thread-safe: one session per thread
        result = pool.run_code({"code": "print(1)"})   # SandboxFusion shape
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from astra_sandbox.config import SandboxConfig
from astra_sandbox.errors import SandboxError
from astra_sandbox.jail import warn_if_unsafe
from astra_sandbox.session import Session
from astra_sandbox.worker import Worker


class SessionPool:
    def __init__(self, size: int = 2, config: SandboxConfig | None = None):
        if size < 1:
            raise ValueError(f"SessionPool size must be >= 1, got {size}")
        self.size = size
        self.config = config or SandboxConfig()
        self._idle: queue.Queue[Worker] = queue.Queue()
        self._closed = False
        self._lock = threading.Lock()
        self._workers: set[Worker] = set()
        warn_if_unsafe(self.config)
        with ThreadPoolExecutor(max_workers=min(size, 8)) as starter:
            started = list(starter.map(lambda _: self._try_start(), range(size)))
        failures = [item for item in started if isinstance(item, BaseException)]
        if failures:
            for item in started:
                if isinstance(item, Worker):
                    item.stop()
            raise failures[0]
        for worker in started:
            self._adopt(worker)

    def _try_start(self) -> Worker | BaseException:
        try:
            return Worker(self.config).start()
        except Exception as exc:  # noqa: BLE001 - re-raised by the caller
            return exc

    def _adopt(self, worker: Worker) -> None:
        with self._lock:
            self._workers.add(worker)
        self._idle.put(worker)

    # -- acquiring and releasing workers -------------------------------------------------------
    def _acquire(self, timeout: float | None) -> Worker:
        if self._closed:
            raise SandboxError("the pool is closed")
        try:
            worker = self._idle.get(timeout=timeout)
        except queue.Empty:
            raise SandboxError(f"no sandbox worker became free within {timeout}s (pool size {self.size})") from None
        if not worker.alive:  # died while idle: replace it now
            self._forget(worker)
            worker = Worker(self.config).start()
            with self._lock:
                self._workers.add(worker)
        return worker

    def _release(self, worker: Worker) -> None:
        if self._closed:
            worker.stop()
            self._forget(worker)
        elif worker.alive:
            self._idle.put(worker)
        else:
            self._forget(worker)
            threading.Thread(target=self._replace, daemon=True, name="astra-sandbox-replace").start()

    def _replace(self) -> None:
        worker = self._try_start()
        if not isinstance(worker, Worker):
            print(f"astra-sandbox: could not replace a lost worker ({worker}); the pool has "
                  f"{self.workers_alive} of {self.size}", file=sys.stderr)
            return
        if self._closed:
            worker.stop()
        else:
            self._adopt(worker)

    def _forget(self, worker: Worker) -> None:
        worker.kill()
        with self._lock:
            self._workers.discard(worker)

    # -- public API ----------------------------------------------------------------------------
    def session(self, code: str, requirements: Iterable[str] = (), *, wait_s: float | None = None) -> Session:
        """Start an episode of `code` on a free worker (blocking up to `wait_s` for one)."""
        worker = self._acquire(wait_s)
        return Session(worker, self.config, code, requirements, release=self._release)

    def run_code(self, request: dict, *, wait_s: float | None = None) -> dict:
        """Run one SandboxFusion-shaped request on a free worker."""
        from astra_sandbox.run_code import execute

        worker = self._acquire(wait_s)
        try:
            return execute(worker, request, self.config)
        finally:
            self._release(worker)

    def episode_status(self, timeout: float = 5.0) -> list[dict]:
        """What the idle workers' supervisors hold: `ready` (pids, in the jail, of the blank episodes
        prepared for the next session), `loaded` (an environment loaded ahead for its next open),
        `running` (None when idle) and `ending` (closed, not yet reaped)."""
        idle: list[Worker] = []
        while True:
            try:
                idle.append(self._idle.get_nowait())
            except queue.Empty:
                break
        try:
            return [worker.request({"op": "status"}, timeout) for worker in idle if worker.alive]
        finally:
            for worker in idle:
                self._release(worker)

    def worker_pids(self) -> list[int]:
        """Host pids of the live workers (nsjail, or the supervisor in unsafe mode)."""
        with self._lock:
            return [worker.process.pid for worker in self._workers if worker.alive]

    @property
    def workers_alive(self) -> int:
        with self._lock:
            return sum(worker.alive for worker in self._workers)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            workers, self._workers = list(self._workers), set()
        for worker in workers:
            worker.stop()

    def __enter__(self) -> SessionPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
