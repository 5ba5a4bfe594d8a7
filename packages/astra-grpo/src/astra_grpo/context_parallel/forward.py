"""The per-token log-probs under context parallelism: what each rank computes, gathered over the CP group.

Every rank of a CP group holds the same micro-batch (the trainers split data over the data-parallel
groups only) and forwards its contiguous slice of the row (`layout.Layout.part`: the width padded up to
a multiple of cp_size, then cut in cp_size pieces; padded, packed and tree rows alike). It takes the
log-probs of the loss tokens predicted inside its slice only (logits [positions of the slice, vocab]:
never the whole row's), and `gather_pairs` all-gathers them into the log-probs of every loss token, in the
layout's order, on every rank (`logprobs.token_logprobs` then lays them out [B, T] as without CP).

Gradients. Each CP rank computes the same loss from the same gathered log-probs; the gather's
backward keeps this rank's part of that gradient (no sum over ranks), and the all-to-alls in
attention route the rest to the ranks that hold the keys and values. The parameter gradients of
the CP ranks are therefore *partial* sums that add up to the full gradient; DDP / DeepSpeed average
over all processes and `loss.backward_scale` multiplies by the number of processes, so the result
is the objective's gradient with no factor of cp_size (tests compare with CP = 1).
"""

from __future__ import annotations

import torch

from astra_grpo.context_parallel.collectives import gather_replicated
from astra_grpo.context_parallel.grid import ProcessGrid
from astra_grpo.layout import Part


def gather_pairs(values: torch.Tensor, part: Part, grid: ProcessGrid) -> torch.Tensor:
    """This rank's values of its loss tokens (`part.pairs`) -> the values of every loss token of the layout,
    in its order, on every rank of the CP group. Every rank knows how many each rank computed, so each pads
    its share to the largest and drops the padding after the all-gather."""
    most = max(1, *part.owner_counts)
    mine = torch.nn.functional.pad(values, (0, most - values.shape[0]))
    whole = gather_replicated(mine, 0, grid.cp_group, grid.cp_size, grid.cp_rank)  # [cp_size * most]
    device = values.device
    taken = torch.cat([torch.arange(count, device=device) + rank * most for rank, count in enumerate(part.owner_counts)])
    by_owner = torch.argsort(part.owner, stable=True)  # rank 0's pairs in order, then rank 1's, ...
    return torch.zeros(len(part.owner), dtype=values.dtype, device=device).index_put((by_owner,), whole[taken])
