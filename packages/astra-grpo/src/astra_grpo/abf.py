"""Adaptive Batch Filling (paper section 3.1, Figure 5).

A GRPO group is *valid* when the std of its rewards exceeds delta: otherwise every advantage is
zero and the group teaches nothing while still diluting the batch. A group with a failed episode
(`failed`, e.g. a tool crash) or a reward that is not a finite number is invalid too. Each training step:

    pool = buffer + valid groups of a new rollout batch      (the buffer holds valid groups only)
    if |pool| >= n: train on pool[:n], buffer = pool[n:]      (|buffer| < n always)
    else:           buffer = pool, roll out another batch     (up to max_rounds)

Invalid groups are discarded. If the round cap is reached, the batch is the buffer topped up with
the last round's zero-signal groups, so every step (and every process) trains on exactly n groups.
Every process runs the same filler on the same gathered groups, so decisions agree everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class HasRewards(Protocol):
    rewards: Sequence[float]


def reward_std(rewards: Sequence[float]) -> float:
    """Sample std (Bessel), as used for the advantages; NaN when a reward is not finite."""
    if not all(math.isfinite(r) for r in rewards):
        return math.nan
    if len(rewards) < 2 or max(rewards) == min(rewards):
        return 0.0
    try:
        mean = math.fsum(rewards) / len(rewards)
        return math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    except OverflowError:
        return math.inf  # finite rewards too far apart to measure: no usable signal either


def is_valid(group: HasRewards, delta: float) -> bool:
    if getattr(group, "failed", False):
        return False
    std = reward_std(group.rewards)
    return math.isfinite(std) and std > delta


@dataclass
class Fill[G: HasRewards]:
    """One step's batch and what it took to get it."""

    batch: list[G]
    rounds: int = 0
    rolled: int = 0        # groups rolled out this step
    valid: int = 0         # of which valid
    discarded: int = 0     # invalid groups thrown away
    capped: bool = False   # the round cap was hit and zero-signal groups filled the batch
    from_buffer: int = 0   # groups of the batch that came from the buffer

    @property
    def valid_fraction(self) -> float:
        return self.valid / self.rolled if self.rolled else 0.0


@dataclass
class BatchFiller[G: HasRewards]:
    n: int
    delta: float = 1e-6
    max_rounds: int = 8
    enabled: bool = True
    buffer: list[G] = field(default_factory=list)

    def fill(self, rollout: Callable[[], list[G]]) -> Fill[G]:
        """Call `rollout()` (a batch of new groups) until n valid groups exist or the cap is hit."""
        if not self.enabled:
            groups = rollout()
            valid = sum(is_valid(g, self.delta) for g in groups)
            return Fill(batch=groups[:self.n], rounds=1, rolled=len(groups), valid=valid)
        fill = Fill[G](batch=[], from_buffer=len(self.buffer))
        last_invalid: list[G] = []
        while fill.rounds < self.max_rounds:
            groups = rollout()
            fill.rounds += 1
            fill.rolled += len(groups)
            valid = [g for g in groups if is_valid(g, self.delta)]
            last_invalid = [g for g in groups if not is_valid(g, self.delta)]
            fill.valid += len(valid)
            fill.discarded += len(last_invalid)
            pool = self.buffer + valid
            if len(pool) >= self.n:
                fill.batch, self.buffer = pool[:self.n], pool[self.n:]
                fill.from_buffer = min(fill.from_buffer, self.n)
                return fill
            self.buffer = pool
        top_up = last_invalid[:self.n - len(self.buffer)]
        fill.batch, self.buffer = self.buffer + top_up, []
        fill.discarded -= len(top_up)
        fill.capped = True
        return fill
