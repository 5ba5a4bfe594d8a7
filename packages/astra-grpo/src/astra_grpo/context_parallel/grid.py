"""The process grid: data parallelism x context parallelism.

Ranks are laid out CP-major: the `cp_size` consecutive ranks `d*cp_size .. d*cp_size + cp_size - 1`
form context-parallel group `d` (they hold the same micro-batches, each a slice of every sequence:
on a multi-GPU node their all-to-alls stay inside the node). The ranks with the same CP rank form
a data-parallel group (one per CP rank): metrics and token counts are summed over it, because
every CP group holds its whole micro-batches.

Gradients are still averaged over *all* processes by DDP / DeepSpeed (they do not know about the
grid); see `token_logprobs` in `forward.py` for why that leaves no CP-size factor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from astra_grpo.config import ConfigError


@dataclass(frozen=True)
class ProcessGrid:
    """This process's place in the DP x CP grid."""

    world_size: int
    dp_size: int
    cp_size: int
    dp_rank: int
    cp_rank: int
    cp_group: Any = None  # torch ProcessGroup of this process's CP group (None when cp_size == 1)
    dp_group: Any = None  # ProcessGroup of its DP group (None: all processes, or just this one)

    @property
    def rank(self) -> int:
        return self.dp_rank * self.cp_size + self.cp_rank


def grid_shape(world_size: int, cp_size: int) -> tuple[int, int]:
    """(dp_size, cp_size), or a ConfigError naming the field when the processes don't split."""
    if cp_size < 1:
        raise ConfigError("config field context_parallel_size: must be >= 1")
    if world_size % cp_size:
        raise ConfigError(f"config field context_parallel_size: {cp_size} does not divide the {world_size} "
                          "processes (processes = data-parallel size x context_parallel_size)")
    return world_size // cp_size, cp_size


_groups: dict[int, tuple[list, list]] = {}  # cp_size -> (CP groups, DP groups); created once per process
_current: ProcessGrid | None = None


def init_grid(cp_size: int) -> ProcessGrid:
    """Build (or reuse) the grid for `cp_size` over all processes and make it current.

    A collective when new groups are needed: every process calls it with the same `cp_size`.
    """
    global _current
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    rank = dist.get_rank() if world > 1 else 0
    dp_size, cp_size = grid_shape(world, cp_size)
    dp_rank, cp_rank = divmod(rank, cp_size)
    cp_group = dp_group = None
    if world > 1 and cp_size > 1:
        if cp_size not in _groups:
            cp_groups = [dist.new_group(list(range(d * cp_size, (d + 1) * cp_size))) for d in range(dp_size)]
            dp_groups = [dist.new_group(list(range(c, world, cp_size))) for c in range(cp_size)]
            _groups[cp_size] = (cp_groups, dp_groups)
        cp_groups, dp_groups = _groups[cp_size]
        cp_group, dp_group = cp_groups[dp_rank], dp_groups[cp_rank]
    _current = ProcessGrid(world, dp_size, cp_size, dp_rank, cp_rank, cp_group, dp_group)
    return _current


def current_grid() -> ProcessGrid:
    """The grid of the running trainer; without one, plain data parallelism over all processes."""
    if _current is not None and _current.world_size == _world():
        return _current
    world = _world()
    return ProcessGrid(world, world, 1, dist.get_rank() if world > 1 else 0, 0)


def _world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
