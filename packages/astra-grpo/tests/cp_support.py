"""Shared by the context-parallel worker (2 processes, CP=2) and its tests (CP=1 references in the test
process): tiny random-init Llama / Qwen2 / Qwen3 models with GQA, padded SFT and GRPO batches, and
the computations whose results must agree under CP=2 and CP=1."""

from __future__ import annotations

import torch
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


def sft_batch() -> dict[str, torch.Tensor]:
    """Three right-padded sequences of odd and even lengths (9 columns: not a multiple of the CP size)."""
    return collate([ids for ids, _ in SFT_EXAMPLES[:3]], [m for _, m in SFT_EXAMPLES[:3]], pad_id=0)


def grpo_batch() -> dict[str, torch.Tensor]:
    """Two groups of two multi-turn episodes (prompt, generated spans, observations), padded, with
    group-relative advantages and old log-probs that differ from the current ones (so ratios clip)."""
    episodes = [e for g in synthetic_groups(2, 2, VOCAB, seed=7) for e in g.episodes]
    advantages = reference_advantages([e.reward for e in episodes], 2)
    return collate([e.token_ids for e in episodes], [e.loss_mask for e in episodes], pad_id=0,
                   extras={"advantages": advantages})


def packed_batch() -> dict[str, torch.Tensor]:
    """One row holding two sequences (position ids restart), one plain row: no padding."""
    ids = torch.tensor([[5, 9, 17, 3, 44, 7, 12, 8, 2, 100, 4], [4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24]])
    positions = torch.tensor([list(range(6)) + list(range(5)), list(range(11))])
    return {"input_ids": ids, "position_ids": positions, "attention_mask": torch.ones_like(ids),
            "loss_mask": torch.ones(ids.shape)}


def old_logprobs(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    noise = torch.sin(torch.arange(logprobs.numel(), dtype=torch.float32)).reshape(logprobs.shape)
    return (logprobs.detach() + 0.3 * noise) * mask


def loss_and_grads(model, kind: str) -> dict:
    """Per-token log-probs, the trainer's loss on one micro-batch (its whole share of the objective) and
    every parameter gradient after `backward`. SFT: token averaging; GRPO: clipped ratio with an
    entropy term, sequence averaging (per-sequence token counts)."""
    model.zero_grad()
    batch = sft_batch() if kind == "sft" else grpo_batch()
    mask = batch["loss_mask"]
    if kind == "sft":
        logprobs, _ = token_logprobs(model, batch)
        loss = objective_share(sft_token_loss(logprobs), mask, "token", float(mask.sum()), 3)
    else:
        logprobs, entropies = token_logprobs(model, batch, temperature=0.7, with_entropy=True)
        terms = policy_terms(logprobs, old_logprobs(logprobs, mask), batch["advantages"], eps_low=0.2, eps_high=0.28,
                             entropies=entropies, entropy_coef=0.01)
        loss = objective_share(terms.loss, mask, "sequence", float(mask.sum()), mask.shape[0])
    loss.backward()
    return {"logprobs": logprobs.detach(), "loss": loss.detach(),
            "grads": {name: p.grad.detach().clone() for name, p in model.named_parameters()}}


def reference_logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """CP=1 logits, each sequence run alone: a row's real tokens, split where the position ids restart
    (packed rows). Padding positions stay zero."""
    logits = torch.zeros((*batch["input_ids"].shape, model.config.vocab_size))
    with torch.no_grad():
        for row, (ids, positions, real) in enumerate(zip(batch["input_ids"], batch["position_ids"],
                                                         batch["attention_mask"], strict=True)):
            starts = [t for t in range(int(real.sum())) if t == 0 or positions[t] != positions[t - 1] + 1]
            for start, end in zip(starts, [*starts[1:], int(real.sum())], strict=True):
                logits[row, start:end] = model(input_ids=ids[None, start:end], use_cache=False).logits[0]
    return logits


# -- trainer updates (plain SGD with lr 1: the parameter change is the gradient) ---------------------

GRPO_UPDATES = {
    # name: config overrides; 4 groups of 4, micro-batches of 2: gradient accumulation, padding
    "token": dict(loss_average="token"),
    "sequence": dict(loss_average="sequence"),
    "passes": dict(loss_average="token", mini_batch_size=2, num_iterations=2, clip_eps_low=0.02, clip_eps_high=0.05),
}
SFT_UPDATES = {"token": dict(loss_average="token", micro_batch_size=1),
               "sequence": dict(loss_average="sequence", micro_batch_size=2)}


def grpo_groups():
    return synthetic_groups(4, 4, VOCAB, seed=5)


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
                   softmax_scale=None, attn_implementation=None, **kwargs):
    """Stands in for transformers' `_flash_attention_forward` (there is no FlashAttention on CPU), to run
    the FlashAttention branch of the Ulysses attention: [B, S, heads, D] in and out, causal, GQA. It
    checks what that branch hands the kernel: whole sequences and their all-gathered position ids."""
    assert attn_implementation == "flash_attention_2" and attention_mask is None and is_causal
    assert position_ids is not None and position_ids.shape == query.shape[:2] == (query.shape[0], query_length)
    assert bool((position_ids == torch.arange(query_length)).all())
    groups = query.shape[2] // key.shape[2]
    q, k, v = (t.transpose(1, 2) for t in (query, key.repeat_interleave(groups, 2), value.repeat_interleave(groups, 2)))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=softmax_scale)
    return out.transpose(1, 2)
