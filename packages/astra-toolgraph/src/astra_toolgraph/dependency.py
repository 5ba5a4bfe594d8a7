"""LLM-free data dependencies between tools: which output field of one tool can feed which required
parameter of another, by name, type and description.

Outputs come from the tool's `output_schema` (MCP outputSchema, BFCL `response`, OpenAPI 2xx body)
when it has one; otherwise they are inferred from the tool's name and description ("list_tables"
yields tables, "Create an order and return its order_id" yields order_id). Used for the schema
edges of the transition graph and for the dependency check of `verify-chains`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from astra_toolgraph.filtering import words

# Tokens that say what kind of value a field is, not which thing it is about.
GENERIC = {"name", "names", "value", "data", "info", "type", "string", "list", "number", "count", "text",
           "result", "results", "item", "items", "object", "field", "param", "input", "output", "the", "a", "an",
           "of", "to", "for", "in", "on", "and", "or", "with", "by", "is", "be", "this", "that", "from", "it"}
IDENTIFIER = {"id", "ids", "uuid", "guid", "token", "handle", "cursor", "hash", "sha", "ref", "key", "session"}
# A tool named "<verb>_<thing>" with one of these verbs hands back <thing>s (when no output schema says more).
PRODUCERS = {"get", "list", "search", "find", "fetch", "read", "query", "create", "add", "make", "new", "generate",
             "lookup", "retrieve", "describe", "show", "open", "load", "start", "register", "insert", "book",
             "upload", "init", "initialize"}
VERBS = {"get", "list", "search", "find", "fetch", "read", "query", "create", "add", "make", "new", "generate",
         "lookup", "retrieve", "describe", "show", "open", "load", "start", "register", "insert", "book", "upload",
         "return", "returns", "all", "current", "by", "info", "details"}
STOP = GENERIC | {"you", "can", "will", "use", "used", "given", "specified", "specific", "provided", "such", "as",
                  "at", "its", "their", "if", "when", "which", "are", "was", "has", "have", "not", "all", "any"}
COMPATIBLE = {("integer", "number"), ("number", "integer")}
MATCH_THRESHOLD = 0.5


def singular(token: str) -> str:
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def tokens(text: str) -> set[str]:
    return {singular(w) for w in words(text)}


@dataclass(frozen=True)
class Field:
    """A value a tool produces or needs."""

    name: str
    type: str | None
    description: str
    path: str  # where it sits: "rows[].id", or "inferred" for outputs guessed from the name


def _schema_type(schema: dict) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return kind


def _schema_fields(schema: dict, prefix: str, depth: int) -> list[Field]:
    fields: list[Field] = []
    for name, sub in (schema.get("properties") or {}).items():
        if not isinstance(sub, dict):
            continue
        path = f"{prefix}{name}"
        kind = _schema_type(sub)
        if kind == "array" and isinstance(sub.get("items"), dict):
            items = sub["items"]
            fields.append(Field(name, _schema_type(items) or "array", sub.get("description", ""), path + "[]"))
            if depth < 3:
                fields += _schema_fields(items, path + "[].", depth + 1)
        else:
            fields.append(Field(name, kind, sub.get("description", ""), path))
            if kind == "object" and depth < 3:
                fields += _schema_fields(sub, path + ".", depth + 1)
    return fields


def output_fields(tool: dict) -> list[Field]:
    schema = tool.get("output_schema")
    if isinstance(schema, dict) and schema.get("properties"):
        return _schema_fields(schema, "", 0)
    function = tool["function"]
    description = function.get("description", "")
    name_words = words(function["name"])
    inferred = []
    if name_words and name_words[0] in PRODUCERS:
        inferred = [Field(t, None, description, "inferred") for t in sorted(tokens(function["name"]) - VERBS - GENERIC)]
    # "... returns the order_id ..." / "return its session token": identifiers named in the description.
    for match in re.finditer(r"\b([a-z][a-z0-9]*_(?:id|ids|uuid|token|key|handle|cursor))\b", description):
        inferred.append(Field(match.group(1), "string", description, "inferred"))
    return inferred


def required_inputs(tool: dict) -> list[Field]:
    schema = tool["function"].get("parameters") or {}
    properties = schema.get("properties") or {}
    return [Field(name, _schema_type(properties.get(name) or {}), (properties.get(name) or {}).get("description", ""),
                  name) for name in schema.get("required") or [] if name in properties]


def _name_score(field: Field, param: Field, producer: str) -> float:
    field_tokens, param_tokens = tokens(field.name), tokens(param.name)
    if field_tokens == param_tokens:
        return 1.0
    field_core, param_core = field_tokens - GENERIC, param_tokens - GENERIC
    # "id" produced by a tool about users feeds "user_id".
    if field_core <= IDENTIFIER and param_core & IDENTIFIER and (param_core - IDENTIFIER) <= tokens(producer):
        return 0.8 if param_core - IDENTIFIER else 0.6
    if not field_core or not param_core:
        return 0.0
    if param_core <= field_core or field_core <= param_core:
        return 0.8
    return len(field_core & param_core) / len(field_core | param_core)


def _description_score(field: Field, param: Field) -> float:
    a, b = tokens(field.description) - STOP, tokens(param.description) - STOP
    return len(a & b) / len(a | b) if a and b else 0.0


def match_score(field: Field, param: Field, producer: str = "") -> float:
    """How well `field` (an output of tool `producer`) can supply `param`, in [0, 1]."""
    if field.type and param.type and field.type != param.type and (field.type, param.type) not in COMPATIBLE:
        return 0.0
    return 0.8 * _name_score(field, param, producer) + 0.2 * _description_score(field, param)


def feeds(producer: dict, consumer: dict, threshold: float = MATCH_THRESHOLD) -> list[dict]:
    """Evidence that `producer`'s outputs supply `consumer`'s required parameters (empty: no dependency)."""
    evidence = []
    producer_name = producer["function"]["name"]
    for param in required_inputs(consumer):
        best = max(((match_score(f, param, producer_name), f) for f in output_fields(producer)),
                   key=lambda pair: pair[0], default=(0.0, None))
        if best[1] is not None and best[0] >= threshold:
            evidence.append({"field": best[1].path if best[1].path != "inferred" else best[1].name,
                             "param": param.name, "score": round(best[0], 3)})
    return evidence


def is_identifier(param: Field) -> bool:
    """An opaque value a user cannot know (an id, token, cursor): it has to come from an earlier call."""
    return bool(tokens(param.name) & IDENTIFIER) or bool(re.search(
        r"\b(returned by|obtained from|from a previous|from the previous|as returned)\b", param.description.lower()))
