"""The policy's per-token log-probs with every sequence sharded over the CP group.

Every rank of a CP group holds the same right-padded batch ([B, T]: the trainers split data over
the data-parallel groups only). Here each rank pads T up to a multiple of cp_size, keeps its
contiguous slice of T/cp positions (ids, global position ids, which positions predict a loss token
and what they predict), runs the model on it with Ulysses attention, takes the log-probs of its
slice only (logits [tokens of the slice, vocab]: never the whole sequence's), and all-gathers the
[B, T/cp] results into the [B, T] log-probs of the usual contract (`logprobs.token_logprobs`).

Gradients. Each CP rank computes the same loss from the same gathered log-probs; the gather's
backward keeps this rank's slice of that gradient (no sum over ranks), and the all-to-alls in
attention route the rest to the ranks that hold the keys and values. The parameter gradients of
the CP ranks are therefore *partial* sums that add up to the full gradient; DDP / DeepSpeed average
over all processes and `loss.backward_scale` multiplies by the number of processes, so the result
is the objective's gradient with no factor of cp_size (tests compare with CP = 1).
"""

from __future__ import annotations

import torch

from astra_grpo.context_parallel.attention import CPAttention, is_enabled
from astra_grpo.context_parallel.collectives import gather_replicated
from astra_grpo.context_parallel.grid import ProcessGrid


def shard(batch: dict[str, torch.Tensor], cp_size: int, cp_rank: int) -> dict[str, torch.Tensor]:
    """This rank's slice of a right-padded batch: input_ids and position_ids (global positions),
    `predicting` (the position predicts a loss token) and `targets` (the token it predicts); the width
    is padded up to a multiple of cp_size first."""
    ids, positions, mask = batch["input_ids"], batch["position_ids"], batch["loss_mask"] > 0
    _check_right_padded(batch["attention_mask"])
    rows, width = ids.shape
    padded = -(-width // cp_size) * cp_size
    extra = padded - width
    predicting = torch.zeros((rows, padded), dtype=torch.bool, device=ids.device)
    predicting[:, :width - 1] = mask[:, 1:]  # position t predicts token t + 1
    targets = torch.zeros((rows, padded), dtype=ids.dtype, device=ids.device)
    targets[:, :width - 1] = ids[:, 1:]
    if extra:
        ids = torch.nn.functional.pad(ids, (0, extra), value=0)
        tail = positions[:, -1:] + torch.arange(1, extra + 1, device=positions.device)
        positions = torch.cat([positions, tail], dim=1)
    part = slice(cp_rank * (padded // cp_size), (cp_rank + 1) * (padded // cp_size))
    return {"input_ids": ids[:, part], "position_ids": positions[:, part], "predicting": predicting[:, part],
            "targets": targets[:, part]}


def _check_right_padded(attention_mask: torch.Tensor) -> None:
    if bool((attention_mask[:, 1:] > attention_mask[:, :-1]).any()):
        raise ValueError("context parallelism needs right-padded batches (padding only after the tokens)")


def sharded_token_logprobs(model, batch: dict[str, torch.Tensor], grid: ProcessGrid, temperature: float = 1.0,
                           with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`logprobs.token_logprobs` under context parallelism: the same [B, T] log-probs (and entropies)
    on every rank of the CP group, each rank having run the model on 1/cp of every sequence."""
    from astra_grpo.logprobs import _selective_log_softmax, kept_logits

    if not is_enabled(model):
        raise RuntimeError("context parallelism needs the model's attention switched to Ulysses: "
                           "call astra_grpo.context_parallel.enable(model, cp_size) before training")
    local = shard(batch, grid.cp_size, grid.cp_rank)
    output = model(input_ids=local["input_ids"], position_ids=local["position_ids"], use_cache=False,
                   **kept_logits(local["predicting"]),
                   astra_cp=CPAttention(grid.cp_group, grid.cp_size, grid.cp_rank))
    logits = output.logits
    if not (logits.ndim == 2 and logits.shape[0] == int(local["predicting"].sum())):
        logits = logits[local["predicting"]]  # a model without boolean logits_to_keep returned every position
    if logits.shape[0]:
        selected, entropy = _selective_log_softmax(logits, local["targets"][local["predicting"]], temperature,
                                                   with_entropy)
    else:  # nothing to predict in this slice: still part of the graph, for the all-to-alls of the backward
        selected = entropy = logits.float().sum(-1)
    width = batch["input_ids"].shape[1]

    def gathered(values: torch.Tensor) -> torch.Tensor:
        """Per-position values of this slice -> [B, T] aligned with the predicted tokens."""
        mine = torch.zeros(local["predicting"].shape, dtype=values.dtype, device=values.device)
        mine = mine.masked_scatter(local["predicting"], values)
        whole = gather_replicated(mine, 1, grid.cp_group, grid.cp_size, grid.cp_rank)
        return torch.nn.functional.pad(whole[:, :width - 1], (1, 0))  # value of token t sits at position t - 1

    return gathered(selected), (gathered(entropy) if with_entropy else None)
