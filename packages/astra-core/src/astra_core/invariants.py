"""Rules of a record kind that no JSON schema can express (a reference from one field to another), checked by
`astra_core.schema.validate` / `errors` / `is_valid` after the schema, wherever a record is validated as the kind:
so every stage reading or writing the kind holds to them. docs/formats.md states each under its kind."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

Violation = tuple[str, str]  # (field, message)


@dataclass(frozen=True)
class Invariant:
    rule: str  # what always holds, as docs/formats.md states it
    check: Callable[[dict], Iterator[Violation]]  # run only on a record its kind's schema accepts


def id_text(uuid) -> str:
    """A sub-question id as compared: LLMs write ids as 1 or "1" interchangeably, so they compare as text."""
    return str(uuid)


def unknown_dependencies(instance: dict) -> Iterator[Violation]:
    """A violation per sub-question of a qa_instance whose dependency names a sub-question its
    decomposition_trace does not have."""
    trace = instance["decomposition_trace"]
    known = {id_text(step["_uuid"]) for step in trace}
    for position, step in enumerate(trace):
        missing = [dep for dep in step.get("dependency") or () if id_text(dep) not in known]
        if missing:
            names = ", ".join(repr(dep) for dep in missing)
            have = ", ".join(repr(s["_uuid"]) for s in trace)
            yield (f"decomposition_trace[{position}].dependency",
                   f"sub-question {step['_uuid']!r} depends on {names}, which no sub-question of the decomposition "
                   f"has (its _uuid values: {have})")


INVARIANTS: dict[str, tuple[Invariant, ...]] = {
    "qa_instance": (
        Invariant("Every id in a sub-question's `dependency` is the `_uuid` of a sub-question of the same "
                  "`decomposition_trace` (compared as text: `1` and `\"1\"` are the same id); a `null` or missing "
                  "`dependency` depends on nothing. A record that breaks this is invalid, naming the field "
                  "`decomposition_trace[i].dependency`.", unknown_dependencies),
    ),
}


def of(kind: str) -> tuple[Invariant, ...]:
    """The invariants of a record kind (none for most)."""
    return INVARIANTS.get(kind, ())
