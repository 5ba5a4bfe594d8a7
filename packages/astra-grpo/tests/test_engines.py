"""Rollout engines behind one interface. The transformers engine runs for real on a tiny model.
The vLLM engine (GPU) is tested in test_vllm_engine.py and held to the real vllm package by
test_vllm_contract.py."""

import pytest
import torch
from astra_grpo.engines import Generation, Sampling, cut
from astra_grpo.engines.transformers import TransformersEngine
from grpo_support import tiny_model

NEAR_GREEDY = Sampling(temperature=1e-5)
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
    together = engine.generate(prompts, [3, 9, 5], NEAR_GREEDY)
    assert [len(g.token_ids) for g in together] == [3, 9, 5] and not any(g.stopped for g in together)
    alone = [engine.generate([p], [b], NEAR_GREEDY)[0] for p, b in zip(prompts, [3, 9, 5], strict=True)]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert model.training is False


def test_repeated_prompts_read_once_generate_as_if_read_separately(model):
    """A group's G copies of one prompt share one prefill; the continuations must not change."""
    prompts = [[30, 31, 32, 33, 34], [40, 41], [30, 31, 32, 33, 34], [40, 41], [30, 31, 32, 33, 34], [50]]
    budgets = [6, 4, 5, 7, 6, 3]
    engine = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP])
    assert engine._shared_prompt_cache(*_padded(prompts)) is not None  # the shared path is the one taken
    shared = engine.generate(prompts, budgets, NEAR_GREEDY)
    alone = [engine.generate([p], [b], NEAR_GREEDY)[0] for p, b in zip(prompts, budgets, strict=True)]
    assert [g.token_ids for g in shared] == [g.token_ids for g in alone]
    assert engine._shared_prompt_cache(*_padded([[1, 2], [3, 4]])) is None


def test_each_row_gets_the_cache_of_its_own_prompt(model):
    """Row by row, the shared cache equals what reading every prompt separately would give."""
    input_ids, attention = _padded([[30, 31, 32, 33, 34], [40, 41], [30, 31, 32, 33, 34], [40, 41], [50]])
    shared = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP])._shared_prompt_cache(input_ids, attention)
    mask = attention[:, :-1]
    with torch.no_grad():
        separate = model(input_ids=input_ids[:, :-1], attention_mask=mask,
                         position_ids=(mask.cumsum(-1) - 1).masked_fill(mask == 0, 1), use_cache=True).past_key_values
    for ours, reference in zip(shared.layers, separate.layers, strict=True):
        kept = mask.bool()  # what padding positions hold is never attended to
        assert torch.allclose(ours.keys.transpose(1, 2)[kept], reference.keys.transpose(1, 2)[kept], atol=1e-5)
        assert torch.allclose(ours.values.transpose(1, 2)[kept], reference.values.transpose(1, 2)[kept], atol=1e-5)


def test_repeated_prompts_still_sample_independently(model):
    torch.manual_seed(0)
    engine = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP])
    group = engine.generate([[60, 61, 62]] * 4, [12] * 4, Sampling(temperature=1.0))
    assert len({tuple(g.token_ids) for g in group}) > 1


def _padded(prompts):
    width = max(len(p) for p in prompts)
    return (torch.tensor([[0] * (width - len(p)) + p for p in prompts]),
            torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts]))


def test_generation_stops_at_a_stop_token_and_keeps_it(model):
    free = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP]).generate([[20, 21, 22]], [12], NEAR_GREEDY)[0]
    stop = free.token_ids[4]
    first = free.token_ids.index(stop)
    stopped = TransformersEngine(model, pad_id=0, stop_ids=[stop]).generate([[20, 21, 22]], [12], NEAR_GREEDY)[0]
    assert stopped.stopped and stopped.token_ids == free.token_ids[:first + 1]


def test_generation_restores_training_mode_and_needs_budgets(model):
    model.train()
    engine = TransformersEngine(model, pad_id=0, stop_ids=[UNUSED_STOP])
    engine.generate([[3, 4]], [2], Sampling())
    assert model.training
    with pytest.raises(ValueError):
        engine.generate([[3, 4]], [0], Sampling())
    model.eval()
