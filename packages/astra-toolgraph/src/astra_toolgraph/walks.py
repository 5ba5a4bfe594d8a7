"""Length-bounded weighted random walks on tool transition graphs, vectorized with numpy.

Every walker advances one step per iteration; a step draws the next tool with probability
proportional to the out-edge weights, by a binary search in the global cumulative-weight
array of a CSR graph. Many graphs walk together as one block-diagonal graph, so a corpus of
thousands of servers is a handful of numpy calls per step.

A walk gets a target length drawn uniformly from [min_length, max_length] and stops earlier
at a tool with no (unvisited) successor; walks shorter than min_length are dropped. With
`acyclic`, the next tool is drawn among the unvisited successors, still proportionally to the
weights (rejection with a few redraws, then an exact masked draw for the walkers still blocked).

Randomness is counter-based: every uniform a walker uses is a hash of (seed, graph key, walker
index, slot), so a graph's walks do not depend on which other graphs share its batch, shard or run,
and a whole batch draws its randomness in one vectorized call.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from astra_toolgraph.configs import WalkConfig

REDRAWS = 4  # acyclic: redraws before the exact draw among unvisited successors


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
        """The CSR form of a tool_graph record (node i = graph['nodes'][i]); ValueError for an edge whose end
        is not one of its nodes."""
        problem = unknown_endpoint(graph)
        if problem is not None:
            raise ValueError("field {}: {}".format(*problem))
        position = {name: i for i, name in enumerate(graph["nodes"])}
        edges = [(position[e["src"]], position[e["dst"]], e["weight"]) for e in graph["edges"]]
        src, dst, weight = zip(*edges, strict=True) if edges else ((), (), ())
        return cls.from_edges(len(graph["nodes"]), src, dst, weight)

    def out_degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def out_weight(self) -> np.ndarray:
        sums = np.concatenate([[0.0], np.cumsum(self.weights)])
        return sums[self.indptr[1:]] - sums[self.indptr[:-1]]


def unknown_endpoint(graph: dict) -> tuple[str, str] | None:
    """The first edge of a tool_graph record that names a tool not among its nodes: (field, problem)."""
    nodes = set(graph["nodes"])
    for index, edge in enumerate(graph["edges"]):
        for end in ("src", "dst"):
            if edge[end] not in nodes:
                return f"edges[{index}].{end}", f"{edge[end]!r} is not one of the graph's nodes"
    return None


def block_diagonal(graphs: list[CSRGraph]) -> tuple[CSRGraph, np.ndarray]:
    """One graph holding all `graphs` side by side, and each graph's first node id in it."""
    offsets = np.zeros(len(graphs) + 1, dtype=np.int64)
    np.cumsum([g.num_nodes for g in graphs], out=offsets[1:])
    edge_offsets = np.cumsum([0] + [len(g.indices) for g in graphs])
    indptr = np.concatenate([[0]] + [g.indptr[1:] + edge_offsets[i] for i, g in enumerate(graphs)])
    indices = np.concatenate([g.indices + offsets[i] for i, g in enumerate(graphs)] or [np.zeros(0, np.int64)])
    weights = np.concatenate([g.weights for g in graphs] or [np.zeros(0)])
    return CSRGraph(indptr.astype(np.int64), indices.astype(np.int64), weights.astype(np.float64)), offsets[:-1]


def graph_key(seed: int, key: str) -> int:
    digest = hashlib.blake2b(f"{seed}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijective scramble of uint64 counters (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniforms(keys: np.ndarray, walkers: np.ndarray, slots: int) -> np.ndarray:
    """Counter-based uniforms in [0, 1): row i holds `slots` values fixed by (keys[i], walkers[i]) alone."""
    counters = walkers.astype(np.uint64)[:, None] * np.uint64(slots) + np.arange(slots, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        bits = _mix(_mix(keys.astype(np.uint64))[:, None] ^ counters)
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


@dataclass
class WalkPlan:
    """Per-walker start nodes, target lengths and uniforms (shape: walkers x steps x draws)."""

    starts: np.ndarray
    lengths: np.ndarray
    uniforms: np.ndarray


def plan_batch(graph: CSRGraph, offsets: np.ndarray, keys: list[str], config: WalkConfig) -> tuple[WalkPlan, np.ndarray]:
    """`config.walks` walks for each block of a block-diagonal graph (block i starts at node offsets[i]),
    randomness fixed by (config.seed, keys[i], walker index). Returns the plan and the walkers per block."""
    draws = 1 + (REDRAWS if config.acyclic else 0)
    degree = graph.out_degree()
    candidates = np.flatnonzero(degree > 0) if config.min_length > 1 else np.arange(graph.num_nodes)
    ends = np.append(offsets[1:], graph.num_nodes)
    first, last = np.searchsorted(candidates, offsets), np.searchsorted(candidates, ends)
    walkers = np.where(last > first, config.walks, 0).astype(np.int64)
    block = np.repeat(np.arange(len(offsets)), walkers)
    local = np.arange(len(block)) - np.repeat(np.cumsum(walkers) - walkers, walkers)
    key_values = np.array([graph_key(config.seed, k) for k in keys], dtype=np.uint64)
    u = uniforms(key_values[block], local, config.max_length * draws + 2)
    lo, hi = first[block], last[block]
    if config.start == "weighted" and config.min_length > 1:
        cumulative = np.concatenate([[0.0], np.cumsum(graph.out_weight()[candidates])])
        pick = _draw(cumulative, lo, hi, u[:, 0])
    else:
        pick = np.minimum(lo + (u[:, 0] * (hi - lo)).astype(np.int64), hi - 1)
    span = config.max_length - config.min_length + 1
    lengths = config.min_length + np.minimum((u[:, 1] * span).astype(np.int64), span - 1)
    steps = u[:, 2:].reshape(len(block), config.max_length, draws)
    return WalkPlan(candidates[pick].astype(np.int64), lengths, steps), walkers


def plan_walks(graph: CSRGraph, config: WalkConfig, key: str = "") -> WalkPlan:
    """The plan of one graph's walks (as it is inside any batch)."""
    return plan_batch(graph, np.zeros(1, dtype=np.int64), [key], config)[0]


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


def walk_graphs(graphs: list[CSRGraph], keys: list[str], config: WalkConfig) -> list[tuple[np.ndarray, np.ndarray]]:
    """All graphs walked together. For each graph: its kept walks (rows of node ids, -1 after the end; distinct
    rows when `config.dedup`, in order of first appearance) and how often each was drawn."""
    combined, offsets = block_diagonal(graphs)
    plan, sizes = plan_batch(combined, offsets, keys, config)
    paths = run_walks(combined, plan, config.acyclic)
    keep = (paths >= 0).sum(axis=1) >= config.min_length
    paths = np.where(paths >= 0, paths - np.repeat(offsets, sizes)[:, None], -1)  # back to each graph's node ids
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    results = []
    for i in range(len(graphs)):
        mine = paths[bounds[i]:bounds[i + 1]][keep[bounds[i]:bounds[i + 1]]]
        results.append(_deduplicate(mine) if config.dedup else (mine, np.ones(len(mine), dtype=np.int64)))
    return results


def _deduplicate(paths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(paths) == 0:
        return paths, np.zeros(0, dtype=np.int64)
    unique, first, counts = np.unique(paths, axis=0, return_index=True, return_counts=True)
    order = np.argsort(first)  # in order of first appearance
    return unique[order], counts[order]


def as_lists(walked: tuple[np.ndarray, np.ndarray]) -> list[tuple[list[int], int]]:
    """One graph's walks as (node list, times drawn) pairs."""
    paths, counts = walked
    return [([int(n) for n in row if n >= 0], int(c)) for row, c in zip(paths, counts, strict=True)]
