"""The state-based verifier (AReaL-SEA): exact match, ignored fields, and a diff naming each difference."""

import pytest
from astra_reward import state_diff, state_reward
from hypothesis import given
from hypothesis import strategies as st

EXPECTED = {
    "orders": [{"id": 1, "status": "cancelled", "created_at": "2026-01-01T00:00:00"},
               {"id": 2, "status": "shipped", "created_at": "2026-01-02T00:00:00"}],
    "balance": 120.0,
    "flags": {"vip": True, "notes": None},
}


def test_equal_states_reward_one():
    final = {"flags": {"notes": None, "vip": True}, "balance": 120, "orders": [dict(o) for o in EXPECTED["orders"]]}
    result = state_reward(final, EXPECTED)
    assert (result.reward, result.diff, result.match) == (1.0, [], True)


def test_every_difference_is_named_with_expected_and_actual():
    final = {"orders": [{"id": 1, "status": "pending", "created_at": "2026-01-01T00:00:00"}],
             "balance": 120.0, "flags": {"vip": 1, "notes": None}, "extra": "x"}
    result = state_reward(final, EXPECTED)
    assert result.reward == 0.0
    assert result.diff == [
        {"path": "orders.0.status", "expected": "cancelled", "actual": "pending", "kind": "changed"},
        {"path": "orders.1", "expected": EXPECTED["orders"][1], "actual": None, "kind": "missing"},
        {"path": "flags.vip", "expected": True, "actual": 1, "kind": "changed"},  # a bool is not a number
        {"path": "extra", "expected": None, "actual": "x", "kind": "unexpected"},
    ]


def test_ignore_fields_with_globs():
    final = {"orders": [{"id": 1, "status": "cancelled", "created_at": "later"},
                        {"id": 2, "status": "shipped", "created_at": "later"}],
             "balance": 120.0, "flags": {"vip": True, "notes": "touched"}}
    assert [d["path"] for d in state_diff(final, EXPECTED)] == ["orders.0.created_at", "orders.1.created_at",
                                                                  "flags.notes"]
    assert state_reward(final, EXPECTED, ["orders.*.created_at", "flags.notes"]).reward == 1.0
    assert state_reward(final, EXPECTED, ["**.*_at", "flags"]).reward == 1.0          # ** and segment globs
    assert state_reward(final, EXPECTED, ["orders.0.created_at", "flags.notes"]).reward == 0.0
    # Ignoring a path also ignores it when missing or unexpected.
    assert state_reward({**EXPECTED, "session": 1}, EXPECTED, ["session"]).reward == 1.0
    assert state_reward({"balance": 120.0, "flags": EXPECTED["flags"]}, EXPECTED, ["orders"]).reward == 1.0


def test_ignore_fields_of_the_result_name_each_pattern_once():
    result = state_reward(EXPECTED, EXPECTED, ["flags.notes", "orders.*.created_at", "flags.notes"])
    assert result.ignore_fields == ["flags.notes", "orders.*.created_at"]
    assert result.components()["ignore_fields"] == ["flags.notes", "orders.*.created_at"]


@pytest.mark.parametrize("final, expected, kind", [
    ("3", 3, "changed"), ([1, 2], {"0": 1}, "changed"), (None, {}, "changed"), (1, 2, "changed"),
])
def test_type_mismatches_and_scalars_at_the_root(final, expected, kind):
    assert state_diff(final, expected) == [{"path": "(root)", "expected": expected, "actual": final, "kind": kind}]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text("abc", max_size=2), children, max_size=3),
    max_leaves=12)


@given(json_values)
def test_a_state_always_matches_itself(value):
    assert state_reward(value, value).reward == 1.0


@given(json_values, json_values)
def test_reward_is_one_exactly_when_the_diff_is_empty(a, b):
    result = state_reward(a, b)
    assert result.reward in (0.0, 1.0)
    assert (result.reward == 1.0) == (result.diff == [])
    assert (result.reward == 1.0) == (state_reward(b, a).reward == 1.0)  # symmetric verdict
