"""The rollout producer's staleness bound (admission control) over random rollout and update timings.

Rounds are scripted (no model): each has groups whose rewards have variance or not (Adaptive Batch Filling
keeps, holds over or discards them), its turns tagged with the version the round started at and, with
`turn` weight sync, later turns with the version current when they were played. The trainer side is the
training loop's own: `RolloutProducer.fill` with a real `BatchFiller`, then an update of a drawn duration,
then `push`."""

import threading
import time

import pytest
from astra_grpo.abf import BatchFiller
from astra_grpo.async_rollout import (
    ProducerFailed,
    RolloutProducer,
    Round,
    staleness_counts,
    staleness_metrics,
)
from astra_grpo.rollout import Episode, Group
from hypothesis import given, settings
from hypothesis import strategies as st


class ScriptedRounds:
    """Plays rounds of `batch` groups; each turn waits a drawn time and is tagged with the version current then."""

    def __init__(self, batch: int, durations: list[float], valid: list[bool], turns: int = 2):
        self.batch, self.durations, self.valid, self.turns = batch, durations, valid, turns
        self.version = 0  # the trainer's current version (what an engine taking weights between turns would have)
        self.played = 0
        self.during_update = 0  # rounds played while the trainer was updating
        self.updating = False

    def play(self, version: int) -> Round:
        index = self.played
        self.played += 1
        groups = []
        for g in range(self.batch):
            rewards = [0.0, 1.0] if self.valid[(index * self.batch + g) % len(self.valid)] else [1.0, 1.0]
            episodes = [Episode(sample={}, member=m, messages=[], token_ids=[], loss_mask=[], prompt_length=0,
                                reward=r, turn_versions=[version]) for m, r in enumerate(rewards)]
            groups.append(Group(uid=f"r{index}g{g}", sample_id="s", episodes=episodes, started_version=version))
        for _ in range(self.turns - 1):
            time.sleep(self.durations[index % len(self.durations)] / self.turns)
            self.during_update += self.updating
            for group in groups:
                for episode in group.episodes:
                    episode.turn_versions.append(self.version)
        return Round(groups, {"round": index})


def train(producer: RolloutProducer, rounds: ScriptedRounds, filler: BatchFiller, steps: int,
          update_s: list[float]) -> list[tuple[int, int]]:
    """The training loop's side; (staleness, 1 if held over by ABF) of every trained group."""
    trained = []
    for version in range(steps):
        held_over = {g.uid for g in filler.buffer}
        taken = producer.fill(filler, version, lambda rolled: None)
        trained += [(version - g.oldest_version, int(g.uid in held_over)) for g in taken.fill.batch]
        rounds.updating = True
        time.sleep(update_s[version % len(update_s)])
        rounds.updating = False
        rounds.version = version + 1
        producer.push(lambda: None, version + 1)
    return trained


@settings(max_examples=25, deadline=None)
@given(k=st.integers(0, 3), batch=st.integers(1, 3), steps=st.integers(2, 6), max_rounds=st.integers(1, 3),
       rollout_ms=st.lists(st.integers(0, 12), min_size=1, max_size=6),
       update_ms=st.lists(st.integers(0, 12), min_size=1, max_size=6),
       valid=st.lists(st.booleans(), min_size=1, max_size=7))
def test_no_group_is_trained_more_than_k_versions_stale(k, batch, steps, max_rounds, rollout_ms, update_ms, valid):
    rounds = ScriptedRounds(batch, [ms / 1000 for ms in rollout_ms], valid)
    producer = RolloutProducer(rounds.play, k, {}, 0, last_version=steps, rounds_per_step=max_rounds)
    filler = BatchFiller(n=batch, max_rounds=max_rounds)
    try:
        trained = train(producer, rounds, filler, steps, [ms / 1000 for ms in update_ms])
    finally:
        producer.close()
    assert len(trained) == steps * batch
    for staleness, held_over in trained:
        assert 0 <= staleness <= k + held_over  # ABF's buffer empties at the next step: one version more
    assert rounds.played <= steps * max_rounds  # no round that no step could take


def test_no_round_is_played_that_the_run_cannot_train():
    rounds = ScriptedRounds(1, [0.0], [True])
    producer = RolloutProducer(rounds.play, 2, {}, 0, last_version=3)
    try:
        train(producer, rounds, BatchFiller(n=1, max_rounds=1), 3, [0.05])
        time.sleep(0.2)  # time enough to play more, were it allowed
    finally:
        producer.close()
    assert rounds.played == 3 and producer.leftover() == []


def test_the_producer_plays_while_the_trainer_updates_and_k_0_does_not():
    def run(k):
        rounds = ScriptedRounds(1, [0.02], [True])
        producer = RolloutProducer(rounds.play, k, {}, 0)
        try:
            trained = train(producer, rounds, BatchFiller(n=1), 5, [0.03])
        finally:
            producer.close()
        return rounds.during_update, max(s for s, _ in trained)

    assert run(0) == (0, 0)  # k = 0: on demand, always fresh
    during, worst = run(1)
    assert during > 0 and worst == 1


def test_a_failing_producer_ends_the_trainers_wait_with_its_error():
    rounds = ScriptedRounds(1, [0.0], [True])

    def play(version):
        if rounds.played == 2:
            raise ValueError("the sandbox pool is gone")
        return rounds.play(version)

    producer = RolloutProducer(play, 1, {}, 0)
    filler = BatchFiller(n=1)
    try:
        producer.fill(filler, 0, lambda rolled: None)
        producer.push(lambda: None, 1)
        producer.fill(filler, 1, lambda rolled: None)
        producer.push(lambda: None, 2)
        with pytest.raises(ProducerFailed, match="ValueError: the sandbox pool is gone") as raised:
            producer.fill(filler, 2, lambda rolled: None)
        assert isinstance(raised.value.__cause__, ValueError)
    finally:
        producer.close()
    assert not [t for t in threading.enumerate() if t.name == "astra-grpo-rollouts"]


def test_the_stream_position_saved_is_the_last_round_taken_not_the_last_played():
    rounds = ScriptedRounds(1, [0.0], [True])
    producer = RolloutProducer(rounds.play, 2, {"round": None}, 0)
    try:
        producer.fill(BatchFiller(n=1), 0, lambda rolled: None)
        deadline = time.monotonic() + 5
        while rounds.played < 3 and time.monotonic() < deadline:  # it plays ahead while no update runs
            time.sleep(0.01)
        assert rounds.played == 3
        assert producer.stream_state() == {"round": 0}
        assert [g.uid for g in producer.leftover()] == ["r1g0", "r2g0"]
    finally:
        producer.close()


def test_staleness_histogram():
    groups = [Group(uid=str(i), sample_id="s", episodes=[Episode(sample={}, member=0, messages=[], token_ids=[],
                                                                  loss_mask=[], prompt_length=0, turn_versions=v)],
                    started_version=s)
              for i, (v, s) in enumerate([([3, 4], 3), ([4], 4), ([], 2), ([2, 3, 4], 2)])]
    assert staleness_counts(groups, 4) == {0: 1, 1: 1, 2: 2}
    assert staleness_metrics(groups, 4) == {"staleness/0": 1.0, "staleness/1": 1.0, "staleness/2": 2.0,
                                            "staleness/mean": 1.25, "staleness/max": 2.0}


def test_a_user_simulator_that_does_not_answer_ends_the_run_as_in_the_synchronous_loop():
    """LLMUnavailable comes through as itself: the CLI says it in one line (and --resume continues)."""
    from astra_core.llm import LLMUnavailable

    def play(version):
        raise LLMUnavailable("http://127.0.0.1:9/v1 did not answer")

    producer = RolloutProducer(play, 1, {}, 0)
    try:
        with pytest.raises(LLMUnavailable, match="did not answer"):
            producer.take()
    finally:
        producer.close()


def test_an_in_process_engine_takes_pushed_weights_between_turns_and_tags_them():
    """SharedEngine (the vLLM engine in asynchronous runs): a push waits for the turn being generated; every
    generation carries the version of the weights that generated it."""
    from astra_grpo.async_rollout import SharedEngine
    from astra_grpo.engines import Generation, Sampling

    class SlowEngine:
        def __init__(self):
            self.pushed, self.generating = [], False

        def generate(self, prompts, budgets, sampling, keys=None):
            self.generating = True
            time.sleep(0.2)
            self.generating = False
            return [Generation([7], True) for _ in prompts]

        def push_weights(self, model):
            self.pushed.append((model, self.generating))

    inner = SlowEngine()
    engine = SharedEngine(inner, version=3)
    turn = threading.Thread(target=lambda: engine.generate([[1]], [1], Sampling()))
    turn.start()
    time.sleep(0.05)
    engine.push_weights("policy", 4)  # arrives mid-turn: waits for it
    turn.join()
    assert inner.pushed == [("policy", False)]
    assert [g.version for g in engine.generate([[1], [2]], [1, 1], Sampling())] == [4, 4]
