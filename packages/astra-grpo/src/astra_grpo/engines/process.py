"""The transformers rollout engine in a process of its own, for asynchronous GRPO (max_staleness > 0).

The trainer updates its model while this process generates with a copy of it: each on its own thread
(torch.set_num_threads(1) here; on a 2-core machine rollouts take one core and the update the other).
After each update the trainer sends the new weights with their version (`push_weights`: a state dict
through a torch.multiprocessing queue, i.e. shared memory); the process takes them

- `weight_sync: turn`: before its next generate call, i.e. between two turns of the episodes in flight,
  which continue on the newer policy (every Generation carries the version that generated it);
- `weight_sync: episode`: only when the producer calls `sync()` at the start of a rollout round.

New weights make the episodes' KV caches stale: they are dropped and re-read. Every sampled token's
log-prob is reported (the behaviour policy of the decoupled objective).

Failures end the run, never hang it: an error in the process comes back as `EngineError` with its
traceback; a process that dies (killed, out of memory) is noticed within `POLL_S` and raised as
`EngineError` with its exit code; `close()` stops and joins it (terminating it when it does not stop).
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable

import torch
import torch.multiprocessing as mp

from astra_grpo.engines import Engine, Generation, Sampling

POLL_S = 0.2  # how often a waiting caller checks that the process is alive


class EngineError(RuntimeError):
    """The engine process failed or died."""


class EngineProcess(Engine):
    """An `Engine` whose generate runs in a child process on a copy of `model`, at version `version`."""

    def __init__(self, model, pad_id: int, stop_ids: list[int], *, batch_size: int, seed: int,
                 weight_sync: str = "turn", version: int = 0, threads: int = 1,
                 stopping: Callable[[], bool] = lambda: False):
        context = mp.get_context("spawn")
        self._requests, self._replies = context.Queue(), context.Queue()
        self._stopping = stopping  # a caller waiting for a reply gives up when this turns true
        self._lock = threading.Lock()  # one generate at a time: replies come back in order
        self._pushed = None  # the last state dict sent: kept alive until the process has copied it
        self.version = version
        self._process = context.Process(
            target=_serve, name="astra-grpo-engine", daemon=True,
            args=(type(model), model.config, _copy(model.state_dict()), next(model.parameters()).dtype, pad_id,
                  list(stop_ids), batch_size, seed, weight_sync, version, threads, self._requests, self._replies))
        self._process.start()
        self._wait("ready")

    # -- Engine -------------------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], max_new_tokens: list[int], sampling: Sampling,
                 keys: list | None = None) -> list[Generation]:
        with self._lock:
            self._requests.put(("generate", prompts, max_new_tokens, sampling, keys))
            return self._wait("generated")

    def push_weights(self, model, version: int | None = None) -> None:
        """Send the trainer's current weights (taken as `version`, default the next one) to the process."""
        self.advance_version(version)
        self._pushed = _copy(model.state_dict())
        self._requests.put(("weights", self.version, self._pushed))

    def sync(self) -> None:
        """Take the newest pushed weights now (weight_sync: episode, at a round's start)."""
        with self._lock:
            self._requests.put(("sync",))
            self._wait("synced")

    # sleep, wake: nothing to release, the process keeps its copy (Engine's defaults)

    def close(self, timeout: float = 10.0) -> None:
        """Stop and join the process (terminated when it does not stop within `timeout`)."""
        if self._process.is_alive():
            self._requests.put(("stop",))
            self._process.join(timeout)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout)
        for channel in (self._requests, self._replies):
            channel.close()
            channel.cancel_join_thread()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def _wait(self, expected: str):
        while True:
            try:
                kind, payload = self._replies.get(timeout=POLL_S)
            except queue.Empty:
                if not self._process.is_alive():
                    raise EngineError(f"the rollout engine process died (exit code {self._process.exitcode})") from None
                if self._stopping():
                    raise EngineError("the rollout engine was stopped while it generated") from None
                continue
            if kind == "error":
                raise EngineError(f"the rollout engine process failed:\n{payload}")
            if kind != expected:
                raise EngineError(f"the rollout engine process answered {kind!r} where {expected!r} was due")
            return payload


def _copy(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A detached copy the trainer's next update does not change."""
    return {name: tensor.detach().clone() for name, tensor in state.items()}


def _serve(model_class, model_config, state, dtype, pad_id, stop_ids, batch_size, seed, weight_sync, version,
           threads, requests, replies) -> None:
    """The process: build the model, then answer requests in order until "stop"."""
    try:
        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        from astra_grpo.engines.transformers import TransformersEngine

        model = model_class(model_config).to(dtype)
        model.load_state_dict(state)
        model.eval()
        engine = TransformersEngine(model, pad_id, stop_ids, batch_size=batch_size, report_logprobs=True)
        pending = None
        replies.put(("ready", None))
    except BaseException:  # noqa: BLE001 - whatever failed is reported to the trainer
        replies.put(("error", traceback.format_exc()))
        return
    while True:
        request = requests.get()
        try:
            if request[0] == "stop":
                return
            if request[0] == "weights":
                pending = request[1:]
                if weight_sync == "turn":
                    version, pending = _take(engine, pending), None
            elif request[0] == "sync":
                if pending is not None:
                    version, pending = _take(engine, pending), None
                replies.put(("synced", None))
            elif request[0] == "generate":
                generations = engine.generate(*request[1:])
                for generation in generations:
                    generation.version = version
                replies.put(("generated", generations))
        except Exception:  # noqa: BLE001
            replies.put(("error", traceback.format_exc()))


def _take(engine, pending: tuple[int, dict]) -> int:
    """Load pushed weights into the engine's model (dropping its stale caches); their version."""
    version, state = pending
    with torch.no_grad():
        engine.model.load_state_dict(state)
    engine.reset()
    return version
