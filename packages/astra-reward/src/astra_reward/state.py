"""State-based verifier reward (AReaL-SEA): the environment's final state against the expected one.

Only a full match succeeds: reward 1.0, else 0.0, with a diff naming every path that differs.

Comparison is exact over JSON values: objects key by key (order ignored), arrays index by index
(order matters), numbers by value (1 == 1.0), but a boolean never equals a number and a string
never equals a number ("3" != 3).

Paths name a value by its keys and array indices joined with dots: `orders.0.created_at`
("(root)" for the whole state). `ignore_fields` are patterns over those paths, matched one
segment at a time: `*` stands for exactly one segment (any key or index), `**` for any number of
segments (zero included), and a segment may itself be a glob (`*_at`, `tmp?`, `[ab]`). A path that
matches an ignore pattern is skipped with everything below it, whether it is missing, unexpected
or different. Keys that contain a dot cannot be named separately.

Each diff entry: {"path", "expected", "actual", "kind"}; kind is "changed", "missing" (in the
expected state only; actual is null) or "unexpected" (in the final state only; expected is null).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

ROOT = "(root)"


@dataclass(frozen=True)
class StateResult:
    reward: float  # 1.0 on a full match, else 0.0
    diff: list[dict] = field(default_factory=list)
    ignore_fields: list[str] = field(default_factory=list)

    @property
    def match(self) -> bool:
        return not self.diff

    def components(self, max_diff: int = 50) -> dict:
        """A record's `reward_components` (common.json's reward_components): the first `max_diff` differences."""
        return {"kind": "state", "match": self.match, "differences": len(self.diff), "diff": self.diff[:max_diff],
                "ignore_fields": self.ignore_fields}


def _compile(patterns: Iterable[str]) -> list[list[str]]:
    return [pattern.split(".") for pattern in patterns if pattern]


def _matches(pattern: list[str], path: list[str]) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_matches(rest, path[skip:]) for skip in range(len(path) + 1))
    return bool(path) and fnmatchcase(path[0], head) and _matches(rest, path[1:])


def _same_scalar(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return expected == actual
    return type(expected) is type(actual) and expected == actual


def state_diff(final_state: Any, expected_state: Any, ignore_fields: Iterable[str] = ()) -> list[dict]:
    """Every difference between the final and the expected state, in a stable order."""
    patterns = _compile(ignore_fields)
    diff: list[dict] = []

    def ignored(path: list[str]) -> bool:
        return any(_matches(pattern, path) for pattern in patterns)

    def walk(expected: Any, actual: Any, path: list[str]) -> None:
        if ignored(path):
            return
        if isinstance(expected, dict) and isinstance(actual, dict):
            for key in expected:
                if key in actual:
                    walk(expected[key], actual[key], [*path, str(key)])
                else:
                    report([*path, str(key)], expected[key], None, "missing")
            for key in actual:
                if key not in expected:
                    report([*path, str(key)], None, actual[key], "unexpected")
        elif isinstance(expected, list) and isinstance(actual, list):
            for index in range(max(len(expected), len(actual))):
                child = [*path, str(index)]
                if index >= len(actual):
                    report(child, expected[index], None, "missing")
                elif index >= len(expected):
                    report(child, None, actual[index], "unexpected")
                else:
                    walk(expected[index], actual[index], child)
        elif isinstance(expected, (dict, list)) or isinstance(actual, (dict, list)) \
                or not _same_scalar(expected, actual):
            report(path, expected, actual, "changed")

    def report(path: list[str], expected: Any, actual: Any, kind: str) -> None:
        if not ignored(path):
            diff.append({"path": ".".join(path) or ROOT, "expected": expected, "actual": actual, "kind": kind})

    walk(expected_state, final_state, [])
    return diff


def state_reward(final_state: Any, expected_state: Any, ignore_fields: Iterable[str] = ()) -> StateResult:
    """1.0 when the final state equals the expected one (ignoring `ignore_fields`), else 0.0, with the diff.
    `ignore_fields` of the result lists each pattern once, in first-given order (a pattern given both by
    `--ignore` and by the record is one pattern)."""
    patterns = list(dict.fromkeys(ignore_fields))
    diff = state_diff(final_state, expected_state, patterns)
    return StateResult(reward=0.0 if diff else 1.0, diff=diff, ignore_fields=patterns)
