"""JSON Schemas of the record kinds, and validation with errors that name record and field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

import jsonschema_rs

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from referencing import Registry

from astra_core import invariants
from astra_core.invariants import Invariant
from astra_core.records import KINDS

_BASE = "https://astra-toolkit.dev/schemas/"
_KIND_OF_REF = {_BASE + f"{kind}.json": kind for kind in KINDS}


class RecordError(ValueError):
    """A record that breaks the contract. Carries where it came from and which field is wrong."""

    def __init__(self, message: str, *, record_id: str | None = None, field: str | None = None,
                 source: str | None = None, lineno: int | None = None):
        self.message = message
        self.record_id = record_id
        self.field = field
        self.source = source
        self.lineno = lineno
        super().__init__(str(self))

    def located(self, source: str, lineno: int) -> RecordError:
        return RecordError(self.message, record_id=self.record_id, field=self.field, source=source, lineno=lineno)

    def __str__(self) -> str:
        where = f"{self.source}:{self.lineno}: " if self.source else ""
        rec = f"record {self.record_id!r}: " if self.record_id is not None else ""
        field = f"field {self.field}: " if self.field else ""
        return f"{where}{rec}{field}{self.message}"


def _schema_text(name: str) -> dict:
    return json.loads((files("astra_core") / "schemas" / f"{name}.json").read_text())


@cache
def _registry() -> Registry:
    from referencing import Registry, Resource

    resources = [(_BASE + f"{name}.json", Resource.from_contents(_schema_text(name)))
                 for name in ("common", *KINDS)]
    return Registry().with_resources(resources)


@cache
def schema(kind: str) -> dict:
    """The JSON Schema of a record kind (see docs/formats.md)."""
    if kind not in KINDS:
        raise ValueError(f"unknown record kind {kind!r}; known: {', '.join(KINDS)}")
    return _schema_text(kind)


@cache
def _fast_registry() -> jsonschema_rs.Registry:
    return jsonschema_rs.Registry([(_BASE + f"{name}.json", _schema_text(name)) for name in ("common", *KINDS)])


@dataclass
class _Validators:
    """A schema's two validators: jsonschema-rs says quickly whether a record is valid (every record goes
    through it); jsonschema, loaded when a record is invalid, explains it (best_match picks the error).
    Then the invariants of the kind (astra_core.invariants), which no schema can express."""

    schema: dict
    fast: jsonschema_rs.Validator
    invariants: tuple[Invariant, ...] = ()
    _explain: Draft202012Validator | None = None

    @property
    def explain(self) -> Draft202012Validator:
        if self._explain is None:
            from jsonschema import Draft202012Validator

            self._explain = Draft202012Validator(self.schema, registry=_registry())
        return self._explain


def _build(schema_: dict, kind_invariants: tuple[Invariant, ...]) -> _Validators:
    return _Validators(schema_, jsonschema_rs.validator_for(schema_, registry=_fast_registry()), kind_invariants)


@cache
def _kind_validators(kind: str) -> _Validators:
    return _build(schema(kind), invariants.of(kind))


def _extended_kinds(schema_: dict) -> list[str]:
    """The kinds a stage's input schema requires a record to be (its `$ref`, or a `$ref` of its `allOf`, e.g. a
    qa_instance with typed extra fields): their invariants hold for it too."""
    parts = [schema_, *(part for part in schema_.get("allOf", ()) if isinstance(part, dict))]
    return [_KIND_OF_REF[part["$ref"]] for part in parts if part.get("$ref") in _KIND_OF_REF]


_schema_validators: dict[int, tuple[dict, _Validators]] = {}


def _validators(kind: str | dict) -> _Validators:
    """The validators of a record kind, or of a JSON schema (an input shape that is not a kind), built once."""
    if isinstance(kind, str):
        return _kind_validators(kind)
    held = _schema_validators.get(id(kind))
    if held is None or held[0] is not kind:
        extended = tuple(invariant for name in _extended_kinds(kind) for invariant in invariants.of(name))
        held = _schema_validators[id(kind)] = (kind, _build(kind, extended))
    return held[1]


def kind_name(kind: str | dict) -> str:
    """A kind's name, or a schema's title."""
    return kind if isinstance(kind, str) else kind.get("title", "record")


def field_path(path) -> str:
    """jsonschema's absolute_path as `messages[2].role`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(record)"


def _record_id(record: object) -> str | None:
    rid = record.get("id") if isinstance(record, dict) else None
    return rid if isinstance(rid, str) else None


def _broken_invariants(record: object, validators: _Validators) -> Iterator[RecordError]:
    """The kind's invariants `record` breaks (run only on a record its schema accepts)."""
    for invariant in validators.invariants:
        for field, message in invariant.check(record):  # type: ignore[arg-type]
            yield RecordError(message, record_id=_record_id(record), field=field)


def errors(record: object, kind: str | dict) -> list[RecordError]:
    """All contract violations of `record` as `kind` (empty when valid): the schema's, else the invariants'."""
    validators = _validators(kind)
    found = [RecordError(e.message, record_id=_record_id(record), field=field_path(e.absolute_path))
             for e in validators.explain.iter_errors(record)]
    return found or list(_broken_invariants(record, validators))


def is_valid(record: object, kind: str | dict) -> bool:
    """Whether `record` is a valid `kind`, quickly (no explanation)."""
    validators = _validators(kind)
    return validators.fast.is_valid(record) and next(_broken_invariants(record, validators), None) is None


def validate(record: object, kind: str | dict) -> dict:
    """Return `record` if it is a valid `kind` (a record kind or a JSON schema), else raise the most
    relevant RecordError."""
    validators = _validators(kind)
    if not validators.fast.is_valid(record):
        from jsonschema.exceptions import best_match

        error = best_match(validators.explain.iter_errors(record))
        if error is not None:  # else the two validators disagree: trust the reference implementation
            raise RecordError(error.message, record_id=_record_id(record), field=field_path(error.absolute_path))
    if validators.invariants:  # most kinds have none: no generator on their path
        for broken in _broken_invariants(record, validators):
            raise broken
    return record  # type: ignore[return-value]
