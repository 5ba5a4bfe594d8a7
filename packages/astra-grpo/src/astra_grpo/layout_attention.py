"""Attention over packed and tree rows (`layout.Nodes`), registered with transformers.

`enable(model)` switches a decoder whose attention goes through transformers' `ALL_ATTENTION_FUNCTIONS`
(Llama, Qwen2/3, most others) from `sdpa`, `flash_attention_N` or `flex_attention` to `astra_layout_<kernel>`.
That function is exactly the kernel it replaces (generation, evaluation, padded batches) unless the
forward call carries the keyword `astra_layout` (a `LayoutForward`, passed by `logprobs.token_logprobs`;
transformers hands forward keywords down to the attention function, also when a checkpointed layer is
recomputed in backward). Then the row is one packed or tree row and attention follows its nodes, on one
of three paths (the `layout_attention` knob; `auto` follows the model's kernel):

    sdpa    one scaled_dot_product_attention call per node: its queries against the K/V of its ancestors
            and itself (sliced where contiguous, else concatenated), causal at the bottom right. Runs on
            CPU and GPU; computes each node's own attention, never the whole row's.
    flex    FlexAttention over the whole row with a block mask (a position sees the nodes on its path, and
            its own node causally). No K/V copies; compiled on GPU.
    flash   FlashAttention's varlen kernel (flash_attention_2/3/4 loaded with the model): node spans as
            query sequences, the gathered K/V of each node's path as key sequences (TRL's tree attention
            and PrefixGrouper do the same), causal at the bottom right.

While a layout forward runs (`layout_forward`), transformers builds no attention mask (it would be a
dense W x W one, and wrong for a tree). A model whose attention cannot take a layout (sliding windows,
recurrent or other non-full-attention layers, an attention kernel other than the above) is trained on
padded rows instead, said once on stderr (`usable_layout`); an attention call that brings a sliding window,
logit soft-capping or attention sinks into a layout forward raises instead of computing something else.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
from dataclasses import dataclass, field

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from astra_grpo.layout import Nodes

KERNELS = ("sdpa", "flash_attention_2", "flash_attention_3", "flash_attention_4", "flex_attention")
PREFIX = "astra_layout_"
# Registered names must not contain "flash": transformers would take such a name for a hub kernel to fetch.
NAMES = {kernel: PREFIX + kernel.replace("flash_attention_", "fa").replace("_attention", "") for kernel in KERNELS}
KERNEL_OF = {name: kernel for kernel, name in NAMES.items()}
# Every registered wrapper name -> the kernel it wraps (context parallelism adds its own names).
WRAPPED: dict[str, str] = dict(KERNEL_OF)
# What a layout forward cannot honour: computing without it would give other numbers than the dense model.
_UNSUPPORTED = ("sliding_window", "softcap", "s_aux", "position_bias")

_mask_free = contextvars.ContextVar("astra_layout_mask_free", default=False)


@dataclass
class LayoutForward:
    """The `astra_layout` forward keyword: the row's nodes and the path to compute them on. `calls` counts
    the attention calls that took it (a model that ignored it would have attended over the whole row);
    `cache` holds what every layer of this forward (and its recomputation in backward) reuses: masks, indices."""

    nodes: Nodes
    path: str
    kernel: str
    calls: int = 0
    cache: dict = field(default_factory=dict, repr=False)

    def cached(self, key, make):
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]


def unwrap(model):
    """The transformers model inside DDP / DeepSpeed / accelerate wrappers."""
    while hasattr(model, "module"):
        model = model.module
    return model


def kernel_of(model) -> str:
    """The attention kernel the model runs (under our wrappers: the one they wrap)."""
    name = unwrap(model).config._attn_implementation or "sdpa"
    return WRAPPED.get(name, name)


def unusable_because(model) -> str | None:
    """Why the model's attention cannot take a packed or tree row, or None."""
    config = unwrap(model).config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    kernel = kernel_of(model)
    if kernel not in KERNELS:
        return f"its attention kernel is {kernel} (a layout runs {' | '.join(KERNELS)})"
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        other = sorted(set(layer_types) - {"full_attention"})
        if other:
            return f"it has {', '.join(other)} layers"
    elif getattr(config, "sliding_window", None):
        return "it uses sliding-window attention"
    return None


_noticed: set[tuple[str, str]] = set()


def usable_layout(model, wanted: str) -> str:
    """`wanted` if the model can take it, else `padded`, with a one-line notice on stderr (once per reason)."""
    if wanted == "padded":
        return wanted
    reason = unusable_because(model)
    if reason is None:
        enable(model)
        return wanted
    if (wanted, reason) not in _noticed:
        _noticed.add((wanted, reason))
        print(f"astra-grpo: layout {wanted} needs full attention on every layer, but {type(unwrap(model)).__name__} "
              f"{reason}: the update runs on padded rows (dense)", file=sys.stderr)
    return "padded"


def enable(model) -> None:
    """Route the model's attention through the layout function (idempotent; left alone under context
    parallelism, whose attention function takes layouts too)."""
    base = unwrap(model)
    if base.config._attn_implementation in WRAPPED:
        return
    base.set_attn_implementation(NAMES[kernel_of(model)])


def path_for(kernel: str, wanted: str) -> str:
    """The path a layout forward takes: `wanted`, or with `auto` the one of the model's kernel."""
    if wanted == "auto":
        return "flash" if kernel.startswith("flash_attention") else "flex" if kernel == "flex_attention" else "sdpa"
    if wanted == "flash" and not kernel.startswith("flash_attention"):
        raise ValueError(f"config field layout_attention: flash needs attn_implementation flash_attention_2|3|4, "
                         f"not {kernel}")
    return wanted


@contextlib.contextmanager
def layout_forward(active: bool = True):
    """While active, the masks of our registered attention names are not built (see the module docstring)."""
    token = _mask_free.set(active)
    try:
        yield
    finally:
        _mask_free.reset(token)


# -- the three paths --------------------------------------------------------------------------------

def attend(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: LayoutForward,
           dropout: float = 0.0, scaling: float | None = None, **kwargs) -> torch.Tensor:
    """[1, heads, W, D] queries and [1, kv_heads, W, D] keys/values of one packed or tree row -> the
    attention output [1, W, heads, D]."""
    for name in _UNSUPPORTED:
        if kwargs.get(name) is not None:
            raise ValueError(f"a packed or tree row cannot take attention with {name}; use layout: padded")
    if query.shape[0] != 1 or query.shape[2] != layout.nodes.width:
        raise ValueError(f"a layout row is [1, heads, {layout.nodes.width}, D], got {list(query.shape)}")
    layout.calls += 1
    if layout.path == "flash":
        return _flash_varlen(module, layout, query, key, value, dropout, scaling)
    if layout.path == "flex":
        return _flex(layout, query, key, value, scaling)
    return _sdpa_nodes(layout, query, key, value, dropout, scaling)


def _sdpa_nodes(layout: LayoutForward, query, key, value, dropout: float, scaling: float | None) -> torch.Tensor:
    gqa = query.shape[1] != key.shape[1]
    outputs = []
    for index, ((start, end), runs) in enumerate(zip(layout.nodes.spans, layout.nodes.keys, strict=True)):
        if len(runs) == 1:
            keys, values = key[:, :, runs[0][0]:runs[0][1]], value[:, :, runs[0][0]:runs[0][1]]
        else:
            keys = torch.cat([key[:, :, a:b] for a, b in runs], dim=2)
            values = torch.cat([value[:, :, a:b] for a, b in runs], dim=2)
        queries, seen = end - start, keys.shape[2]
        mask = None if seen == queries else layout.cached(("causal", index), lambda q=queries, k=seen: torch.ones(
            q, k, dtype=torch.bool, device=query.device).tril(k - q))  # causal, aligned at the bottom right
        outputs.append(torch.nn.functional.scaled_dot_product_attention(
            query[:, :, start:end], keys, values, attn_mask=mask, dropout_p=dropout, is_causal=mask is None,
            scale=scaling, enable_gqa=gqa))
    return torch.cat(outputs, dim=2).transpose(1, 2)


def _flex(layout: LayoutForward, query, key, value, scaling: float | None) -> torch.Tensor:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def block_mask():
        node_of, sees = layout.nodes.visibility(query.device)

        def on_path(batch, head, q, k):
            return sees[node_of[q], node_of[k]] & (k <= q)

        width = layout.nodes.width
        return create_block_mask(on_path, None, None, width, width, device=query.device)

    kernel = _compiled_flex() if query.is_cuda else flex_attention  # eager: unfused, no backward (CPU tests)
    out = kernel(query, key, value, block_mask=layout.cached("block_mask", block_mask), scale=scaling,
                 enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2)


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=True)


def _flash_varlen(module, layout: LayoutForward, query, key, value, dropout: float, scaling: float | None):
    from transformers.integrations.flash_attention import get_target_dtype
    from transformers.modeling_flash_attention_utils import _flash_attention_forward

    cu_q, kv_index, cu_k, longest_q, longest_k = layout.cached("varlen", lambda: layout.nodes.varlen(query.device))
    query, key, value = (t.transpose(1, 2) for t in (query, key, value))  # [1, W, heads, D]
    key, value = key[:, kv_index], value[:, kv_index]  # every node's path, laid end to end
    return _flash_attention_forward(query, key, value, None, query_length=query.shape[1], is_causal=True,
                                    dropout=dropout, softmax_scale=scaling, cu_seq_lens_q=cu_q, cu_seq_lens_k=cu_k,
                                    max_length_q=longest_q, max_length_k=longest_k,
                                    target_dtype=get_target_dtype(query, module), attn_implementation=layout.kernel)


def flash(module, kernel: str, query, key, value, attention_mask, dropout: float, scaling: float | None, *,
          is_causal: bool, **kwargs) -> torch.Tensor:
    """transformers' FlashAttention path for [B, h, S, D] inputs; returns [B, S, h, D]. (Its own
    `flash_attention_forward` would look the kernel up under the model's attention name: ours.)"""
    from transformers.integrations.flash_attention import get_target_dtype
    from transformers.modeling_flash_attention_utils import _flash_attention_forward

    length = query.shape[2]
    query, key, value = (t.transpose(1, 2) for t in (query, key, value))
    return _flash_attention_forward(query, key, value, attention_mask, query_length=length, is_causal=is_causal,
                                    dropout=dropout, softmax_scale=scaling, target_dtype=get_target_dtype(query, module),
                                    attn_implementation=kernel, layer_idx=getattr(module, "layer_idx", None), **kwargs)


def plain(module, kernel: str, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
          **kwargs):
    """Exactly the attention of `kernel` (what the model ran before it was switched)."""
    if kernel == "sdpa":
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if kernel.startswith("flash_attention"):
        return flash(module, kernel, query, key, value, attention_mask, dropout, scaling,
                     is_causal=getattr(module, "is_causal", True), **kwargs), None
    return ALL_ATTENTION_FUNCTIONS[kernel](module, query, key, value, attention_mask, dropout=dropout,
                                           scaling=scaling, **kwargs)


def mask_function(kernel: str):
    """The kernel's mask function, skipped while a layout forward runs."""
    build = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping[kernel]

    def mask(*args, **kwargs):
        return None if _mask_free.get() else build(*args, **kwargs)

    return mask


def _make_attention(kernel: str):
    def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                  astra_layout: LayoutForward | None = None, **kwargs):
        if astra_layout is None:
            return plain(module, kernel, query, key, value, attention_mask, dropout, scaling, **kwargs)
        return attend(module, query, key, value, astra_layout, dropout, scaling, **kwargs), None

    attention.__name__ = NAMES[kernel]
    return attention


for _kernel, _name in NAMES.items():
    AttentionInterface.register(_name, _make_attention(_kernel))
    AttentionMaskInterface.register(_name, mask_function(_kernel))
