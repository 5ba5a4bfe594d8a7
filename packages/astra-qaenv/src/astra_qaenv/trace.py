"""ASTRA's decomposition trace: sub-questions as a dependency DAG (paper §2.2.1, Eq. 11–13).

A trace is a list of steps `{_uuid, hop_level, sub_question, is_parallel, dependency, sub_answer}`
(plus `needs_tool` once validated). These helpers read the DAG the `dependency` lists define:
structural problems, depth (hop levels), leaves, the scenario type the structure implies, and
which steps can run in parallel. That every dependency names a sub-question of the trace is an invariant of the
qa_instance kind (`astra_core.invariants`), checked wherever a record is read as one.
"""

from __future__ import annotations

from collections import Counter

from astra_core.invariants import id_text

SCENARIOS = ("Single-Hop", "Parallel Single-Hop", "Multi-Hop", "Parallel Multi-Hop")


def dependencies(step: dict) -> list:
    """The ids a step depends on (`null` and a missing field both mean none)."""
    return list(step.get("dependency") or [])


def structural_problems(trace: list[dict], *, optional_levels: bool = False) -> list[str]:
    """Every reason the trace is not a well-formed DAG with consistent hop levels (empty if fine).

    Checks: unique ids; each dependency names an id defined earlier in the list (so no forward
    references and no self-dependency); no cycles; and each step's hop_level equals its depth in
    the DAG (1 for a step without dependencies, else 1 + the deepest dependency's level). With
    `optional_levels`, a step without a hop_level (an rl_sample's job item may have none) is not checked.
    """
    problems: list[str] = []
    ids = [id_text(s["_uuid"]) for s in trace]
    for uuid, n in Counter(ids).items():
        if n > 1:
            problems.append(f"duplicate _uuid {uuid} ({n} steps)")
    position = {uuid: i for i, uuid in reversed(list(enumerate(ids)))}
    for i, step in enumerate(trace):
        for dep in dependencies(step):
            where = position.get(id_text(dep))
            if where is None:
                problems.append(f"step {ids[i]} depends on unknown id {dep}")
            elif where == i:
                problems.append(f"step {ids[i]} depends on itself")
            elif where > i:
                problems.append(f"step {ids[i]} depends on later step {dep} (dependencies must reference earlier ids)")
    cycle = find_cycle(trace)
    if cycle:
        problems.append("dependency cycle " + " -> ".join(cycle))
    if problems:
        return problems
    levels = dag_levels(trace)
    for step in trace:
        uuid = id_text(step["_uuid"])
        if optional_levels and step.get("hop_level") is None:
            continue
        if step.get("hop_level") != levels[uuid]:
            deps = dependencies(step)
            why = "it has no dependencies" if not deps else f"its deepest dependency is at level {levels[uuid] - 1}"
            problems.append(f"step {uuid} has hop_level {step.get('hop_level')} but {why}, so it is at level "
                            f"{levels[uuid]}")
    return problems


def find_cycle(trace: list[dict]) -> list[str]:
    """One dependency cycle as a list of ids (first id repeated at the end), or [] when acyclic."""
    graph = {id_text(s["_uuid"]): [id_text(d) for d in dependencies(s)] for s in trace}
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for dep in graph.get(node, []):
            if dep not in graph:
                continue
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in graph:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def dag_levels(trace: list[dict]) -> dict[str, int]:
    """Depth of every step in an acyclic trace: 1 without dependencies, else 1 + deepest dependency."""
    by_id = {id_text(s["_uuid"]): s for s in trace}
    levels: dict[str, int] = {}

    def level(uuid: str) -> int:
        if uuid not in levels:
            deps = [id_text(d) for d in dependencies(by_id[uuid]) if id_text(d) in by_id]
            levels[uuid] = 1 + max((level(d) for d in deps), default=0)
        return levels[uuid]

    for uuid in by_id:
        level(uuid)
    return levels


def depth(trace: list[dict]) -> int:
    """Number of hop levels (the longest dependency chain)."""
    return max(dag_levels(trace).values(), default=0)


def dependents(trace: list[dict]) -> dict[str, list[str]]:
    """For each step id, the ids of the steps that depend on it."""
    out: dict[str, list[str]] = {id_text(s["_uuid"]): [] for s in trace}
    for step in trace:
        for dep in dependencies(step):
            out.setdefault(id_text(dep), []).append(id_text(step["_uuid"]))
    return out


def leaf_ids(trace: list[dict]) -> set[str]:
    """Steps no other step depends on."""
    users = dependents(trace)
    return {id_text(s["_uuid"]) for s in trace if not users[id_text(s["_uuid"])]}


def scenario_of(trace: list[dict]) -> str:
    """The scenario type the structure implies (paper's four types, Example Prompt 3)."""
    if len(trace) == 1:
        return "Single-Hop"
    levels = dag_levels(trace)
    if max(levels.values()) == 1:
        return "Parallel Single-Hop"
    widths = Counter(levels.values())
    return "Multi-Hop" if all(n == 1 for n in widths.values()) else "Parallel Multi-Hop"


def parallelizable_ids(trace: list[dict]) -> set[str]:
    """Steps that share their hop level with another step, so they can run concurrently with it."""
    levels = dag_levels(trace)
    widths = Counter(levels.values())
    return {uuid for uuid, lvl in levels.items() if widths[lvl] > 1}


def by_level(trace: list[dict]) -> list[list[dict]]:
    """Steps grouped by hop level, in level order (within a level, trace order)."""
    levels = dag_levels(trace)
    grouped: dict[int, list[dict]] = {}
    for step in trace:
        grouped.setdefault(levels[id_text(step["_uuid"])], []).append(step)
    return [grouped[lvl] for lvl in sorted(grouped)]


def step_id(step: dict) -> str:
    return id_text(step["_uuid"])
