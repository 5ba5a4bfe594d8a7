"""The attention over packed and tree rows (layout_attention.py): its three paths give the dense logits (FlexAttention
without gradients: its backward needs a GPU; FlashAttention's varlen call with an SDPA stand-in for the kernel, tied
to transformers' signature), a switched model is unchanged outside a layout forward, and models whose attention
cannot take a layout run padded with a one-line notice, never a wrong gradient."""

import inspect

import pytest
import torch
from astra_grpo import layout_attention
from astra_grpo.layout_attention import LayoutForward, layout_forward, usable_layout
from astra_grpo.logprobs import collate, token_logprobs
from cp_support import flash_stand_in, reference_logits
from layout_support import Shape, layout_model, random_groups, run_grpo_update


def row_logits(model, batch, path: str, kernel: str = "sdpa") -> torch.Tensor:
    layout_attention.enable(model)
    layout = LayoutForward(batch.nodes, path, kernel)
    with torch.no_grad(), layout_forward():
        logits = model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False,
                       astra_layout=layout).logits
    assert layout.calls == model.config.num_hidden_layers
    return logits


def tree_batch():
    """Sequences that share a prefix, one that is a prefix of another, a copy, and one alone."""
    sequences = [[5, 9, 17, 3, 44, 7, 12], [5, 9, 17, 3, 8, 2, 60, 4], [5, 9, 17, 3, 8, 2, 6], [5, 9, 17],
                 [5, 9, 17, 3, 44, 7, 12], [4, 6, 8, 10, 12]]
    return collate(sequences, [[1] * len(s) for s in sequences], 0, "tree")


def groups_batch(kind: str = "tree"):
    episodes = [e for g in random_groups(Shape(2, 4, 9, 3, "generated", seed=11)) for e in g.episodes]
    return collate([e.token_ids for e in episodes], [e.loss_mask for e in episodes], 0, kind,
                   keys=[i // 4 for i in range(8)])


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("path", ["sdpa", "flex"])
@pytest.mark.parametrize("make", [tree_batch, groups_batch], ids=["tree", "groups"])
def test_every_cpu_path_gives_the_dense_logits(path, make):
    model, batch = layout_model(), make()
    torch.testing.assert_close(row_logits(model, batch, path), reference_logits(layout_model(), batch),
                               rtol=1e-4, atol=1e-5)


def test_the_flash_path_hands_the_varlen_kernel_each_nodes_path(monkeypatch):
    import transformers.modeling_flash_attention_utils as flash

    monkeypatch.setattr(flash, "_flash_attention_forward", flash_stand_in)
    model, batch = layout_model(), groups_batch()
    torch.testing.assert_close(row_logits(model, batch, "flash", "flash_attention_2"),
                               reference_logits(layout_model(), batch), rtol=1e-4, atol=1e-5)


def test_the_flash_stand_in_takes_what_transformers_flash_attention_forward_takes():
    """The keywords the flash path passes (and the stand-in reads) are transformers' own."""
    from transformers.modeling_flash_attention_utils import _flash_attention_forward

    real = set(inspect.signature(_flash_attention_forward).parameters)
    used = {"query_length", "is_causal", "dropout", "softmax_scale", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
            "max_length_k", "target_dtype", "attn_implementation", "position_ids"}
    assert used <= real
    assert used - {"target_dtype"} <= set(inspect.signature(flash_stand_in).parameters)


def test_flex_refuses_a_cpu_backward_rather_than_computing_something_else():
    model, batch = layout_model(), groups_batch()
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
        token_logprobs(model, batch, attention="flex")[0].sum().backward()


def test_a_switched_model_is_unchanged_outside_a_layout_forward():
    plain, switched = layout_model(), layout_model()
    layout_attention.enable(switched)
    layout_attention.enable(switched)  # idempotent
    assert switched.config._attn_implementation == "astra_layout_sdpa"
    ids = torch.tensor([[0, 0, 5, 9, 17], [3, 8, 2, 40, 4]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    with torch.no_grad():
        assert torch.equal(switched(input_ids=ids, attention_mask=mask).logits,
                           plain(input_ids=ids, attention_mask=mask).logits)
    settings = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(switched.generate(ids, **settings), plain.generate(ids, **settings))


def test_a_checkpoint_of_a_switched_model_names_its_own_kernel(tmp_path):
    model = layout_model()
    token_logprobs(model, groups_batch())
    model.save_pretrained(tmp_path)
    assert "astra_layout" not in (tmp_path / "config.json").read_text()


def sliding_window_model():
    """A Qwen3 with sliding-window layers (use_sliding_window): a tree row cannot honour its window."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, use_sliding_window=True,
                         sliding_window=4, max_window_layers=0, tie_word_embeddings=True)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def mistral_model():
    from transformers import AutoModelForCausalLM, MistralConfig

    config = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=4)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


@pytest.mark.parametrize(("make", "reason"), [(sliding_window_model, "sliding_attention layers"),
                                              (mistral_model, "sliding-window attention")])
def test_models_whose_attention_cannot_take_a_layout_run_padded_said_once(make, reason, capsys, monkeypatch):
    monkeypatch.setattr(layout_attention, "_noticed", set())
    model = make()
    assert model.config._attn_implementation == "sdpa"
    assert usable_layout(model, "tree") == "padded"
    assert usable_layout(model, "tree") == "padded"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and reason in err and "runs on padded rows" in err
    assert model.config._attn_implementation == "sdpa"  # left as it was


def test_a_sliding_window_forward_is_refused_not_computed_wrong():
    """Forcing a tree row on a sliding-window model (bypassing `usable_layout`) raises, in `token_logprobs` and
    in the attention function itself."""
    model = sliding_window_model()
    with pytest.raises(ValueError, match="cannot take a packed or tree row: it has sliding_attention layers"):
        token_logprobs(model, groups_batch())
    model.set_attn_implementation("astra_layout_sdpa")
    with pytest.raises(ValueError, match="cannot take attention with sliding_window"):
        row_logits(model, groups_batch(), "sdpa")


def test_an_eager_model_runs_padded():
    model = layout_model()
    model.set_attn_implementation("eager")
    assert usable_layout(model, "packed") == "padded"
    with pytest.raises(ValueError, match="its attention kernel is eager"):
        token_logprobs(model, groups_batch("packed"))


def test_a_model_that_ignores_the_layout_is_caught(monkeypatch):
    """An attention function that never sees the layout keyword would attend over the whole row."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def ignoring(module, query, key, value, attention_mask, astra_layout=None, **kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, "astra_layout_sdpa", ignoring)
    with pytest.raises(RuntimeError, match="cannot take a packed or tree row"):
        token_logprobs(layout_model(), groups_batch())


def test_the_trainers_update_a_sliding_window_model_densely(fresh_accelerate_state, monkeypatch):
    import layout_support

    monkeypatch.setattr(layout_support, "layout_model", lambda seed=0: sliding_window_model())
    groups = random_groups(Shape(1, 3, 5, 2, "generated", seed=2))
    _, tree = run_grpo_update(groups, {"layout": "tree"})
    _, padded = run_grpo_update(groups, {"layout": "padded"})
    torch.testing.assert_close(tree, padded, rtol=0, atol=0)


def test_the_flash_path_needs_a_flash_kernel():
    with pytest.raises(ValueError, match="config field layout_attention: flash needs attn_implementation"):
        token_logprobs(layout_model(), groups_batch(), attention="flash")
