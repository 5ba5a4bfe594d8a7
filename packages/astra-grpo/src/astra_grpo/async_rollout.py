"""Where a training step's rollout rounds come from: played on demand, or ahead by a producer (asynchronous GRPO).

A *round* is `batch_size` new groups played together; Adaptive Batch Filling takes rounds until it has a batch.
The policy *version* is the number of updates done: a step that trains with version v pushes version v + 1.

- `max_staleness: 0` (`OnDemandRounds`): a round is played when the batch filler asks for one, with the current
  weights, in the trainer's thread: the synchronous loop (roll out, then update), unchanged.
- `max_staleness: k > 0` (`RolloutProducer`): a thread plays rounds ahead while the trainer updates, and hands
  them over in order. Staleness is enforced at admission, as AReaL does (`max_head_offpolicyness`): the producer
  starts a round only when the step that will train it is at most k versions ahead of the current one. Every step
  takes at least one round, so a round started while q rounds wait to be taken is trained at most q steps later
  (q + 1 when the trainer is updating, not asking): the producer starts one while that is <= k. Nothing played is
  thrown away for its age (no rollout wasted, the producer simply waits), and the bound holds for every trained
  group whatever the timings (tests/test_async_rollout.py). A group that Adaptive Batch Filling holds over to the
  next step (its buffer always empties at the next step) is one version older, as in the synchronous loop.
  With `weight_sync: turn` an episode's later turns are newer than its first: its staleness is its oldest turn's.
  Near the end it starts no round that the steps left could not take (at most ABF's round cap per step).

The producer owns the sample stream while it runs: the position saved with a step is the one after the last
round trained (`stream_state`), so a resumed run re-rolls the rounds that were in flight, never trains one twice.
A producer that fails ends the run with its error at the trainer's next `take`; `close` stops and joins it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from astra_core.llm import LLMUnavailable

from astra_grpo.abf import BatchFiller, Fill
from astra_grpo.engines.shared import SharedEngine  # noqa: F401 - its old home (tests, callers)
from astra_grpo.rollout import Group


@dataclass
class Round:
    groups: list[Group]
    stream_after: dict  # the sample stream's position after this round's prompts


@dataclass
class StepRounds:
    """What one training step took from its source."""

    fill: Fill
    rolled: list[Group] = field(default_factory=list)  # every group of every round taken this step
    waited_s: float = 0.0  # seconds the trainer waited for rollouts


PlayRound = Callable[[int], Round]  # plays one round with the engine's current weights; its version given


class OnDemandRounds:
    """max_staleness 0: rounds played when asked for, with the engine woken for them (the synchronous loop)."""

    def __init__(self, play: PlayRound, engine, stream_state: dict):
        self._play, self._engine = play, engine
        self._stream_state = stream_state
        self.busy_s = 0.0  # seconds spent playing, over the run

    def fill(self, filler: BatchFiller, version: int, on_round: Callable[[list[Group]], None]) -> StepRounds:
        taken = StepRounds(fill=None)  # type: ignore[arg-type]

        def take() -> list[Group]:
            started = time.perf_counter()
            played = self._play(version)
            self.busy_s += time.perf_counter() - started
            self._stream_state = played.stream_after
            taken.rolled.extend(played.groups)
            on_round(taken.rolled)
            return played.groups

        started = time.perf_counter()
        self._engine.wake()
        taken.fill = filler.fill(take)
        self._engine.sleep()
        taken.waited_s = time.perf_counter() - started
        return taken

    def push(self, push_weights: Callable[[], None], version: int) -> None:
        push_weights()

    def stream_state(self) -> dict:
        return self._stream_state

    def leftover(self) -> list[Group]:
        return []

    def close(self) -> None:
        pass


class ProducerFailed(RuntimeError):
    """The rollout producer ended with an error (its cause is chained)."""


class RolloutProducer:
    """max_staleness k > 0: a thread playing rounds ahead of the trainer, at most k versions stale when trained."""

    def __init__(self, play: PlayRound, max_staleness: int, stream_state: dict, version: int,
                 before_round: Callable[[], None] = lambda: None, last_version: int | None = None,
                 rounds_per_step: int = 1):
        self._play, self._k, self._before_round = play, max_staleness, before_round
        # The run ends after the update of `last_version - 1`: no round is started that no step could take.
        self._last_version, self._rounds_per_step = last_version, rounds_per_step
        self._updating = False  # between a step's last round and its weight push
        self._taken_in_step = 0  # rounds the current step took so far
        self._stream_state = stream_state
        self._version = version
        self._ready: deque[Round] = deque()
        self._playing = False
        self._asking = False  # the trainer is blocked in take(): the round it waits for trains at this version
        self._stopping = False
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self.busy_s = 0.0
        self._thread = threading.Thread(target=self._run, name="astra-grpo-rollouts", daemon=True)
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stopping

    # -- producer thread ----------------------------------------------------------------------------
    def _steps_until_trained(self) -> int:
        """How many versions behind a round started now would be when trained, at worst (see the module doc)."""
        return len(self._ready) + int(self._playing) + (0 if self._asking else 1)

    def _rounds_wanted(self) -> bool:
        """Whether the steps left could take one more round than those played and playing (at most
        `rounds_per_step` each: Adaptive Batch Filling's cap)."""
        if self._last_version is None:
            return True
        this_step = 0 if self._updating else self._rounds_per_step - self._taken_in_step
        later_steps = (self._last_version - self._version - 1) * self._rounds_per_step
        return len(self._ready) + int(self._playing) < this_step + later_steps

    def _run(self) -> None:
        try:
            while True:
                with self._changed:
                    self._changed.wait_for(
                        lambda: self._stopping or (self._steps_until_trained() <= self._k and self._rounds_wanted()))
                    if self._stopping:
                        return
                    self._playing = True
                    version = self._version
                started = time.perf_counter()
                self._before_round()
                played = self._play(version)
                with self._changed:
                    self.busy_s += time.perf_counter() - started
                    self._ready.append(played)
                    self._playing = False
                    self._changed.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer, which raises it
            with self._changed:
                self._error = exc
                self._playing = False
                self._changed.notify_all()

    # -- trainer side -------------------------------------------------------------------------------
    def take(self) -> Round:
        with self._changed:
            self._asking = True
            self._changed.notify_all()
            try:
                self._changed.wait_for(lambda: self._ready or self._error is not None)
            finally:
                self._asking = False
            if not self._ready:
                if isinstance(self._error, LLMUnavailable):  # the user simulator's endpoint: said in one line
                    raise self._error
                raise ProducerFailed(f"the rollout producer failed: {type(self._error).__name__}: "
                                     f"{self._error}") from self._error
            played = self._ready.popleft()
            self._taken_in_step += 1
            self._stream_state = played.stream_after
            self._changed.notify_all()
            return played

    def fill(self, filler: BatchFiller, version: int, on_round: Callable[[list[Group]], None]) -> StepRounds:
        taken = StepRounds(fill=None)  # type: ignore[arg-type]

        def take() -> list[Group]:
            started = time.perf_counter()
            played = self.take()
            taken.waited_s += time.perf_counter() - started
            taken.rolled.extend(played.groups)
            on_round(taken.rolled)
            return played.groups

        taken.fill = filler.fill(take)
        with self._changed:
            self._updating = True
        return taken

    def push(self, push_weights: Callable[[], None], version: int) -> None:
        """The update of `version` is done: send its weights, then let rounds start at it."""
        push_weights()
        with self._changed:
            self._version, self._updating, self._taken_in_step = version, False, 0
            self._changed.notify_all()

    def stream_state(self) -> dict:
        """The stream position after the last round taken (rounds in flight are re-rolled on resume)."""
        return self._stream_state

    def leftover(self) -> list[Group]:
        """Groups played but never taken (after `close`)."""
        return [g for played in self._ready for g in played.groups]

    def close(self, timeout: float = 30.0) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"the rollout producer did not stop within {timeout:.0f} s")


def staleness_counts(groups: list[Group], version: int) -> dict[int, int]:
    """How many of `groups` are 0, 1, ... versions behind `version` (by their oldest turn)."""
    counts: dict[int, int] = {}
    for group in groups:
        lag = version - group.oldest_version
        counts[lag] = counts.get(lag, 0) + 1
    return dict(sorted(counts.items()))


def staleness_metrics(groups: list[Group], version: int) -> dict[str, float]:
    """The step's staleness histogram (`staleness/N`: groups N versions behind) and its mean and max."""
    counts = staleness_counts(groups, version)
    total = sum(counts.values())
    metrics = {f"staleness/{lag}": float(n) for lag, n in counts.items()}
    metrics["staleness/mean"] = sum(lag * n for lag, n in counts.items()) / total if total else 0.0
    metrics["staleness/max"] = float(max(counts, default=0))
    return metrics
