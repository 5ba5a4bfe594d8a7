"""Context parallelism in one process: configuration errors that name the field, the process-grid
shape, how padded and tree rows are cut into CP slices, packed-sequence masks, and that a model switched
to the Ulysses attention behaves exactly as before outside a CP forward (generation with left padding
included)."""

import pytest
import torch
from astra_grpo.cli import main
from astra_grpo.config import ConfigError, GRPOConfig, SFTConfig, load_config
from astra_grpo.context_parallel.attention import _packed_causal_mask, _shardable_heads, enable, is_enabled
from astra_grpo.context_parallel.grid import ProcessGrid, grid_shape
from astra_grpo.logprobs import token_logprobs
from click.testing import CliRunner
from cp_support import cp_model, sft_batch, tree_batch


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
def test_both_trainer_configs_have_context_parallel_size(cls):
    assert cls().context_parallel_size == 1
    assert load_config(cls, None, {"context_parallel_size": "4"}).context_parallel_size == 4
    with pytest.raises(ConfigError, match="field context_parallel_size"):
        load_config(cls, None, {"context_parallel_size": 0})
    with pytest.raises(ConfigError, match="field attn_implementation"):
        load_config(cls, None, {"context_parallel_size": 2, "attn_implementation": "eager"})


@pytest.mark.parametrize("command", ["sft", "train"])
def test_trainer_commands_take_the_flag(command):
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0 and "--context-parallel-size" in result.output


def test_paper_configs_use_context_parallelism():
    from astra_grpo.cli import bundled_configs

    assert load_config(SFTConfig, bundled_configs() / "sft_paper.yaml").context_parallel_size == 2
    assert load_config(GRPOConfig, bundled_configs() / "grpo_paper.yaml").context_parallel_size == 2


def test_grid_shape_divides_the_processes():
    assert grid_shape(8, 2) == (4, 2) and grid_shape(2, 2) == (1, 2) and grid_shape(3, 1) == (3, 1)
    with pytest.raises(ConfigError, match="context_parallel_size: 2 does not divide the 3 processes"):
        grid_shape(3, 2)


@pytest.mark.parametrize(("heads", "kv_heads", "size"), [(9, 3, 2), (40, 8, 16), (8, 2, 4), (4, 1, 2), (6, 3, 2)])
def test_heads_are_made_shardable_keeping_each_query_heads_key(heads, kv_heads, size):
    """SmolLM2-135M (9 heads, 3 kv) on 2 ranks, Qwen3-14B (40, 8) on 16: padded; divisible layouts: kv
    heads repeated only. Either way query head h still meets the key/value head GQA gives it."""
    query = torch.randn(1, heads, 3, 4)
    key, value = torch.randn(1, kv_heads, 3, 4), torch.randn(1, kv_heads, 3, 4)
    q, k, v = _shardable_heads(query, key, value, size)
    assert q.shape[1] % size == 0 and k.shape[1] % size == 0 and q.shape[1] % k.shape[1] == 0
    group, per_kv = q.shape[1] // k.shape[1], heads // kv_heads
    for h in range(heads):
        torch.testing.assert_close(q[0, h], query[0, h])
        torch.testing.assert_close(k[0, h // group], key[0, h // per_kv])
        torch.testing.assert_close(v[0, h // group], value[0, h // per_kv])
    assert q[0, heads:].abs().sum() == 0  # padding heads are zeros


def test_enable_checks_and_is_idempotent():
    model = cp_model("qwen3")
    assert not is_enabled(model)
    enable(model, 2)
    enable(model, 2)
    assert is_enabled(model) and model.config._attn_implementation == "astra_cp_sdpa"
    eager = cp_model("llama")
    eager.set_attn_implementation("eager")
    with pytest.raises(ConfigError, match="attn_implementation"):
        enable(eager, 2)
    enable(cp_model("llama"), 8)  # 4 heads on 8 ranks: padded, not refused


def test_an_enabled_model_is_unchanged_outside_a_cp_forward():
    """Generation and evaluation run the inner kernel: same logits with left padding, same greedy tokens."""
    plain, switched = cp_model("llama"), cp_model("llama")
    enable(switched, 2)
    ids = torch.tensor([[0, 0, 5, 9, 17], [3, 8, 2, 100, 4]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    with torch.no_grad():
        expected = plain(input_ids=ids, attention_mask=mask).logits
        got = switched(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(got, expected)
    settings = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(switched.generate(ids, **settings), plain.generate(ids, **settings))


def test_parts_pad_to_a_multiple_and_keep_predictions_across_the_cut():
    batch = sft_batch()  # 9 columns
    parts = [batch.part(2, rank) for rank in (0, 1)]
    assert [p.input_ids.shape[1] for p in parts] == [5, 5]
    ids = torch.cat([p.input_ids for p in parts], dim=1)
    positions = torch.cat([p.position_ids for p in parts], dim=1)
    predicting = torch.cat([p.predicting for p in parts], dim=1)
    assert torch.equal(ids[:, :9], batch.input_ids) and (ids[:, 9] == 0).all()
    assert torch.equal(positions, torch.arange(10).expand(3, 10))  # the pad column continues the positions
    mask = batch.loss_mask > 0
    assert torch.equal(predicting[:, :8], mask[:, 1:]) and not predicting[:, 8:].any()
    assert predicting[2, 4]  # position 4 (last of rank 0's slice) predicts token 5 (rank 1's)
    # every loss token is computed by exactly one rank, and its target is the sequence's token
    assert sorted(torch.cat([p.pairs for p in parts]).tolist()) == list(range(int(mask.sum())))
    assert parts[0].owner_counts == [len(parts[0].pairs), len(parts[1].pairs)]
    for part in parts:
        assert torch.equal(part.pair_target, batch.input_ids[mask][part.pairs])


def test_a_tree_row_is_cut_like_any_row_and_its_filler_is_a_node_of_its_own():
    batch = tree_batch()
    width = batch.input_ids.shape[1]
    parts = [batch.part(4, rank) for rank in range(4)]
    padded = 4 * parts[0].input_ids.shape[1]
    assert padded >= width and padded - width < 4
    nodes = parts[0].nodes
    assert nodes.width == padded and nodes.spans[-1] == (width, padded) and nodes.keys[-1] == [(width, padded)]
    assert sum(len(p.pairs) for p in parts) == int(batch.loss_mask.sum())


def test_packed_rows_get_a_block_causal_mask():
    assert _packed_causal_mask(torch.arange(6).expand(2, 6)) is None
    mask = _packed_causal_mask(torch.tensor([[0, 1, 2, 0, 1, 2]]))[0, 0]
    expected = torch.zeros(6, 6, dtype=torch.bool)
    expected[:3, :3] = expected[3:, 3:] = torch.ones(3, 3, dtype=torch.bool).tril()
    assert torch.equal(mask, expected)


def test_cp_forward_needs_the_ulysses_attention(monkeypatch):
    import astra_grpo.logprobs

    grid = ProcessGrid(world_size=2, dp_size=1, cp_size=2, dp_rank=0, cp_rank=0)
    monkeypatch.setattr(astra_grpo.logprobs, "current_grid", lambda: grid)
    with pytest.raises(RuntimeError, match="enable"):
        token_logprobs(cp_model("llama"), sft_batch())


def test_rollout_shares_come_back_in_order_even_when_some_processes_have_none():
    from astra_grpo.runtime import interleave

    for world in (1, 2, 3):
        for count in range(7):  # under CP a batch may hold fewer groups than processes (e.g. 1 group, 2 ranks)
            items = [f"group-{k}" for k in range(count)]
            assert interleave([items[rank::world] for rank in range(world)]) == items
