"""Walk properties (hypothesis) and a statistical check that step frequencies follow the weights."""

import math
from collections import Counter

import numpy as np
import pytest
from astra_toolgraph.walks import CSRGraph, WalkConfig, as_lists, plan_walks, run_walks, walk_graphs
from hypothesis import given, settings
from hypothesis import strategies as st
from toolgraph_helpers import invoke, read_jsonl, write_jsonl


@st.composite
def graphs(draw, max_nodes=8):
    n = draw(st.integers(2, max_nodes))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] != p[1]),
                          min_size=1, max_size=n * (n - 1), unique=True))
    weights = draw(st.lists(st.floats(0.1, 10.0), min_size=len(pairs), max_size=len(pairs)))
    src, dst = zip(*pairs, strict=True)
    return CSRGraph.from_edges(n, src, dst, weights)


@st.composite
def configs(draw):
    low = draw(st.integers(1, 4))
    high = draw(st.integers(low, 7))
    return WalkConfig(walks=draw(st.integers(1, 60)), min_length=low, max_length=high,
                      acyclic=draw(st.booleans()), seed=draw(st.integers(0, 2**31)), dedup=False)


def edge_set(graph: CSRGraph) -> set[tuple[int, int]]:
    return {(v, int(u)) for v in range(graph.num_nodes) for u in graph.indices[graph.indptr[v]:graph.indptr[v + 1]]}


@settings(max_examples=150, deadline=None)
@given(graph=graphs(), config=configs())
def test_walks_are_bounded_paths_along_edges(graph, config):
    walks = as_lists(walk_graphs([graph], ["g"], config)[0])
    edges = edge_set(graph)
    for nodes, count in walks:
        assert count == 1
        assert config.min_length <= len(nodes) <= config.max_length
        assert all((a, b) in edges for a, b in zip(nodes, nodes[1:], strict=False))
        if config.acyclic:
            assert len(set(nodes)) == len(nodes)


@settings(max_examples=60, deadline=None)
@given(graph=graphs(), config=configs())
def test_a_walk_stops_early_only_at_a_dead_end(graph, config):
    plan = plan_walks(graph, config, "g")
    paths = run_walks(graph, plan, config.acyclic)
    for row, target in zip(paths, plan.lengths, strict=True):
        nodes = [int(n) for n in row if n >= 0]
        if len(nodes) < target:
            successors = set(graph.indices[graph.indptr[nodes[-1]]:graph.indptr[nodes[-1] + 1]].tolist())
            assert successors <= (set(nodes) if config.acyclic else set())


@settings(max_examples=40, deadline=None)
@given(first=graphs(), second=graphs(), config=configs())
def test_a_graphs_walks_do_not_depend_on_its_batch(first, second, config):
    alone = as_lists(walk_graphs([first], ["first"], config)[0])
    together = as_lists(walk_graphs([second, first], ["second", "first"], config)[1])
    assert alone == together


def test_same_seed_same_walks_and_dedup_counts_add_up():
    graph = CSRGraph.from_edges(3, [0, 1, 2], [1, 2, 0], [1.0, 1.0, 1.0])
    config = WalkConfig(walks=50, min_length=2, max_length=3, seed=7)
    first, again = as_lists(walk_graphs([graph], ["g"], config)[0]), as_lists(walk_graphs([graph], ["g"], config)[0])
    assert first == again
    assert sum(count for _, count in first) == 50
    assert len({tuple(nodes) for nodes, _ in first}) == len(first)
    other = as_lists(walk_graphs([graph], ["g"], WalkConfig(walks=50, min_length=2, max_length=3, seed=8))[0])
    assert other != first


def _max_l1_deviation(counts: np.ndarray, probabilities: np.ndarray, delta: float) -> float:
    """Bretagnolle-Huber-Carol: P(||p_hat - p||_1 >= eps) <= 2^k exp(-n eps^2 / 2); eps for failure prob. delta."""
    n, k = counts.sum(), len(probabilities)
    return math.sqrt(2 * (k * math.log(2) + math.log(1 / delta)) / n)


def test_step_frequencies_follow_the_edge_weights():
    """Every transition out of every node, counted over many walks with a fixed seed, matches the
    weight-proportional distribution within a distribution-free L1 bound (failure probability 1e-9 per node)."""
    rng = np.random.default_rng(0)
    n = 6
    src, dst, weight = [], [], []
    for v in range(n):
        for u in rng.choice([x for x in range(n) if x != v], size=3, replace=False):
            src.append(v), dst.append(int(u)), weight.append(float(rng.uniform(0.2, 5.0)))
    graph = CSRGraph.from_edges(n, src, dst, weight)
    walks = as_lists(walk_graphs([graph], ["g"], WalkConfig(walks=20000, min_length=2, max_length=6, seed=3,
                                                           dedup=False))[0])
    transitions = Counter((a, b) for nodes, _ in walks for a, b in zip(nodes, nodes[1:], strict=False))
    for v in range(n):
        lo, hi = graph.indptr[v], graph.indptr[v + 1]
        successors, w = graph.indices[lo:hi], graph.weights[lo:hi]
        counts = np.array([transitions[(v, int(u))] for u in successors])
        assert counts.sum() > 2000
        l1 = np.abs(counts / counts.sum() - w / w.sum()).sum()
        assert l1 < _max_l1_deviation(counts, w / w.sum(), 1e-9), (v, counts, w)


def test_acyclic_steps_follow_the_weights_of_the_unvisited_successors():
    """From 0 -> 1, the acyclic next step from 1 excludes 0: it goes to 2 or 3 in ratio 1:3."""
    graph = CSRGraph.from_edges(4, [0, 1, 1, 1], [1, 0, 2, 3], [1.0, 100.0, 1.0, 3.0])
    plan = plan_walks(graph, WalkConfig(walks=20000, min_length=3, max_length=3, acyclic=True, seed=5), "g")
    plan.starts[:] = 0
    paths = run_walks(graph, plan, acyclic=True)
    third = Counter(paths[:, 2].tolist())
    assert set(third) == {2, 3}
    counts = np.array([third[2], third[3]])
    assert abs(counts[0] / counts.sum() - 0.25) + abs(counts[1] / counts.sum() - 0.75) < _max_l1_deviation(
        counts, np.array([0.25, 0.75]), 1e-9)


def test_walk_command_writes_deduplicated_chains(tmp_path):
    graph = {"id": "graph-s", "server_id": "s", "nodes": ["a", "b", "c"], "meta": {},
             "edges": [{"src": "a", "dst": "b", "weight": 1.0}, {"src": "b", "dst": "c", "weight": 1.0}]}
    empty = {"id": "graph-t", "server_id": "t", "nodes": ["x"], "edges": [], "meta": {}}
    graphs_file = write_jsonl(tmp_path / "graphs.jsonl", [graph, empty])
    out, rejects = tmp_path / "chains.jsonl", tmp_path / "rejects.jsonl"
    invoke("walk", graphs_file, "--walks", 40, "--min-length", 2, "--max-length", 3, "--acyclic", "-o", out,
           "--rejects", rejects)
    chains = read_jsonl(out)
    assert {tuple(c["tools"]) for c in chains} <= {("a", "b"), ("b", "c"), ("a", "b", "c")}
    assert all(c["origin"] == "walk" and c["server_id"] == "s" and c["meta"]["parent_id"] == "graph-s"
               for c in chains)
    assert len({c["id"] for c in chains}) == len(chains)
    assert read_jsonl(rejects)[0]["id"] == "graph-t"


def test_a_graph_whose_edge_names_an_unknown_tool_is_rejected_as_malformed_naming_the_edge(tmp_path):
    graph = {"id": "graph-s", "server_id": "s", "nodes": ["a", "b"], "meta": {},
             "edges": [{"src": "a", "dst": "b", "weight": 1.0}]}
    bad = {**graph, "id": "graph-bad", "edges": [*graph["edges"], {"src": "b", "dst": "ghost", "weight": 1.0}]}
    graphs_file = write_jsonl(tmp_path / "graphs.jsonl", [graph, bad, graph | {"id": "graph-s2"}])
    out, rejects = tmp_path / "chains.jsonl", tmp_path / "rejects.jsonl"
    invoke("walk", graphs_file, "--walks", 8, "-o", out, "--rejects", rejects, "--skip-bad")
    assert {c["meta"]["parent_id"] for c in read_jsonl(out)} == {"graph-s", "graph-s2"}
    [reject] = read_jsonl(rejects)
    assert reject["id"] == "graph-bad"
    assert reject["reason"] == (f"malformed: {graphs_file}:2: record 'graph-bad': field edges[1].dst: 'ghost' is not "
                                "one of the graph's nodes")
    from astra_toolgraph.cli import main
    from click.testing import CliRunner

    stopped = CliRunner().invoke(main, ["walk", str(graphs_file), "--walks", "8"])  # as a malformed line: it stops
    assert stopped.exit_code == 1 and f"{graphs_file}:2: record 'graph-bad': field edges[1].dst:" in stopped.output
    with pytest.raises(ValueError, match=r"edges\[1\]\.dst"):
        CSRGraph.from_record(bad)


@pytest.mark.parametrize(("values", "field"), [
    ({"start": "random"}, "start"), ({"walks": 0}, "walks"), ({"min_length": 0}, "min_length")])
def test_a_config_built_in_code_is_checked_like_a_flag(values, field):
    from astra_core.config import ConfigError

    with pytest.raises(ConfigError, match=f"field {field}"):
        WalkConfig(**values)
    with pytest.raises(ValueError, match="min_length <= max_length"):
        WalkConfig(min_length=4, max_length=3)
