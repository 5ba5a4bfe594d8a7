"""The decomposition-trace DAG: structural checks, levels, scenario types (property tests)."""

from astra_qaenv.trace import (
    by_level,
    dag_levels,
    find_cycle,
    leaf_ids,
    parallelizable_ids,
    scenario_of,
    structural_problems,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def step(uuid, deps=None, level=1):
    return {"_uuid": uuid, "hop_level": level, "sub_question": f"q{uuid}?", "is_parallel": False,
            "dependency": deps, "sub_answer": f"a{uuid}"}


@st.composite
def dags(draw, max_steps=8):
    """Well-formed traces: each step depends on a subset of earlier ones, hop levels set from the DAG."""
    n = draw(st.integers(1, max_steps))
    trace = []
    for i in range(1, n + 1):
        deps = sorted(draw(st.sets(st.integers(1, i - 1), max_size=3))) if i > 1 else []
        trace.append(step(i, deps or None))
    levels = dag_levels(trace)
    for s in trace:
        s["hop_level"] = levels[str(s["_uuid"])]
    return trace


@settings(max_examples=60, deadline=None)
@given(dags())
def test_well_formed_traces_have_no_problems_and_consistent_levels(trace):
    assert structural_problems(trace) == []
    levels = dag_levels(trace)
    for s in trace:
        for dep in s["dependency"] or []:
            assert levels[str(dep)] < levels[str(s["_uuid"])]
    groups = by_level(trace)
    assert sum(len(g) for g in groups) == len(trace)
    assert scenario_of(trace) in ("Single-Hop", "Parallel Single-Hop", "Multi-Hop", "Parallel Multi-Hop")
    # the leaves are exactly the steps nothing depends on (the last step always is one)
    depended_on = {str(d) for s in trace for d in s["dependency"] or []}
    assert leaf_ids(trace) == {str(s["_uuid"]) for s in trace} - depended_on
    assert str(trace[-1]["_uuid"]) in leaf_ids(trace)


@settings(max_examples=60, deadline=None)
@given(dags(), st.data())
def test_breaking_a_trace_is_always_reported(trace, data):
    broken = [dict(s) for s in trace]
    kind = data.draw(st.sampled_from(["forward", "unknown", "level", "duplicate"]))
    if kind == "forward" and len(broken) > 1:
        broken[0]["dependency"] = [broken[-1]["_uuid"]]
        expected = "later step"
    elif kind == "unknown":
        broken[-1]["dependency"] = [999]
        expected = "unknown id 999"
    elif kind == "duplicate" and len(broken) > 1:
        broken[-1]["_uuid"] = broken[0]["_uuid"]
        expected = "duplicate _uuid"
    else:
        broken[-1]["hop_level"] += 1
        expected = "hop_level"
    assert any(expected in p for p in structural_problems(broken))


def test_cycle_is_found_and_named():
    trace = [step(1, [3]), step(2, [1], 2), step(3, [2], 3)]
    assert find_cycle(trace) in (["1", "3", "2", "1"], ["3", "2", "1", "3"], ["2", "1", "3", "2"])
    problems = structural_problems(trace)
    assert any("cycle" in p for p in problems) and any("later step 3" in p for p in problems)


def test_string_and_integer_ids_mix():
    trace = [step("1"), step(2, ["1"], 2)]
    assert structural_problems(trace) == []


def test_scenario_types_follow_structure():
    assert scenario_of([step(1)]) == "Single-Hop"
    assert scenario_of([step(1), step(2)]) == "Parallel Single-Hop"
    assert scenario_of([step(1), step(2, [1], 2), step(3, [2], 3)]) == "Multi-Hop"
    hybrid = [step(1), step(2), step(3, [1, 2], 2)]
    assert scenario_of(hybrid) == "Parallel Multi-Hop"
    assert parallelizable_ids(hybrid) == {"1", "2"}
    assert leaf_ids(hybrid) == {"3"}


def test_hop_level_message_explains_the_right_level():
    trace = [step(1), step(2, [1], 3)]
    (problem,) = structural_problems(trace)
    assert "step 2 has hop_level 3" in problem and "at level 2" in problem
