"""pass^k and pass@k over repeated trials of one task (AReaL-SEA's definitions, tau-bench's estimator).

With n trials of which c succeeded, over all k-subsets of the trials:

- pass^k: the share of k-subsets in which *every* trial succeeded, C(c, k) / C(n, k)
  (with n == k this is 1 iff all k trials succeed);
- pass@k: the share of k-subsets with *at least one* success, 1 - C(n - c, k) / C(n, k).

A benchmark's figure is the mean over its tasks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from math import comb


def _check(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= successes <= trials, got {c} of {n}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= trials ({n}), got k={k}")


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one task: n trials, c successes."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k for one task: n trials, c successes."""
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def task_outcomes(records: Iterable[Mapping]) -> dict[str, list[bool]]:
    """Successes of each item's trials (eval_result records), in trial order."""
    trials: dict[str, dict[int, bool]] = {}
    for record in records:
        trials.setdefault(record["item_id"], {})[int(record["trial"])] = bool(record["success"])
    return {item: [ok for _, ok in sorted(by_trial.items())] for item, by_trial in trials.items()}


def mean_pass(outcomes: Mapping[str, Sequence[bool]], k: int, *, at: bool = False) -> float:
    """Mean pass^k (or pass@k with at=True) over tasks. Every task needs at least k trials."""
    if not outcomes:
        raise ValueError("no tasks")
    metric = pass_at_k if at else pass_hat_k
    return sum(metric(len(trials), sum(trials), k) for trials in outcomes.values()) / len(outcomes)
