"""pass^k and pass@k against brute-force enumeration of k-subsets of trials (hypothesis)."""

from __future__ import annotations

import itertools
import statistics

import pytest
from astra_eval.metrics import mean_pass, pass_at_k, pass_hat_k, task_outcomes
from hypothesis import given
from hypothesis import strategies as st


@st.composite
def trials_and_k(draw):
    outcomes = draw(st.lists(st.booleans(), min_size=1, max_size=9))
    k = draw(st.integers(min_value=1, max_value=len(outcomes)))
    return outcomes, k


def brute_force(outcomes: list[bool], k: int) -> tuple[float, float]:
    subsets = list(itertools.combinations(outcomes, k))
    return (sum(all(s) for s in subsets) / len(subsets), sum(any(s) for s in subsets) / len(subsets))


@given(trials_and_k())
def test_pass_hat_k_and_pass_at_k_equal_enumeration_over_all_k_subsets(case):
    outcomes, k = case
    every, some = brute_force(outcomes, k)
    assert pass_hat_k(len(outcomes), sum(outcomes), k) == pytest.approx(every)
    assert pass_at_k(len(outcomes), sum(outcomes), k) == pytest.approx(some)


@given(st.dictionaries(st.text(min_size=1, max_size=4), st.lists(st.booleans(), min_size=4, max_size=4),
                       min_size=1, max_size=6), st.integers(min_value=1, max_value=4))
def test_benchmark_figure_is_the_mean_over_tasks(outcomes, k):
    expected = statistics.fmean(brute_force(trials, k)[0] for trials in outcomes.values())
    assert mean_pass(outcomes, k) == pytest.approx(expected)
    expected_at = statistics.fmean(brute_force(trials, k)[1] for trials in outcomes.values())
    assert mean_pass(outcomes, k, at=True) == pytest.approx(expected_at)


@given(trials_and_k())
def test_with_k_equal_trials_pass_hat_k_is_all_succeed_and_pass_at_k_is_any(case):
    outcomes, _ = case
    n = len(outcomes)
    assert pass_hat_k(n, sum(outcomes), n) == float(all(outcomes))
    assert pass_at_k(n, sum(outcomes), n) == float(any(outcomes))


def test_pass_hat_k_never_rises_with_k_and_pass_at_k_never_falls():
    for n, c in [(4, 3), (8, 5), (5, 5), (6, 0)]:
        hats = [pass_hat_k(n, c, k) for k in range(1, n + 1)]
        ats = [pass_at_k(n, c, k) for k in range(1, n + 1)]
        assert hats == sorted(hats, reverse=True) and ats == sorted(ats)


def test_task_outcomes_orders_trials_and_bad_inputs_raise():
    rows = [{"item_id": "a", "trial": 1, "success": False}, {"item_id": "a", "trial": 0, "success": True}]
    assert task_outcomes(rows) == {"a": [True, False]}
    with pytest.raises(ValueError):
        pass_hat_k(3, 1, 4)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        mean_pass({}, 1)
