"""The directed transition graph of one server's tools (paper §2.1.2).

Edge weight = how often the ordered pair occurs consecutively in the server's synthesized chains
(origin "llm"), plus `schema_weight` when an output field of the source tool can feed a required
parameter of the target (origin "schema", found without an LLM). So a server has a graph even
when no chain was synthesized.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from astra_core.config import knob
from astra_core.records import new_record

from astra_toolgraph.dependency import MATCH_THRESHOLD, feeds


@dataclass
class GraphConfig:
    schema_edges: bool = knob(True, "Add LLM-free edges where an output field feeds a required parameter.")
    schema_weight: float = knob(1.0, "Weight a schema edge adds (a synthesized chain pair adds 1 per occurrence).",
                                 minimum=0)
    match_threshold: float = knob(MATCH_THRESHOLD, "Least field->parameter match score of a schema edge.",
                                   minimum=0, maximum=1)
    llm_edges: bool = knob(True, "Count consecutive pairs of the synthesized chains (--chains) as edges.")


def pair_counts(chains: Iterable[list[str]], tool_names: set[str]) -> Counter:
    """Consecutive (a, b) pairs over all chains, counting only tools the server has."""
    counts: Counter = Counter()
    for chain in chains:
        for a, b in zip(chain, chain[1:], strict=False):
            if a in tool_names and b in tool_names and a != b:
                counts[(a, b)] += 1
    return counts


def schema_dependencies(tools: list[dict], threshold: float = MATCH_THRESHOLD) -> dict[tuple[str, str], list[dict]]:
    """(producer, consumer) -> evidence for every pair of distinct tools with a data dependency."""
    edges = {}
    for producer in tools:
        for consumer in tools:
            if producer is consumer:
                continue
            evidence = feeds(producer, consumer, threshold)
            if evidence:
                edges[(producer["function"]["name"], consumer["function"]["name"])] = evidence
    return edges


def build_graph(server: dict, chains: list[list[str]], config: GraphConfig) -> dict:
    """The tool_graph record of `server`, from its chains' tool sequences."""
    names = [t["function"]["name"] for t in server["tools"]]
    counts = pair_counts(chains, set(names)) if config.llm_edges else Counter()
    dependencies = schema_dependencies(server["tools"], config.match_threshold) if config.schema_edges else {}
    edges = []
    for key in sorted(set(counts) | set(dependencies), key=lambda k: (names.index(k[0]), names.index(k[1]))):
        origin, weight = [], 0.0
        if counts[key]:
            origin.append("llm")
            weight += counts[key]
        edge = {"src": key[0], "dst": key[1]}
        if key in dependencies:
            origin.append("schema")
            weight += config.schema_weight
            edge["evidence"] = dependencies[key]
        if weight > 0:
            edges.append({**edge, "weight": float(weight), "origin": origin, "pair_count": counts[key]})
    return new_record(f"graph-{server['id']}", parent=server, server_id=server["id"], nodes=names, edges=edges,
                      chains_used=len(chains))
