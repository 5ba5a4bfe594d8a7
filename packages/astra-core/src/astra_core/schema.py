"""JSON Schemas of the record kinds, and validation with errors that name record and field."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

import jsonschema_rs

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from referencing import Registry

from astra_core.records import KINDS

_BASE = "https://astra-toolkit.dev/schemas/"


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
    through it); jsonschema, loaded when a record is invalid, explains it (best_match picks the error)."""

    schema: dict
    fast: jsonschema_rs.Validator
    _explain: Draft202012Validator | None = None

    @property
    def explain(self) -> Draft202012Validator:
        if self._explain is None:
            from jsonschema import Draft202012Validator

            self._explain = Draft202012Validator(self.schema, registry=_registry())
        return self._explain


def _build(schema_: dict) -> _Validators:
    return _Validators(schema_, jsonschema_rs.validator_for(schema_, registry=_fast_registry()))


@cache
def _kind_validators(kind: str) -> _Validators:
    return _build(schema(kind))


_schema_validators: dict[int, tuple[dict, _Validators]] = {}


def _validators(kind: str | dict) -> _Validators:
    """The validators of a record kind, or of a JSON schema (an input shape that is not a kind), built once."""
    if isinstance(kind, str):
        return _kind_validators(kind)
    held = _schema_validators.get(id(kind))
    if held is None or held[0] is not kind:
        held = _schema_validators[id(kind)] = (kind, _build(kind))
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


def errors(record: object, kind: str | dict) -> list[RecordError]:
    """All contract violations of `record` as `kind` (empty when valid)."""
    rid = record.get("id") if isinstance(record, dict) else None
    return [RecordError(e.message, record_id=rid if isinstance(rid, str) else None, field=field_path(e.absolute_path))
            for e in _validators(kind).explain.iter_errors(record)]


def is_valid(record: object, kind: str | dict) -> bool:
    """Whether `record` is a valid `kind`, quickly (no explanation)."""
    return _validators(kind).fast.is_valid(record)


def validate(record: object, kind: str | dict) -> dict:
    """Return `record` if it is a valid `kind` (a record kind or a JSON schema), else raise the most
    relevant RecordError."""
    validators = _validators(kind)
    if validators.fast.is_valid(record):
        return record  # type: ignore[return-value]
    from jsonschema.exceptions import best_match

    error = best_match(validators.explain.iter_errors(record))
    if error is None:  # the two validators disagree: trust the reference implementation
        return record  # type: ignore[return-value]
    rid = record.get("id") if isinstance(record, dict) else None
    raise RecordError(error.message, record_id=rid if isinstance(rid, str) else None, field=field_path(error.absolute_path))
