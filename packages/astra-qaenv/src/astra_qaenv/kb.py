"""Structured knowledge for programmatic synthesis: JSONL tables of entities and relations.

A knowledge base is a directory (or three files) of JSON Lines:

- `entities.jsonl`: `{"id", "type", "name", "domain", "attributes": {field: value}}`
- `relations.jsonl`: `{"subject": entity id, "relation": field, "object": entity id}` (one object per
  subject and relation: a lookup tool must return one answer)
- `schema.jsonl` (optional): how a field reads and what its tool is called,
  `{"type", "field", "phrase": "the population of {name}", "description", "tool"?, "param"?,
  "question"?: "Who is the mayor of {name}?", "compare"?: "Which has the larger population: {a} or {b}?",
  "lower_wins"?: bool}`.
  Fields without a row get a phrase and tool name derived from their names.

Every row is checked as the files load (`ENTITY_ROW`, `RELATION_ROW`, `SCHEMA_ROW`): a wrong type, an
unknown entity or a template with other placeholders is a KBError naming the file, line and field.

Every attribute and relation of an entity type is a *field*; each field becomes one lookup tool
`get_<type>_<field>(<type>)` whose data is the field's table.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from astra_core.jsonl import MalformedLine, iter_raw_lines, parse_line


class KBError(ValueError):
    """The tables break the knowledge-base format."""


@dataclass(frozen=True)
class Field:
    """One attribute or relation of an entity type, with how it reads and its lookup tool."""

    type: str
    name: str
    domain: str
    phrase: str  # with {name}
    description: str
    tool: str
    param: str
    target_type: str | None = None  # set for relations: the type of the entity it leads to
    compare: str | None = None  # with {a} and {b}; only for numeric attributes
    lower_wins: bool = False
    question_template: str | None = None  # with {name}; default "What is <phrase>?"

    @property
    def is_relation(self) -> bool:
        return self.target_type is not None

    def question(self, name: str) -> str:
        if self.question_template:
            return self.question_template.format(name=name)
        return f"What is {self.phrase.format(name=name)}?"


@dataclass
class KnowledgeBase:
    entities: dict[str, dict]
    relations: dict[tuple[str, str], str]  # (subject id, relation) -> object id
    fields: dict[str, dict[str, Field]] = field(default_factory=dict)  # type -> field name -> Field

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.entities.values() if e["type"] == kind]

    def value(self, entity: dict, f: Field):
        """The field's value for an entity: an entity dict for relations, a literal for attributes."""
        if f.is_relation:
            target = self.relations.get((entity["id"], f.name))
            return self.entities[target] if target else None
        return entity["attributes"].get(f.name)

    def table(self, f: Field) -> dict[str, object]:
        """The field's whole lookup table: subject name -> value (an entity's name for relations)."""
        rows = {}
        for entity in self.of_type(f.type):
            value = self.value(entity, f)
            if value is not None:
                rows[entity["name"]] = value["name"] if f.is_relation else value
        return rows


def lookup_key(name: str) -> str:
    """How lookup tools match a name: case- and whitespace-insensitive."""
    return " ".join(str(name).casefold().split())


def _default_field(kind: str, name: str, domain: str, target_type: str | None) -> Field:
    words = name.replace("_", " ")
    return Field(type=kind, name=name, domain=domain, phrase=f"the {words} of {{name}}",
                 description=f"Look up the {words} of a {kind.replace('_', ' ')}.",
                 tool=f"get_{_ident(kind)}_{_ident(name)}", param=_ident(kind), target_type=target_type)


def _ident(text: str) -> str:
    return re.sub(r"\W+", "_", text.strip().lower()).strip("_") or "value"


# What each KB file's rows must be (checked as they load: an error names the file, its line and the field).
IDENTIFIER = "^[A-Za-z_][A-Za-z0-9_]*$"  # a tool and its parameter become a Python function's names
_TEXT = {"type": "string", "minLength": 1}

ENTITY_ROW = {
    "title": "knowledge-base entity",
    "type": "object",
    "required": ["id", "type", "name"],
    "properties": {"id": _TEXT, "type": _TEXT, "name": _TEXT, "domain": _TEXT,
                   "attributes": {"type": "object",
                                  "additionalProperties": {"type": ["string", "number", "boolean", "null", "array"]}}},
}

RELATION_ROW = {
    "title": "knowledge-base relation",
    "type": "object",
    "required": ["subject", "relation", "object"],
    "properties": {"subject": _TEXT, "relation": _TEXT, "object": _TEXT},
}

SCHEMA_ROW = {
    "title": "knowledge-base schema row",
    "type": "object",
    "required": ["type", "field"],
    "properties": {"type": _TEXT, "field": _TEXT, "phrase": _TEXT, "description": {"type": "string"},
                   "tool": {"type": "string", "pattern": IDENTIFIER}, "param": {"type": "string", "pattern": IDENTIFIER},
                   "question": _TEXT, "compare": _TEXT, "lower_wins": {"type": "boolean"}},
}

# The placeholders each template of a schema row may use.
_TEMPLATES = {"phrase": ("name",), "question": ("name",), "compare": ("a", "b")}


def _rows(path: Path, shape: dict) -> Iterator[tuple[str, dict]]:
    """("file:line", row) of a KB file, each row checked against `shape`; KBError names file, line and field."""
    for source, lineno, raw in iter_raw_lines([str(path)]):
        try:
            yield f"{source}:{lineno}", parse_line(source, lineno, raw, shape).record
        except MalformedLine as exc:
            raise KBError(str(exc)) from None


def _check_templates(where: str, row: dict) -> None:
    for key, names in _TEMPLATES.items():
        if key not in row:
            continue
        try:
            row[key].format(**{name: "x" for name in names})
        except (KeyError, IndexError, ValueError) as exc:
            allowed = " and ".join("{" + name + "}" for name in names)
            raise KBError(f"{where}: field {key}: {row[key]!r} is not a template with {allowed} "
                          f"({type(exc).__name__}: {exc})") from None


def load_kb(path: str | Path | None = None) -> KnowledgeBase:
    """Load a knowledge base directory (default: the bundled sample) and check its consistency."""
    root = Path(path) if path else Path(str(files("astra_qaenv") / "data" / "kb"))
    if not (root / "entities.jsonl").exists() or not (root / "relations.jsonl").exists():
        raise KBError(f"{root}: a knowledge base needs entities.jsonl and relations.jsonl")
    entities: dict[str, dict] = {}
    seen: dict[str, str] = {}  # entity id -> file:line
    names: dict[tuple[str, str], str] = {}
    for where, row in _rows(root / "entities.jsonl", ENTITY_ROW):
        if row["id"] in entities:
            raise KBError(f"{where}: field id: duplicate entity id {row['id']!r} (first at {seen[row['id']]})")
        key = (row["type"], lookup_key(row["name"]))
        if key in names:
            raise KBError(f"{where}: field name: two {row['type']} entities are both named {row['name']!r} "
                          f"({names[key]}, {row['id']}): lookup tools find entities by name")
        names[key] = row["id"]
        seen[row["id"]] = where
        row.setdefault("domain", "general")
        row.setdefault("attributes", {})
        entities[row["id"]] = row
    relations: dict[tuple[str, str], str] = {}
    targets: dict[tuple[str, str], str] = {}
    for where, row in _rows(root / "relations.jsonl", RELATION_ROW):
        subject, relation, obj = row["subject"], row["relation"], row["object"]
        for end, name in ((subject, "subject"), (obj, "object")):
            if end not in entities:
                raise KBError(f"{where}: field {name}: relation {subject} -{relation}-> {obj}: unknown entity {end!r}")
        if (subject, relation) in relations:
            raise KBError(f"{where}: field relation: {subject} has two {relation!r} objects; "
                          "lookup tools need one answer per subject")
        kind = (entities[subject]["type"], relation)
        if targets.setdefault(kind, entities[obj]["type"]) != entities[obj]["type"]:
            raise KBError(f"{where}: field object: relation {relation!r} of {kind[0]} leads to both {targets[kind]} "
                          f"and {entities[obj]['type']} entities")
        relations[(subject, relation)] = obj
    kb = KnowledgeBase(entities, relations)
    kb.fields = _fields(kb, targets, _schema_rows(root / "schema.jsonl"))
    return kb


def _schema_rows(path: Path) -> dict[tuple[str, str], dict]:
    if not path.exists():
        return {}
    rows = {}
    for where, row in _rows(path, SCHEMA_ROW):
        _check_templates(where, row)
        rows[(row["type"], row["field"])] = row
    return rows


def _fields(kb: KnowledgeBase, targets: dict[tuple[str, str], str], schema: dict) -> dict[str, dict[str, Field]]:
    names: dict[str, dict[str, str | None]] = {}
    domains: dict[str, str] = {}
    for entity in kb.entities.values():
        domains.setdefault(entity["type"], entity["domain"])
        kind_fields = names.setdefault(entity["type"], {})
        for attribute in entity["attributes"]:
            kind_fields.setdefault(attribute, None)
    for (kind, relation), target in targets.items():
        names.setdefault(kind, {})[relation] = target
    out: dict[str, dict[str, Field]] = {}
    for kind, kind_fields in names.items():
        for name, target in kind_fields.items():
            base = _default_field(kind, name, domains[kind], target)
            row = schema.get((kind, name), {})
            out.setdefault(kind, {})[name] = Field(
                type=kind, name=name, domain=domains[kind], phrase=row.get("phrase", base.phrase),
                description=row.get("description", base.description), tool=row.get("tool", base.tool),
                param=row.get("param", base.param), target_type=target,
                compare=row.get("compare") if target is None else None, lower_wins=bool(row.get("lower_wins")),
                question_template=row.get("question"))
    return out
