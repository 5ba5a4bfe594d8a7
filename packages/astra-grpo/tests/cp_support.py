"""Shared by the context-parallel worker (2 processes, CP=2) and its tests (CP=1 references in the test
process): tiny random-init Llama / Qwen2 / Qwen3 models with GQA, SFT and GRPO batches in padded and
tree layouts, and the computations whose results must agree under CP=2 and CP=1."""

from __future__ import annotations

import torch
from astra_grpo.layout import Layout
from astra_grpo.logprobs import collate, token_logprobs, trainable_tokens
from astra_grpo.loss import objective_share, policy_terms, sft_token_loss
from grpo_support import reference_advantages, reference_grpo_updates, reference_sft_loss, synthetic_groups

VOCAB = 256
# name: (transformers config class, attention heads, key/value heads, hidden size). Under CP=2:
# llama: GQA, one kv head per rank; qwen2: 3 kv heads, repeated to 6 (lcm with the CP size);
# qwen3: 1 kv head < CP size, repeated to 2.
# smollm2: SmolLM2-135M's own attention (9 heads, 3 kv heads, head_dim 64: its real config with 2 layers and a
# small vocabulary), which 2 does not divide: heads padded to 10.
FAMILIES = {"llama": ("LlamaConfig", 4, 2, 32), "qwen2": ("Qwen2Config", 6, 3, 48), "qwen3": ("Qwen3Config", 4, 1, 32),
            "smollm2": ("LlamaConfig", 9, 3, 576)}
SFT_EXAMPLES = [([5, 9, 17, 3, 44, 7, 12], [0, 0, 1, 1, 0, 1, 1]), ([8, 2, 100, 4], [0, 1, 1, 1]),
                ([4, 6, 8, 10, 12, 14, 16, 18, 20], [0, 0, 0, 1, 1, 1, 0, 0, 1]), ([3, 3, 7, 9, 11], [0, 1, 0, 1, 1])]


def cp_model(family: str, seed: int = 0):
    import transformers

    if family == "smollm2":
        from astra_core.local.model import default_model_dir

        config = transformers.AutoConfig.from_pretrained(default_model_dir())
        config.update(dict(num_hidden_layers=2, vocab_size=VOCAB, pad_token_id=0, tie_word_embeddings=True))
        torch.manual_seed(seed)
        return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")

    class_name, heads, kv_heads, hidden = FAMILIES[family]
    config = getattr(transformers, class_name)(
        vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
        max_position_embeddings=512, tie_word_embeddings=True, pad_token_id=0)
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def sft_batch(layout: str = "padded") -> Layout:
    """Three sequences of odd and even lengths (padded: 9 columns, not a multiple of the CP size)."""
    return collate([ids for ids, _ in SFT_EXAMPLES[:3]], [m for _, m in SFT_EXAMPLES[:3]], 0, layout)


def grpo_episodes():
    """Two groups of two multi-turn episodes (a shared prompt, generated spans, observations)."""
    return [e for g in synthetic_groups(2, 2, VOCAB, seed=7, shared_prompt=True) for e in g.episodes]


def grpo_batch(layout: str = "padded") -> Layout:
    episodes = grpo_episodes()
    return collate([e.token_ids for e in episodes], [e.loss_mask for e in episodes], 0, layout,
                   keys=[i // 2 for i in range(len(episodes))])


def tree_batch() -> Layout:
    """One tree row: three sequences sharing a prefix (one of them also a longer shared part), and one alone."""
    sequences = [[5, 9, 17, 3, 44, 7, 12], [5, 9, 17, 3, 8, 2, 100, 4], [5, 9, 17, 3, 8, 2, 6], [4, 6, 8, 10, 12]]
    return collate(sequences, [[1] * len(s) for s in sequences], 0, "tree")


BATCHES = {"sft": sft_batch, "grpo": grpo_batch, "tree": tree_batch}
LAYOUTS = ("padded", "tree")


def old_logprobs(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    noise = torch.sin(torch.arange(logprobs.numel(), dtype=torch.float32)).reshape(logprobs.shape)
    return (logprobs.detach() + 0.3 * noise) * mask


def loss_and_grads(model, kind: str, layout: str = "padded") -> dict:
    """Per-token log-probs, the trainer's loss on one micro-batch (its whole share of the objective) and
    every parameter gradient after `backward`. SFT: token averaging; GRPO: clipped ratio with an
    entropy term, sequence averaging (per-sequence token counts)."""
    model.zero_grad()
    batch = sft_batch(layout) if kind == "sft" else grpo_batch(layout)
    mask = batch.loss_mask
    if kind == "sft":
        logprobs, _ = token_logprobs(model, batch)
        loss = objective_share(sft_token_loss(logprobs), mask, "token", float(mask.sum()), 3)
    else:
        advantages = torch.tensor(reference_advantages([e.reward for e in grpo_episodes()], 2), dtype=torch.float32)
        logprobs, entropies = token_logprobs(model, batch, temperature=0.7, with_entropy=True)
        terms = policy_terms(logprobs, old_logprobs(logprobs, mask), advantages, eps_low=0.2, eps_high=0.28,
                             entropies=entropies, entropy_coef=0.01)
        loss = objective_share(terms.loss, mask, "sequence", float(mask.sum()), mask.shape[0])
    loss.backward()
    return {"logprobs": logprobs.detach(), "loss": loss.detach(),
            "grads": {name: p.grad.detach().clone() for name, p in model.named_parameters()}}


def reference_logits(model, batch: Layout) -> torch.Tensor:
    """CP=1 logits of every row position, computed densely: a padded row's real tokens alone; in a tree
    row, each node's tokens after the tokens of its path (its ancestors' spans). Padding stays zero."""
    logits = torch.zeros((*batch.input_ids.shape, model.config.vocab_size))
    with torch.no_grad():
        if batch.nodes is None:
            for row, (ids, real) in enumerate(zip(batch.input_ids, batch.attention_mask, strict=True)):
                length = int(real.sum())
                logits[row, :length] = model(input_ids=ids[None, :length], use_cache=False).logits[0]
            return logits
        for (start, end), runs in zip(batch.nodes.spans, batch.nodes.keys, strict=True):
            path = torch.cat([batch.input_ids[0, a:b] for a, b in runs])
            logits[0, start:end] = model(input_ids=path[None], use_cache=False).logits[0, -(end - start):]
    return logits


def real_positions(batch: Layout) -> torch.Tensor:
    """Row positions that hold a token of some sequence (padding is nobody's)."""
    if batch.attention_mask is not None:
        return batch.attention_mask.bool()
    return torch.ones(batch.input_ids.shape, dtype=torch.bool)


# -- trainer updates (plain SGD with lr 1: the parameter change is the gradient) ---------------------

GRPO_UPDATES = {
    # name: config overrides; 4 groups of 4 (each sharing its prompt), micro-batches of 2 or by a token budget:
    # gradient accumulation, every layout
    "token": dict(loss_average="token"),
    "sequence": dict(loss_average="sequence", layout="packed"),
    "passes": dict(loss_average="token", mini_batch_size=2, num_iterations=2, clip_eps_low=0.02, clip_eps_high=0.05,
                   layout="padded"),
    "budget": dict(loss_average="token", max_tokens_per_microbatch=40),
}
SFT_UPDATES = {"token": dict(loss_average="token", micro_batch_size=1),
               "sequence": dict(loss_average="sequence", micro_batch_size=2, layout="padded"),
               "budget": dict(loss_average="sequence", layout="packed", max_tokens_per_microbatch=12)}


def grpo_groups():
    return synthetic_groups(4, 4, VOCAB, seed=5, shared_prompt=True)


def reference_grpo_update(family: str, case: str) -> torch.Tensor:
    """The GRPO updates of `case` with per-token loops over the whole global batch, one process."""
    return reference_grpo_updates(cp_model(family), grpo_groups(), GRPO_UPDATES[case])


def reference_sft_update(family: str, case: str) -> tuple[torch.Tensor, float]:
    model = cp_model(family)
    loss = reference_sft_loss(model, SFT_EXAMPLES, SFT_UPDATES[case]["loss_average"])
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= p.grad
    return flat(model), loss.item()


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])


def sft_tokens() -> int:
    return sum(trainable_tokens(m) for _, m in SFT_EXAMPLES)


def flash_stand_in(query, key, value, attention_mask, query_length, is_causal, dropout=0.0, position_ids=None,
                   softmax_scale=None, attn_implementation=None, cu_seq_lens_q=None, cu_seq_lens_k=None,
                   max_length_q=None, max_length_k=None, **kwargs):
    """Stands in for transformers' `_flash_attention_forward` (there is no FlashAttention on CPU), to run
    the FlashAttention branches of the Ulysses and the layout attention: [B, S, heads, D] in and out, causal,
    GQA. It checks what those branches hand the kernel: whole sequences and their all-gathered position ids;
    or (varlen, a packed or tree row) query segments and key segments, each query segment attending to its
    key segment causally aligned at the bottom right, as FlashAttention >= 2.1 does when they differ in length
    (`test_layout_attention.py` ties these names to transformers' signature)."""
    assert attn_implementation == "flash_attention_2" and attention_mask is None and is_causal
    groups = query.shape[2] // key.shape[2]
    key, value = key.repeat_interleave(groups, 2), value.repeat_interleave(groups, 2)
    if cu_seq_lens_q is not None:
        assert query.shape[0] == 1 and max_length_q and max_length_k
        outputs = []
        starts_q, starts_k = cu_seq_lens_q.tolist(), cu_seq_lens_k.tolist()
        for a, b, c, d in zip(starts_q[:-1], starts_q[1:], starts_k[:-1], starts_k[1:], strict=True):
            q, k, v = query[:, a:b].transpose(1, 2), key[:, c:d].transpose(1, 2), value[:, c:d].transpose(1, 2)
            mask = torch.ones(b - a, d - c, dtype=torch.bool).tril(d - c - (b - a))
            outputs.append(torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                            scale=softmax_scale).transpose(1, 2))
        return torch.cat(outputs, dim=1)
    assert position_ids is not None and position_ids.shape == query.shape[:2] == (query.shape[0], query_length)
    assert bool((position_ids == torch.arange(query_length)).all())
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=softmax_scale)
    return out.transpose(1, 2)
