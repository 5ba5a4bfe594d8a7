"""Rollout engines: token ids in, token ids out, behind one small interface.

- `TransformersEngine`: batched `generate` on the training model itself (CPU or GPU; under
  DeepSpeed ZeRO-3 the sharded weights are gathered for the duration of a call).
- `VLLMEngine` (extra `vllm`, GPU): a colocated vLLM instance; the trainer pushes its weights
  after every update, and it sleeps (frees its GPU memory) while the trainer trains.

An engine never sees text: prompts are token ids and it returns the ids it generated, ending
with the stop token when it stopped (token-in/token-out, so training sees exactly what was sampled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    greedy: bool = False  # argmax instead of sampling (benchmarks, evaluation)


@dataclass
class Generation:
    token_ids: list[int]  # generated ids; the last one is a stop token iff `stopped`
    stopped: bool         # ended with a stop token (else it was cut at its token budget)
    # The sampler's log-prob of each generated token, where the engine reports them (vLLM): the
    # denominator of the rollout/trainer importance-sampling correction (engines/correction.py).
    logprobs: list[float] | None = None
    # The policy version (updates done) whose weights generated it, where the engine knows (asynchronous runs).
    version: int | None = None


class Engine(Protocol):
    def generate(self, prompts: list[list[int]], max_new_tokens: list[int], sampling: Sampling,
                 keys: list | None = None) -> list[Generation]:
        """One continuation per prompt, each within its own token budget (>= 1). `keys` name the episodes
        (an engine may keep an episode's state, e.g. its KV cache, from one turn to its next)."""

    def push_weights(self, model) -> None:
        """Make the next `generate` use the trainer's current weights."""

    def sleep(self) -> None:
        """Release accelerator memory while the trainer updates (no-op where nothing is held)."""

    def wake(self) -> None:
        """Undo `sleep` before generating."""


def cut(new_ids: list[int], budget: int, stop_ids: set[int]) -> Generation:
    """The continuation up to and including its first stop token, within `budget` tokens."""
    for index, token in enumerate(new_ids[:budget]):
        if token in stop_ids:
            return Generation(list(new_ids[:index + 1]), True)
    return Generation(list(new_ids[:budget]), False)
