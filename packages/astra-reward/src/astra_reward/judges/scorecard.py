"""The `scores` a judge adds to a record, and what happens when a judgment could not be read.

Documented behaviour for judge output that cannot be parsed (never a silent score):

- the dimension is `null`, and `judge_errors[dimension]` says why (unparseable reply, value out of
  range, sub-question or call missing from the reply, ...);
- a dimension made of several judgments (one per round, per call, per sub-question) is `null`
  when any of them is missing: a mean over the parsed part only would be biased toward what the
  judge found easy to answer. What was parsed is still kept in `details`;
- the aggregate (`overall`, `QS`) is the mean over the applicable dimensions, and `null` when any
  applicable dimension is `null`;
- with `--min-score`, an unscored record is rejected with reason "unscored: ...".

A dimension that does not apply (TCU/TCP with fewer than two tool-call rounds, TCS/TC without tool
calls) is `null` and named in `not_applicable` ({dimension: why}); it is left out of the aggregate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Scorecard:
    dimensions: tuple[str, ...]
    values: dict[str, float | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    not_applicable: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def set(self, dimension: str, value: float | None, errors: list[str] | str | None = None) -> None:
        if isinstance(errors, str):
            errors = [errors]
        errors = [e for e in errors or [] if e]
        if errors:
            self.errors[dimension] = "; ".join(errors)
            value = None
        elif value is None:
            self.errors[dimension] = "no score"
        self.values[dimension] = value

    def skip(self, dimension: str, why: str) -> None:
        self.values[dimension] = None
        self.not_applicable[dimension] = why

    def aggregate(self) -> float | None:
        applicable = [self.values.get(d) for d in self.dimensions if d not in self.not_applicable]
        if not applicable or any(v is None for v in applicable):
            return None
        return sum(applicable) / len(applicable)  # type: ignore[arg-type]

    def scores(self, aggregate_name: str | None) -> dict:
        out: dict[str, Any] = {d: self.values.get(d) for d in self.dimensions}
        if aggregate_name:
            out[aggregate_name] = self.aggregate()
        if self.not_applicable:
            out["not_applicable"] = dict(self.not_applicable)
        out["judge_errors"] = dict(self.errors)
        out["details"] = self.details
        return out
