"""Adaptive Batch Filling (paper Figure 5), property-tested: never trains on a zero-variance group,
the buffer stays below n, no group is used twice, batches are full, and it stops at the round cap."""

from dataclasses import dataclass

from astra_grpo.abf import BatchFiller, is_valid, reward_std
from hypothesis import given, settings
from hypothesis import strategies as st


@dataclass
class FakeGroup:
    uid: int
    rewards: list[float]


# A group's rewards: either all equal (no signal) or drawn freely (usually some spread).
group_rewards = st.one_of(
    st.builds(lambda r, g: [r] * g, st.sampled_from([0.0, 0.5, 1.0]), st.integers(2, 4)),
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=2, max_size=4),
)


class Roller:
    """Hands out pre-drawn rounds of n groups with unique ids; counts what it handed out."""

    def __init__(self, rounds: list[list[list[float]]], n: int):
        self.rounds = rounds
        self.n = n
        self.next_uid = 0
        self.calls = 0

    def __call__(self) -> list[FakeGroup]:
        rewards = self.rounds[self.calls % len(self.rounds)]
        self.calls += 1
        groups = []
        for index in range(self.n):
            groups.append(FakeGroup(self.next_uid, rewards[index % len(rewards)]))
            self.next_uid += 1
        return groups


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 6), rounds=st.lists(st.lists(group_rewards, min_size=1, max_size=6), min_size=1, max_size=5),
       steps=st.integers(1, 6), max_rounds=st.integers(1, 5), delta=st.sampled_from([0.0, 1e-6, 0.3]))
def test_batch_filling_invariants(n, rounds, steps, max_rounds, delta):
    roller = Roller(rounds, n)
    filler = BatchFiller[FakeGroup](n=n, delta=delta, max_rounds=max_rounds)
    trained: set[int] = set()
    for _ in range(steps):
        calls_before = roller.calls
        fill = filler.fill(roller)
        rounds_used = roller.calls - calls_before
        assert 1 <= rounds_used <= max_rounds and fill.rounds == rounds_used
        assert len(fill.batch) == n  # every step trains on a full batch
        assert len(filler.buffer) < n
        assert all(is_valid(g, delta) for g in filler.buffer)
        if not fill.capped:
            assert all(reward_std(g.rewards) > delta for g in fill.batch)  # never a zero-signal group
        else:
            assert rounds_used == max_rounds and filler.buffer == []
        uids = [g.uid for g in fill.batch]
        assert len(set(uids)) == len(uids) and not trained & set(uids)  # no group used twice
        assert not {g.uid for g in filler.buffer} & set(uids)
        trained |= set(uids)
        topped_up = sum(not is_valid(g, delta) for g in fill.batch)
        assert fill.discarded == fill.rolled - fill.valid - topped_up  # every rolled group accounted for
        assert fill.rolled == rounds_used * n


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 5), max_rounds=st.integers(1, 6))
def test_all_zero_variance_rollouts_stop_at_the_round_cap(n, max_rounds):
    roller = Roller([[[1.0, 1.0, 1.0]]], n)
    filler = BatchFiller[FakeGroup](n=n, max_rounds=max_rounds)
    fill = filler.fill(roller)
    assert roller.calls == max_rounds and fill.capped
    assert fill.valid == 0 and fill.valid_fraction == 0.0
    assert len(fill.batch) == n and fill.discarded == n * max_rounds - n


def test_first_n_valid_are_trained_and_the_rest_buffered_in_order():
    rounds = [[[0.0, 1.0], [1.0, 1.0], [0.0, 1.0]]]  # valid, invalid, valid per round of 3
    filler = BatchFiller[FakeGroup](n=3)
    roller = Roller(rounds, 3)
    first = filler.fill(roller)  # round 1: 2 valid -> buffer; round 2: 2 more -> 4 >= 3
    assert first.rounds == 2 and [g.uid for g in first.batch] == [0, 2, 3]
    assert [g.uid for g in filler.buffer] == [5] and first.discarded == 2
    second = filler.fill(roller)  # buffer first, then the new round's valid groups
    assert [g.uid for g in second.batch] == [5, 6, 8] and second.from_buffer == 1 and filler.buffer == []


def test_disabled_filling_trains_on_whatever_was_rolled():
    filler = BatchFiller[FakeGroup](n=2, enabled=False)
    fill = filler.fill(Roller([[[1.0, 1.0], [0.0, 1.0]]], 2))
    assert [g.uid for g in fill.batch] == [0, 1] and fill.rounds == 1 and fill.valid == 1
    assert fill.valid_fraction == 0.5 and filler.buffer == []


@dataclass
class FailedGroup(FakeGroup):
    failed: bool = True


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 0.5, 1.0])),
                min_size=1, max_size=8))
def test_reward_std_never_raises_and_non_finite_rewards_are_never_valid(rewards):
    """statistics.stdev raised on inf/NaN rewards and ended the run; now such a group is just invalid."""
    import math

    std = reward_std(rewards)
    finite = all(math.isfinite(r) for r in rewards)
    assert math.isnan(std) if not finite else std >= 0
    assert is_valid(FakeGroup(0, rewards), 1e-6) == (finite and math.isfinite(std) and std > 1e-6)


def test_a_group_with_a_failed_episode_is_invalid_and_never_trained_on():
    filler = BatchFiller[FakeGroup](n=1, delta=1e-6, max_rounds=3)
    rounds = iter([[FailedGroup(0, [0.0, 1.0])], [FakeGroup(1, [0.0, 1.0])]])
    fill = filler.fill(lambda: next(rounds))
    assert [g.uid for g in fill.batch] == [1] and fill.discarded == 1 and fill.rounds == 2
