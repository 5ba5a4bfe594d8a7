"""The three collectives of Ulysses context parallelism, differentiable where the loss needs it.

- `all_to_all`: re-shard a tensor from one dimension to another over the CP group (sequence-sharded
  <-> head-sharded around attention). Its backward is the inverse all-to-all.
- `gather_replicated`: all-gather the per-token outputs of every CP rank. Each rank then computes
  the *same* loss from the same gathered tensor, so the backward keeps only this rank's slice of the
  (identical) upstream gradient. torch's differentiable all_gather would instead sum the gradient
  over the ranks, leaving a factor of `cp_size` in every parameter gradient.
- `gather_positions`: all-gather position ids (no gradient) for the attention masks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.nn.functional import all_to_all_single


def all_to_all(tensor: torch.Tensor, scatter_dim: int, gather_dim: int, group, size: int) -> torch.Tensor:
    """Split `scatter_dim` into `size` chunks, send chunk j to CP rank j, concatenate what arrives along
    `gather_dim` (in rank order)."""
    outgoing = torch.stack(tensor.chunk(size, dim=scatter_dim)).contiguous()
    incoming = all_to_all_single(torch.empty_like(outgoing), outgoing, group=group)  # backward: the inverse
    return torch.cat(incoming.unbind(0), dim=gather_dim)


class _GatherReplicated(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor, dim: int, group, size: int, rank: int) -> torch.Tensor:
        ctx.dim, ctx.rank, ctx.length = dim, rank, tensor.shape[dim]
        parts = [torch.empty_like(tensor) for _ in range(size)]
        dist.all_gather(parts, tensor.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad.narrow(ctx.dim, ctx.rank * ctx.length, ctx.length), None, None, None, None


def gather_replicated(tensor: torch.Tensor, dim: int, group, size: int, rank: int) -> torch.Tensor:
    """Concatenate every CP rank's `tensor` along `dim`; for a loss computed identically on every rank."""
    return _GatherReplicated.apply(tensor, dim, group, size, rank)


def gather_positions(position_ids: torch.Tensor, group, size: int) -> torch.Tensor:
    """[B, S/cp] position ids of this rank -> [B, S] of the whole sequence."""
    parts = [torch.empty_like(position_ids) for _ in range(size)]
    dist.all_gather(parts, position_ids.contiguous(), group=group)
    return torch.cat(parts, dim=1)
