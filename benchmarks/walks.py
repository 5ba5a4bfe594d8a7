"""Walks/s of astra-toolgraph's vectorized walker vs. a networkx random-walk loop, measured in one run.

Corpus: synthetic, the paper's scale: 1,585 servers with 19,036 tools in total (sizes vary), each
tool with a few weighted out-edges inside its server. Both walkers draw length-bounded
(2..6 tools) weight-proportional walks from uniformly chosen start tools.

    .venv/bin/python benchmarks/walks.py [--walks-per-server 64] [--baseline-servers 300]
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402

import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
from astra_toolgraph.walks import CSRGraph, WalkConfig, walk_graphs  # noqa: E402

SERVERS, TOOLS = 1585, 19036


def synthetic_corpus(seed: int = 0) -> list[tuple[int, list[tuple[int, int, float]]]]:
    """(number of tools, [(src, dst, weight)]) per server."""
    rng = np.random.default_rng(seed)
    sizes = np.maximum(3, rng.lognormal(2.2, 0.6, SERVERS)).astype(int)
    while sizes.sum() != TOOLS:  # nudge to the exact total, keeping every server at >= 3 tools
        i = rng.integers(SERVERS)
        sizes[i] += 1 if sizes.sum() < TOOLS else -(sizes[i] > 3)
    corpus = []
    for n in sizes:
        edges = []
        for v in range(n):
            k = min(n - 1, 1 + rng.poisson(2))
            for u in rng.choice([x for x in range(n) if x != v], size=k, replace=False):
                edges.append((v, int(u), float(rng.integers(1, 6))))
        corpus.append((int(n), edges))
    return corpus


def ours(corpus, config: WalkConfig) -> tuple[int, float]:
    started = time.perf_counter()
    graphs = [CSRGraph.from_edges(n, *zip(*edges, strict=True)) for n, edges in corpus]
    results = walk_graphs(graphs, [str(i) for i in range(len(graphs))], config)
    elapsed = time.perf_counter() - started
    return sum(len(paths) for paths, _ in results), elapsed


def networkx_baseline(corpus, walks_per_server: int, min_length: int, max_length: int) -> tuple[int, float]:
    rng = random.Random(0)
    started = time.perf_counter()
    kept = 0
    for n, edges in corpus:
        graph = nx.DiGraph()
        graph.add_nodes_from(range(n))
        graph.add_weighted_edges_from(edges)
        starts = [v for v in graph.nodes if graph.out_degree(v) > 0]
        for _ in range(walks_per_server):
            walk = [rng.choice(starts)]
            target = rng.randint(min_length, max_length)
            while len(walk) < target:
                successors = list(graph.successors(walk[-1]))
                if not successors:
                    break
                weights = [graph[walk[-1]][u]["weight"] for u in successors]
                walk.append(rng.choices(successors, weights)[0])
            kept += len(walk) >= min_length
    return kept, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--walks-per-server", type=int, default=64)
    parser.add_argument("--baseline-servers", type=int, default=SERVERS, help="servers the baseline walks")
    args = parser.parse_args()
    corpus = synthetic_corpus()
    edges = sum(len(e) for _, e in corpus)
    print(f"corpus: {len(corpus):,} servers, {sum(n for n, _ in corpus):,} tools, {edges:,} edges")
    total = len(corpus) * args.walks_per_server
    print(f"walks: {args.walks_per_server} per server ({total:,} in all), length 2..6, weight-proportional")

    config = WalkConfig(walks=args.walks_per_server, min_length=2, max_length=6, seed=0, dedup=False)
    ours(corpus[:20], config)  # warm-up
    kept, seconds = ours(corpus, config)
    ours_rate = total / seconds
    print(f"astra-toolgraph (numpy, one batch): {seconds:8.3f} s  {ours_rate:12,.0f} walks/s  ({kept:,} kept)")
    kept_acyclic, seconds_acyclic = ours(corpus, WalkConfig(walks=args.walks_per_server, min_length=2, max_length=6,
                                                            seed=0, dedup=False, acyclic=True))
    print(f"astra-toolgraph, acyclic          : {seconds_acyclic:8.3f} s  {total / seconds_acyclic:12,.0f} walks/s"
          f"  ({kept_acyclic:,} kept)")

    subset = corpus[:args.baseline_servers]
    kept_nx, seconds_nx = networkx_baseline(subset, args.walks_per_server, 2, 6)
    nx_rate = len(subset) * args.walks_per_server / seconds_nx
    print(f"networkx loop ({len(subset):,} servers)  : {seconds_nx:8.3f} s  {nx_rate:12,.0f} walks/s  ({kept_nx:,} kept)")
    print(f"speed-up: {ours_rate / nx_rate:.1f}x walks/s")


if __name__ == "__main__":
    main()
