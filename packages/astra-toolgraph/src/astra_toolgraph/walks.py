"""Length-bounded weighted random walks on tool transition graphs, vectorized with numpy.

Every walker advances one step per iteration; a step draws the next tool with probability
proportional to the out-edge weights, by a binary search in the global cumulative-weight
array of a CSR graph. Many graphs walk together as one block-diagonal graph, so a corpus of
thousands of servers is a handful of numpy calls per step.

A walk gets a target length drawn uniformly from [min_length, max_length] and stops earlier
at a tool with no (unvisited) successor; walks shorter than min_length are dropped. With
`acyclic`, the next tool is drawn among the unvisited successors, still proportionally to the
weights (rejection with a few redraws, then an exact masked draw for the walkers still blocked).

Randomness is drawn per graph from (seed, graph key), so a graph's walks do not depend on
which other graphs share its batch, shard or run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

REDRAWS = 4  # acyclic: redraws before the exact draw among unvisited successors


@dataclass
class WalkConfig:
    walks: int = 32  # walks started per graph (before dropping short ones and deduplicating)
    min_length: int = 2  # fewest tools in a kept walk
    max_length: int = 5  # most tools in a walk
    acyclic: bool = False  # never revisit a tool within a walk
    seed: int = 0
    start: str = "uniform"  # uniform | weighted: start tool uniform over tools with successors, or by out-weight
    dedup: bool = True  # keep each distinct walk once (with how often it was drawn)

    def __post_init__(self) -> None:
        if not 1 <= self.min_length <= self.max_length:
            raise ValueError(f"need 1 <= min_length <= max_length, got {self.min_length}..{self.max_length}")
        if self.start not in ("uniform", "weighted"):
            raise ValueError(f"start must be uniform or weighted, got {self.start!r}")


@dataclass
class CSRGraph:
    """Out-edges of node v are indices[indptr[v]:indptr[v+1]] with weights[...] (all > 0)."""

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @classmethod
    def from_edges(cls, num_nodes: int, src, dst, weight) -> CSRGraph:
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        weight = np.asarray(weight, dtype=np.float64)
        if len(weight) and not (weight > 0).all():
            raise ValueError("edge weights must be > 0")
        order = np.lexsort((dst, src))
        indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
        return cls(indptr, dst[order], weight[order])

    @classmethod
    def from_record(cls, graph: dict) -> CSRGraph:
        """The CSR form of a tool_graph record (node i = graph['nodes'][i])."""
        position = {name: i for i, name in enumerate(graph["nodes"])}
        edges = [(position[e["src"]], position[e["dst"]], e["weight"]) for e in graph["edges"]
                 if e["src"] in position and e["dst"] in position]
        src, dst, weight = zip(*edges, strict=True) if edges else ((), (), ())
        return cls.from_edges(len(graph["nodes"]), src, dst, weight)

    def out_degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def out_weight(self) -> np.ndarray:
        sums = np.concatenate([[0.0], np.cumsum(self.weights)])
        return sums[self.indptr[1:]] - sums[self.indptr[:-1]]


def block_diagonal(graphs: list[CSRGraph]) -> tuple[CSRGraph, np.ndarray]:
    """One graph holding all `graphs` side by side, and each graph's first node id in it."""
    offsets = np.zeros(len(graphs) + 1, dtype=np.int64)
    np.cumsum([g.num_nodes for g in graphs], out=offsets[1:])
    edge_offsets = np.cumsum([0] + [len(g.indices) for g in graphs])
    indptr = np.concatenate([[0]] + [g.indptr[1:] + edge_offsets[i] for i, g in enumerate(graphs)])
    indices = np.concatenate([g.indices + offsets[i] for i, g in enumerate(graphs)] or [np.zeros(0, np.int64)])
    weights = np.concatenate([g.weights for g in graphs] or [np.zeros(0)])
    return CSRGraph(indptr.astype(np.int64), indices.astype(np.int64), weights.astype(np.float64)), offsets[:-1]


def graph_rng(seed: int, key: str) -> np.random.Generator:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "big")])


@dataclass
class WalkPlan:
    """Per-walker start nodes, target lengths and pre-drawn uniforms (shape: walkers x steps x draws)."""

    starts: np.ndarray
    lengths: np.ndarray
    uniforms: np.ndarray


def plan_walks(graph: CSRGraph, config: WalkConfig, key: str = "") -> WalkPlan:
    """Starts, lengths and randomness for `config.walks` walks on one graph, from (seed, key)."""
    rng = graph_rng(config.seed, key)
    draws = 1 + (REDRAWS if config.acyclic else 0)
    degree = graph.out_degree()
    candidates = np.flatnonzero(degree > 0) if config.min_length > 1 else np.arange(graph.num_nodes)
    if len(candidates) == 0 or config.walks == 0:
        empty = np.zeros(0, dtype=np.int64)
        return WalkPlan(empty, empty, np.zeros((0, config.max_length, draws)))
    if config.start == "weighted" and config.min_length > 1:
        weight = graph.out_weight()[candidates]
        starts = rng.choice(candidates, size=config.walks, p=weight / weight.sum())
    else:
        starts = rng.choice(candidates, size=config.walks)
    lengths = rng.integers(config.min_length, config.max_length + 1, size=config.walks)
    uniforms = rng.random((config.walks, config.max_length, draws))
    return WalkPlan(starts.astype(np.int64), lengths.astype(np.int64), uniforms)


def _draw(cumulative: np.ndarray, lo: np.ndarray, hi: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Edge index in [lo, hi) drawn with probability proportional to weight, for each walker."""
    target = cumulative[lo] + u * (cumulative[hi] - cumulative[lo])
    return np.clip(np.searchsorted(cumulative, target, side="right") - 1, lo, hi - 1)


def _draw_unvisited(graph: CSRGraph, paths: np.ndarray, walkers: np.ndarray, t: int, u: np.ndarray) -> np.ndarray:
    """For each walker, the next node among the unvisited successors of its current node, proportional to
    weight (visited successors get weight 0); -1 where every successor was visited. Vectorized over walkers."""
    node = paths[walkers, t - 1]
    lo, hi = graph.indptr[node], graph.indptr[node + 1]
    sizes = hi - lo
    starts = np.concatenate([[0], np.cumsum(sizes)])
    owner = np.repeat(np.arange(len(walkers)), sizes)
    edge = lo[owner] + np.arange(starts[-1]) - starts[owner]
    successor = graph.indices[edge]
    visited = (paths[walkers[owner], :t] == successor[:, None]).any(axis=1)
    cumulative = np.concatenate([[0.0], np.cumsum(np.where(visited, 0.0, graph.weights[edge]))])
    chosen = _draw(cumulative, starts[:-1], starts[1:], u)
    free = cumulative[starts[1:]] - cumulative[starts[:-1]] > 0
    return np.where(free, successor[np.minimum(chosen, len(successor) - 1)], -1)


def run_walks(graph: CSRGraph, plan: WalkPlan, acyclic: bool = False) -> np.ndarray:
    """Walk matrix (walkers x max length), -1 after each walk's end."""
    walkers, steps = len(plan.starts), plan.uniforms.shape[1] if len(plan.starts) else 0
    paths = np.full((walkers, max(steps, 1)), -1, dtype=np.int64)
    if walkers == 0:
        return paths
    cumulative = np.concatenate([[0.0], np.cumsum(graph.weights)])
    degree = graph.out_degree()
    paths[:, 0] = plan.starts
    current = plan.starts.copy()
    active = (plan.lengths > 1) & (degree[current] > 0)
    for t in range(1, steps):
        idx = np.flatnonzero(active & (plan.lengths > t))
        if len(idx) == 0:
            break
        node = current[idx]
        lo, hi = graph.indptr[node], graph.indptr[node + 1]
        nxt = graph.indices[_draw(cumulative, lo, hi, plan.uniforms[idx, t, 0])]
        if acyclic:
            nxt = _avoid_visited(graph, cumulative, paths, idx, t, nxt, plan.uniforms)
        moved = nxt >= 0
        paths[idx[moved], t] = nxt[moved]
        current[idx[moved]] = nxt[moved]
        active[idx[~moved]] = False
        active[idx[moved]] = degree[nxt[moved]] > 0
    return paths


def _avoid_visited(graph: CSRGraph, cumulative: np.ndarray, paths: np.ndarray, idx: np.ndarray, t: int,
                   nxt: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    blocked = (paths[idx, :t] == nxt[:, None]).any(axis=1)
    for redraw in range(1, uniforms.shape[2]):
        if not blocked.any():
            return nxt
        which = np.flatnonzero(blocked)
        node = paths[idx[which], t - 1]
        lo, hi = graph.indptr[node], graph.indptr[node + 1]
        nxt[which] = graph.indices[_draw(cumulative, lo, hi, uniforms[idx[which], t, redraw])]
        blocked[which] = (paths[idx[which], :t] == nxt[which, None]).any(axis=1)
    if blocked.any():
        which = np.flatnonzero(blocked)
        nxt[which] = _draw_unvisited(graph, paths, idx[which], t, uniforms[idx[which], t, 0])
    return nxt


def walk_graphs(graphs: list[CSRGraph], keys: list[str], config: WalkConfig) -> list[list[tuple[list[int], int]]]:
    """For each graph: its kept walks as (node list, times drawn), all graphs walked together."""
    plans = [plan_walks(g, config, key) for g, key in zip(graphs, keys, strict=True)]
    combined, offsets = block_diagonal(graphs)
    owner = np.concatenate([np.full(len(p.starts), i) for i, p in enumerate(plans)] or [np.zeros(0, np.int64)])
    merged = WalkPlan(np.concatenate([p.starts + offsets[i] for i, p in enumerate(plans)] or [np.zeros(0, np.int64)]),
                      np.concatenate([p.lengths for p in plans] or [np.zeros(0, np.int64)]),
                      np.concatenate([p.uniforms for p in plans]) if plans else np.zeros((0, 1, 1)))
    paths = run_walks(combined, merged, config.acyclic)
    lengths = (paths >= 0).sum(axis=1)
    results: list[list[tuple[list[int], int]]] = []
    for i in range(len(graphs)):
        mine = paths[(owner == i) & (lengths >= config.min_length)] - offsets[i]
        mine[mine < 0] = -1  # keep the padding marker after shifting
        results.append(_collect(mine, config.dedup))
    return results


def _collect(paths: np.ndarray, dedup: bool) -> list[tuple[list[int], int]]:
    if len(paths) == 0:
        return []
    if not dedup:
        return [([int(n) for n in row if n >= 0], 1) for row in paths]
    unique, first, counts = np.unique(paths, axis=0, return_index=True, return_counts=True)
    order = np.argsort(first)  # in order of first appearance
    return [([int(n) for n in unique[j] if n >= 0], int(counts[j])) for j in order]
