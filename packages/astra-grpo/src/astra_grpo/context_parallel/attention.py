"""Ulysses attention, registered through transformers' attention-function interface.

`enable(model, cp_size)` switches a Llama / Qwen2 / Qwen3 (any transformers decoder that routes its
attention through `ALL_ATTENTION_FUNCTIONS`) from `sdpa` or `flash_attention_N` to `astra_cp_sdpa`
or `astra_cp_faN`. That function behaves exactly like the inner kernel (generation, evaluation) unless
the forward call carries the keyword `astra_cp` (a `CPAttention`, passed by `forward.py`;
transformers hands extra forward keywords down to the attention function, also when a checkpointed
layer is recomputed in backward). Then each CP rank holds a slice of every sequence, and:

    q, k, v [B, heads, S/cp, D]  --all-to-all-->  [B, heads/cp, S, D]   (whole sequences, some heads)
    attention over the whole sequence, causal; masks from the all-gathered position ids
    out [B, S, heads/cp, D]      --all-to-all-->  [B, S/cp, heads, D]   (back to this rank's slice)

Key/value heads are repeated first when there are fewer of them than the CP ranks can share
evenly (GQA with kv_heads < cp_size): to lcm(kv_heads, cp_size) heads, which keeps every query
head with its own key/value head. When cp_size does not divide the query heads (SmolLM2-135M: 9
heads on 2 ranks; Qwen3-14B: 40 on 16), key/value heads are repeated to one per query head and all
three are padded with zero heads to a multiple of cp_size; the padded heads' outputs are dropped
after the return all-to-all, so they take no part in the result or its gradient.

The padding mask is not used under CP: padded rows are right-padded (`layout.build`), so causal
attention alone keeps every real token away from the padding after it. A packed or tree row (the keyword
`astra_layout` beside `astra_cp`) is attended after the all-to-all exactly as without CP
(`layout_attention.attend`): every rank then holds the whole row for its heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from astra_grpo import layout_attention
from astra_grpo.config import CP_ATTENTION as INNER
from astra_grpo.config import ConfigError
from astra_grpo.context_parallel.collectives import all_to_all, gather_positions
from astra_grpo.layout_attention import LayoutForward, attend, flash, mask_function, plain

PREFIX = "astra_cp_"
# Registered names. They must not contain "flash": transformers would take such a name for a kernel to
# fetch from the hub. The FlashAttention kernel itself is looked up under its own name (`layout_attention.flash`).
NAMES = {inner: PREFIX + inner.replace("flash_attention_", "fa") for inner in INNER}
INNER_OF = {name: inner for inner, name in NAMES.items()}
layout_attention.WRAPPED.update(INNER_OF)


@dataclass(frozen=True)
class CPAttention:
    """What the attention function needs to know about the CP group (the `astra_cp` forward keyword)."""

    group: Any
    size: int
    rank: int


unwrap = layout_attention.unwrap


def is_enabled(model) -> bool:
    return unwrap(model).config._attn_implementation in INNER_OF


def enable(model, cp_size: int) -> None:
    """Route the model's attention through the Ulysses function (idempotent). Checks the heads and the
    attention implementation; a ConfigError names the field."""
    base = unwrap(model)
    current = base.config._attn_implementation or "sdpa"
    inner = layout_attention.WRAPPED.get(current, current)
    if inner not in INNER:
        raise ConfigError(f"config field attn_implementation: context parallelism runs {' | '.join(INNER)} "
                          f"attention, not {inner}")
    if current != NAMES[inner]:
        base.set_attn_implementation(NAMES[inner])


def _make_attention(inner: str):
    def attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                  astra_cp: CPAttention | None = None, astra_layout: LayoutForward | None = None, **kwargs):
        if astra_cp is None:  # an ordinary forward (generation, evaluation): exactly the inner attention
            if astra_layout is not None:
                return attend(module, query, key, value, astra_layout, dropout, scaling, **kwargs), None
            return plain(module, inner, query, key, value, attention_mask, dropout, scaling, **kwargs)
        return _ulysses(module, inner, astra_cp, astra_layout, query, key, value, dropout, scaling, **kwargs), None

    attention.__name__ = NAMES[inner]
    return attention


def _ulysses(module, inner: str, cp: CPAttention, layout: LayoutForward | None, query, key, value, dropout: float,
             scaling: float | None, position_ids: torch.Tensor | None = None, sliding_window: int | None = None,
             **kwargs) -> torch.Tensor:
    """[B, heads, S/cp, D] slices in, [B, S/cp, heads, D] attention output of this rank's slice out."""
    if position_ids is None:
        raise ValueError("context-parallel attention needs the position ids of the sequence slice")
    heads = query.shape[1]
    query, key, value = _shardable_heads(query, key, value, cp.size)
    query, key, value = (all_to_all(t, 1, 2, cp.group, cp.size) for t in (query, key, value))
    if layout is not None:
        out = attend(module, query, key, value, layout, dropout, scaling, sliding_window=sliding_window, **kwargs)
    elif inner == "sdpa":
        if sliding_window is not None:
            raise ValueError("context-parallel sdpa attention has no sliding window; use flash_attention_2")
        positions = gather_positions(position_ids.expand(query.shape[0], -1), cp.group, cp.size)
        out = _sdpa(query, key, value, positions, dropout, scaling).transpose(1, 2)
    else:
        positions = gather_positions(position_ids.expand(query.shape[0], -1), cp.group, cp.size)
        out = flash(module, inner, query, key, value, None, dropout, scaling, is_causal=True,
                    position_ids=positions, sliding_window=sliding_window, **kwargs)
    out = all_to_all(out, 1, 2, cp.group, cp.size)  # [B, S, heads/cp, D] -> [B, S/cp, heads, D]
    return out[:, :, :heads]  # without the padding heads, if any


def _shardable_heads(query, key, value, size: int):
    """q, k, v with head counts every CP rank can take an equal share of, each query head still with its own
    key/value head (see the module docstring)."""
    heads, kv_heads = query.shape[1], key.shape[1]
    if heads % size == 0:
        repeats = math.lcm(kv_heads, size) // kv_heads
        if repeats > 1:
            key, value = key.repeat_interleave(repeats, dim=1), value.repeat_interleave(repeats, dim=1)
        return query, key, value
    key, value = key.repeat_interleave(heads // kv_heads, dim=1), value.repeat_interleave(heads // kv_heads, dim=1)
    padding = (0, 0, 0, 0, 0, -heads % size)  # zero heads after the real ones, on dim 1 of [B, h, S, D]
    return tuple(torch.nn.functional.pad(t, padding) for t in (query, key, value))


def _sdpa(query, key, value, positions: torch.Tensor, dropout: float, scaling: float | None) -> torch.Tensor:
    """Causal attention over whole sequences, [B, h, S, D]; packed sequences (position ids restarting) stay
    apart, as transformers treats them."""
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    mask = _packed_causal_mask(positions)
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout,
                                                            is_causal=mask is None, scale=scaling)


def _packed_causal_mask(positions: torch.Tensor) -> torch.Tensor | None:
    """None when every row is one run of consecutive positions (plain causal attention); otherwise a
    [B, 1, S, S] boolean mask: causal, and only within a run."""
    steps = positions.diff(dim=-1)
    if bool((steps == 1).all()):
        return None
    segment = torch.nn.functional.pad((steps != 1).long(), (1, 0)).cumsum(-1)
    length = positions.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=positions.device).tril()
    return (causal & (segment[:, :, None] == segment[:, None, :]))[:, None]


for _inner, _name in NAMES.items():
    AttentionInterface.register(_name, _make_attention(_inner))
    AttentionMaskInterface.register(_name, mask_function(_inner))
