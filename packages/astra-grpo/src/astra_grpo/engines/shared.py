"""An in-process engine shared by the rollout producer and the trainer (vLLM in asynchronous runs).

The producer's thread generates while the trainer's thread pushes: a push waits for the turn being generated
(weight_sync: turn), and every generation carries the version of the weights that generated it.
"""

from __future__ import annotations

import threading

from astra_grpo.engines import Engine


class SharedEngine(Engine):
    """`engine` behind a lock, starting at policy `version`. (Asynchronous runs are one process without ZeRO-3:
    nothing is gathered, so `gathers_own_weights` is moot.)"""

    def __init__(self, engine, version: int):
        self._engine, self.version = engine, version
        self._lock = threading.Lock()

    def generate(self, *args, **kwargs):
        with self._lock:
            generations = self._engine.generate(*args, **kwargs)
            for generation in generations:
                generation.version = self.version
            return generations

    def push_weights(self, model, version: int | None = None) -> None:
        with self._lock:
            self._engine.push_weights(model)
            self.advance_version(version)

    # sync: nothing pending, weights are taken when pushed. sleep, wake: an engine generating while the
    # trainer updates never sleeps. close: the engine's own lifetime is the trainer's. (Engine's defaults.)
