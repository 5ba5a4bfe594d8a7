"""Rollout engines behind one interface. The transformers engine runs for real on a tiny model.
The vLLM engine (GPU) is tested in test_vllm_engine.py and held to the real vllm package by
test_vllm_contract.py."""

import pytest
import torch
from astra_grpo.engines import Generation, Sampling, cut
from astra_grpo.engines.transformers import TransformersEngine
from grpo_support import tiny_model

GREEDY = Sampling(greedy=True)
UNUSED_STOP = 49151


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", seed=1, vocab_size=512, hidden=32).eval()


def test_cut_ends_at_the_first_stop_or_the_budget():
    assert cut([5, 6, 2, 7, 2], 10, {2}) == Generation([5, 6, 2], True)
    assert cut([5, 6, 7, 8], 3, {2}) == Generation([5, 6, 7], False)
    assert cut([5, 6, 7, 2], 3, {2}) == Generation([5, 6, 7], False)  # the stop came after the budget


def test_budgets_are_per_prompt_and_results_keep_input_order(model):
    engine = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP], batch_size=2)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]
    together = engine.generate(prompts, [3, 9, 5], GREEDY)
    assert [len(g.token_ids) for g in together] == [3, 9, 5] and not any(g.stopped for g in together)
    alone = [engine.generate([p], [b], GREEDY)[0] for p, b in zip(prompts, [3, 9, 5], strict=True)]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert model.training is False


class FedTokens:
    """Counts what the model is given to read: (rows, width) of every forward call."""

    def __init__(self, model):
        self.shapes: list[tuple[int, int]] = []
        self.handle = model.register_forward_pre_hook(self.record, with_kwargs=True)

    def record(self, module, args, kwargs):
        self.shapes.append(tuple(kwargs["input_ids"].shape))

    def close(self):
        self.handle.remove()


def test_repeated_prompts_read_once_generate_as_if_read_separately(model):
    """A group's G copies of one prompt share one prefill; the continuations must not change."""
    prompts = [[30, 31, 32, 33, 34], [40, 41], [30, 31, 32, 33, 34], [40, 41], [30, 31, 32, 33, 34], [50]]
    budgets = [6, 4, 5, 7, 6, 3]
    engine = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP])
    fed = FedTokens(model)
    shared = engine.generate(prompts, budgets, GREEDY)
    fed.close()
    assert fed.shapes[0] == (3, 4)  # three distinct prompts, all but their last token, read once
    alone = [engine.generate([p], [b], GREEDY)[0] for p, b in zip(prompts, budgets, strict=True)]
    assert [g.token_ids for g in shared] == [g.token_ids for g in alone]


def test_a_later_turn_reads_only_the_new_tokens_and_generates_the_same(model):
    """Three episodes of different lengths, two turns: with their caches kept, turn 2 reads just each
    episode's observation; the greedy continuations equal re-reading everything and one episode at a time."""
    first = [[30, 31, 32, 33, 34, 35, 36], [40, 41], [50, 51, 52, 53]]
    observations = [[7, 8, 9], [10], [11, 12, 13, 14, 15]]
    kept = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP])
    turn1 = kept.generate(first, [5, 3, 4], GREEDY, keys=["a", "b", "c"])
    second = [p + g.token_ids + o for p, g, o in zip(first, turn1, observations, strict=True)]
    fed = FedTokens(model)
    turn2 = kept.generate(second, [4, 6, 2], GREEDY, keys=["a", "b", "c"])
    fed.close()
    # The last sampled token of each turn is already read; only the observations (max 5) remain.
    assert fed.shapes[0] == (3, 5) and sum(w for _, w in fed.shapes) < min(len(p) for p in second) + 6
    rereading = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP], keep_cache=False)
    assert [g.token_ids for g in turn2] == [g.token_ids for g in rereading.generate(second, [4, 6, 2], GREEDY)]
    alone = [rereading.generate([p], [b], GREEDY)[0] for p, b in zip(second, [4, 6, 2], strict=True)]
    assert [g.token_ids for g in turn2] == [g.token_ids for g in alone]
    kept.generate([second[0] + turn2[0].token_ids], [2], GREEDY, keys=["a"])
    assert set(kept._cached) == {"a"}  # the episodes that ended are forgotten


def test_a_prompt_that_does_not_extend_its_cache_is_read_whole(model):
    engine = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP])
    engine.generate([[30, 31, 32]], [3], GREEDY, keys=["a"])
    other = [60, 61, 62, 63]
    fed = FedTokens(model)
    again = engine.generate([other], [3], GREEDY, keys=["a"])
    fed.close()
    assert fed.shapes[0] == (1, 3)
    assert again[0].token_ids == engine.generate([other], [3], GREEDY)[0].token_ids


def test_repeated_prompts_still_sample_independently(model):
    torch.manual_seed(0)
    engine = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP])
    group = engine.generate([[60, 61, 62]] * 4, [12] * 4, Sampling(temperature=1.0))
    assert len({tuple(g.token_ids) for g in group}) > 1


def test_generation_stops_at_a_stop_token_and_keeps_it(model):
    free = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP]).generate([[20, 21, 22]], [12], GREEDY)[0]
    stop = free.token_ids[4]
    first = free.token_ids.index(stop)
    stopped = TransformersEngine(model, pad_id=0, stop_ids=[stop]).generate([[20, 21, 22]], [12], GREEDY)[0]
    assert stopped.stopped and stopped.token_ids == free.token_ids[:first + 1]


def test_generation_restores_training_mode_and_needs_budgets(model):
    model.train()
    engine = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP])
    engine.generate([[3, 4]], [2], Sampling())
    assert model.training
    with pytest.raises(ValueError):
        engine.generate([[3, 4]], [0], Sampling())
    model.eval()
