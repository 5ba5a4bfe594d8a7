"""Rollout engines: token ids in, token ids out, behind one interface, chosen by name (`config.engine`).

- `transformers` (engines/transformers.py): batched `generate` on the training model itself (CPU or GPU; under
  DeepSpeed ZeRO-3 the sharded weights are gathered for the duration of a call). In an asynchronous run
  (max_staleness > 0) it generates on a copy of the model in a process of its own (engines/process.py).
- `vllm` (engines/vllm.py, extra `vllm`, GPU): a colocated vLLM instance; the trainer pushes its weights after
  every update, and it sleeps (frees its GPU memory) while the trainer trains. In an asynchronous run the
  producer and the trainer share it (engines/shared.py).
- a kind of your own: `register_engine(name, factory)`, or an entry point in the group `astra_grpo.engines`
  (engines/registry.py); then `engine: name` in the config.

An engine never sees text: prompts are token ids and it returns the ids it generated, ending
with the stop token when it stopped (token-in/token-out, so training sees exactly what was sampled).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


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


class Engine(ABC):
    """What the trainer and `astra-grpo rollout` ask of a rollout engine. `generate` and `push_weights` are the
    engine's own; the rest default to an engine that holds nothing and takes pushed weights at once."""

    # The policy version (updates done) of the newest weights pushed: `generate` samples from them after `sync`.
    version: int = 0
    # True when `push_weights` gathers ZeRO-3 shards itself, parameter by parameter (vLLM): the trainer then
    # does not gather the whole model around a push or a rollout round.
    gathers_own_weights: bool = False

    @abstractmethod
    def generate(self, prompts: list[list[int]], max_new_tokens: list[int], sampling: Sampling,
                 keys: list | None = None) -> list[Generation]:
        """One continuation per prompt, each within its own token budget (>= 1). `keys` name the episodes
        (an engine may keep an episode's state, e.g. its KV cache, from one turn to its next)."""

    @abstractmethod
    def push_weights(self, model, version: int | None = None) -> None:
        """Make the next `generate` use the trainer's current weights, as policy `version` (default: the next)."""

    def sync(self) -> None:  # noqa: B027 - a default, not abstract: most engines have nothing to do
        """Return once the weights pushed so far are the ones `generate` uses (an engine that takes them
        later, e.g. at a round's start, takes them now)."""

    def sleep(self) -> None:  # noqa: B027 - a default, not abstract: most engines have nothing to do
        """Release accelerator memory while the trainer updates (no-op where nothing is held)."""

    def wake(self) -> None:  # noqa: B027 - a default, not abstract: most engines have nothing to do
        """Undo `sleep` before generating."""

    def close(self) -> None:  # noqa: B027 - a default, not abstract: most engines have nothing to do
        """Release what the engine holds (its process, its memory); it is not used after."""

    def advance_version(self, version: int | None = None) -> int:
        """For `push_weights`: make `version` (default: one more than now) the current one; it."""
        self.version = self.version + 1 if version is None else version
        return self.version


def cut(new_ids: list[int], budget: int, stop_ids: set[int]) -> Generation:
    """The continuation up to and including its first stop token, within `budget` tokens."""
    for index, token in enumerate(new_ids[:budget]):
        if token in stop_ids:
            return Generation(list(new_ids[:index + 1]), True)
    return Generation(list(new_ids[:budget]), False)


# The registry names Engine's subclasses' modules lazily, so it is imported after the interface.
from astra_grpo.engines.registry import engine_kinds, make_engine, register_engine  # noqa: E402

__all__ = ["Engine", "Generation", "Sampling", "cut", "engine_kinds", "make_engine", "register_engine"]
