"""Packed and prefix-tree layouts of the update (layout.py, layout_attention.py) against the dense padded one,
in one process: the trie and its row, micro-batch plans, and for random groups (hypothesis draws G, the
prompt length, the turns and the masks) the per-token log-probs, the loss and every parameter's gradient of
the GRPO and SFT updates, in every layout, by micro-batch counts and by token budgets."""

import pytest
import torch
from astra_grpo.layout import build, plan
from astra_grpo.logprobs import collate, token_logprobs
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from layout_support import Shape, layout_model, random_groups, run_grpo_update, run_sft_update, sft_examples

PROMPT = [7, 3, 9, 9, 4, 5]
SEQUENCES = [PROMPT + [1, 2, 3], PROMPT + [1, 2, 8, 8], PROMPT[:3] + [6], PROMPT + [1, 2, 3], PROMPT, [5, 5]]


def test_a_tree_forwards_each_shared_prefix_once_and_keeps_every_sequence_whole():
    layout = build(SEQUENCES, [[1] * len(s) for s in SEQUENCES], "tree")
    row = layout.input_ids[0].tolist()
    # the trie's tokens: 7 3 9 | 9 4 5 | 1 2 | 3 | 8 8 | 6 | 5 5 (duplicates and prefixes add nothing)
    assert len(row) == layout.forwarded_tokens == 3 + 3 + 2 + 1 + 2 + 1 + 2
    assert layout.tokens == sum(map(len, SEQUENCES))
    nodes = layout.nodes
    assert [b - a for a, b in nodes.spans] == [3, 3, 2, 1, 2, 1, 2]
    assert nodes.spans[0][0] == 0 and all(a == b for (_, a), (b, _) in zip(nodes.spans[:-1], nodes.spans[1:], strict=True))
    for (start, end), runs in zip(nodes.spans, nodes.keys, strict=True):
        path = [t for a, b in runs for t in row[a:b]]
        assert runs[-1][1] == end and any(s[:len(path)] == path for s in SEQUENCES)  # the node's own path
        assert layout.position_ids[0, start:end].tolist() == list(range(len(path) - (end - start), len(path)))
    # every loss token is predicted at the row position of the token before it, and is that sequence's token
    mask = layout.loss_mask > 0
    tokens = [t for s in SEQUENCES for t in s[1:]]
    assert layout.pair_target.tolist() == tokens and len(layout.pair_position) == int(mask.sum())


def test_packed_rows_share_nothing_and_padded_rows_are_the_dense_batch():
    masks = [[1] * len(s) for s in SEQUENCES]
    packed = build(SEQUENCES, masks, "packed")
    assert packed.input_ids[0].tolist() == [t for s in SEQUENCES for t in s]
    assert packed.position_ids[0].tolist() == [p for s in SEQUENCES for p in range(len(s))]
    assert all(len(runs) == 1 and runs[0] == span for span, runs in zip(packed.nodes.spans, packed.nodes.keys,
                                                                          strict=True))
    padded = build(SEQUENCES, masks, "padded", pad_id=0)
    assert padded.nodes is None and padded.input_ids.shape == (6, 10)
    assert padded.attention_mask.sum().item() == padded.tokens


def test_keys_keep_groups_apart():
    layout = build(SEQUENCES[:2] * 2, [[1] * len(s) for s in SEQUENCES[:2]] * 2, "tree", keys=[0, 0, 1, 1])
    assert layout.forwarded_tokens == 2 * (6 + 2 + 1 + 2)


def test_bad_layouts_are_refused():
    with pytest.raises(ValueError, match="layout must be one of tree | packed | padded"):
        build([[1, 2]], [[0, 1]], "dense")
    with pytest.raises(ValueError, match="sequence 0: 2 tokens but a loss mask of 3"):
        build([[1, 2]], [[0, 1, 1]], "tree")
    with pytest.raises(ValueError, match="no empty sequence"):
        build([[1, 2], []], [[0, 1], []], "packed")


@pytest.mark.parametrize("kind", ["tree", "packed", "padded"])
def test_plans_keep_to_the_budget_and_cost_what_the_layout_forwards(kind):
    sequences = [PROMPT * 3 + [k] * (k % 5 + 1) for k in range(12)]
    drafted = plan(sequences, kind, budget=50, size=1, keys=[k // 4 for k in range(12)])
    micro_batches = drafted.micro_batches
    assert sorted(i for m in micro_batches for i in m) == list(range(12))
    for start, end, micro in zip(drafted.cuts[:-1], drafted.cuts[1:], micro_batches, strict=True):
        layout = build([sequences[i] for i in micro], [[1] * len(sequences[i]) for i in micro], kind,
                       keys=[i // 4 for i in micro])
        assert drafted.cost(start, end) == layout.forwarded_tokens
        assert layout.forwarded_tokens <= 50 or len(micro) == 1
    more = drafted.split_to(len(micro_batches) + 3)
    assert len(more.micro_batches) == len(micro_batches) + 3 and more.order == drafted.order
    with pytest.raises(ValueError, match="cannot split"):
        drafted.split_to(13)
    assert [len(m) for m in plan(sequences, kind, budget=None, size=5).micro_batches] == [5, 5, 2]


def test_a_tree_plan_fits_more_sequences_in_a_budget_than_a_packed_one():
    sequences = [PROMPT * 10 + [k, k + 1] for k in range(8)]  # 62 tokens each, 60 of them shared
    assert len(plan(sequences, "tree", budget=100, size=1).micro_batches) == 1
    assert len(plan(sequences, "packed", budget=100, size=1).micro_batches) == 8


# The accelerate state is reset around each test (fresh_accelerate_state), not each example: every example makes
# its own Accelerator with the same one-process settings.
shapes = st.builds(Shape, groups=st.integers(1, 3), group_size=st.integers(2, 4), prompt=st.integers(1, 12),
                   turns=st.integers(1, 3), masks=st.sampled_from(["generated", "random"]),
                   seed=st.integers(0, 2 ** 16))


@settings(max_examples=40, deadline=None)
@given(shape=shapes, kind=st.sampled_from(["tree", "packed"]), shared=st.sampled_from(["group", "all"]),
       temperature=st.sampled_from([1.0, 0.7]))
def test_token_logprobs_and_entropies_equal_the_padded_batch(shape, kind, shared, temperature):
    episodes = [e for g in random_groups(shape) for e in g.episodes]
    model = layout_model()
    sequences, masks = [e.token_ids for e in episodes], [e.loss_mask for e in episodes]
    keys = [i // shape.group_size for i in range(len(episodes))] if shared == "group" else None
    dense = token_logprobs(model, collate(sequences, masks, 0, "padded"), temperature, with_entropy=True)
    laid_out = token_logprobs(model, collate(sequences, masks, 0, kind, keys=keys), temperature, with_entropy=True)
    for got, expected in zip(laid_out, dense, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes, kind=st.sampled_from(["tree", "packed"]), budget=st.sampled_from([None, 12, 40, 200]),
       averaging=st.sampled_from(["token", "sequence"]), passes=st.sampled_from([1, 2]),
       kl=st.sampled_from([0.0, 0.1]), shared=st.sampled_from(["group", "all"]))
def test_the_grpo_update_equals_the_padded_one(fresh_accelerate_state, shape, kind, budget, averaging, passes, kl,
                                               shared):
    groups = random_groups(shape)
    common = dict(loss_average=averaging, num_iterations=passes, kl_coef=kl, clip_eps_low=0.02, clip_eps_high=0.05,
                  entropy_coef=0.01)
    dense_metrics, dense = run_grpo_update(groups, {**common, "layout": "padded",
                                                    "micro_batch_size": shape.group_size})
    metrics, params = run_grpo_update(groups, {**common, "layout": kind, "max_tokens_per_microbatch": budget,
                                               "tree_scope": shared})
    torch.testing.assert_close(params, dense, rtol=1e-4, atol=1e-6)
    for name in ("loss", "ratio_mean", "clip_fraction", "update_tokens", "entropy"):
        assert metrics[name] == pytest.approx(dense_metrics[name], rel=1e-5, abs=1e-6), name
    assert metrics["update_forwarded_tokens"] <= dense_metrics["update_forwarded_tokens"]


OBJECTIVES = [  # (loss_type, importance_sampling_level, loss_average, clip_delta): GSPO, Dr. GRPO, LUSPO, ...
    ("clip", "sequence", "sequence", 0.0), ("clip", "token", "fixed", 0.0), ("clip", "sequence", "sequence_sum", 0.0),
    ("cispo", "token", "token", 0.0), ("sapo", "token", "sequence", 0.0), ("clip", "token", "token", 1.1),
    ("vespo", "token", "token", 0.0)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes, kind=st.sampled_from(["tree", "packed"]), budget=st.sampled_from([None, 12, 200]),
       objective=st.sampled_from(OBJECTIVES), passes=st.sampled_from([1, 2]))
def test_every_objective_updates_alike_in_every_layout(fresh_accelerate_state, shape, kind, budget, objective,
                                                       passes):
    loss_type, level, averaging, delta = objective
    groups = random_groups(shape)
    common = dict(loss_type=loss_type, importance_sampling_level=level, loss_average=averaging, clip_delta=delta,
                  num_iterations=passes, clip_eps_low=0.02, clip_eps_high=0.05, max_response_length=64)
    dense_metrics, dense = run_grpo_update(groups, {**common, "layout": "padded",
                                                    "micro_batch_size": shape.group_size})
    metrics, params = run_grpo_update(groups, {**common, "layout": kind, "max_tokens_per_microbatch": budget})
    torch.testing.assert_close(params, dense, rtol=1e-4, atol=1e-6)
    for name in ("loss", "ratio_mean", "clip_fraction", "update_tokens"):
        assert metrics[name] == pytest.approx(dense_metrics[name], rel=1e-5, abs=1e-6), name


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes, kind=st.sampled_from(["tree", "packed"]), budget=st.sampled_from([None, 10, 30, 200]),
       averaging=st.sampled_from(["token", "sequence"]))
def test_the_sft_update_equals_the_padded_one(fresh_accelerate_state, shape, kind, budget, averaging):
    examples = sft_examples(random_groups(shape))
    assume(examples)  # random masks can leave no episode with a loss token
    dense_metrics, dense = run_sft_update(examples, {"loss_average": averaging, "layout": "padded"})
    metrics, params = run_sft_update(examples, {"loss_average": averaging, "layout": kind,
                                                "max_tokens_per_microbatch": budget})
    torch.testing.assert_close(params, dense, rtol=1e-4, atol=1e-6)
    assert metrics["loss"] == pytest.approx(dense_metrics["loss"], rel=1e-5)
    assert (metrics["tokens"], metrics["seen_tokens"]) == (dense_metrics["tokens"], dense_metrics["seen_tokens"])


def test_a_fixed_batch_moves_the_weights_in_every_layout_alike(fresh_accelerate_state):
    """The property tests above on one batch whose update certainly moves the weights (not zeros against zeros)."""
    from grpo_support import flat_params

    groups = random_groups(Shape(groups=2, group_size=4, prompt=10, turns=3, masks="generated", seed=3))
    initial = flat_params(layout_model())
    results = {kind: run_grpo_update(groups, {"layout": kind, "max_tokens_per_microbatch": 30})
               for kind in ("padded", "packed", "tree")}
    dense = results["padded"][1]
    assert (dense - initial).abs().max() > 1e-3
    for kind in ("packed", "tree"):
        torch.testing.assert_close(results[kind][1], dense, rtol=1e-4, atol=1e-6)
    forwarded = {kind: metrics["update_forwarded_tokens"] for kind, (metrics, _) in results.items()}
    assert forwarded["tree"] < forwarded["packed"] < forwarded["padded"]
