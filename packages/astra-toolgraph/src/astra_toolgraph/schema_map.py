"""Map tool argument schemas from any source onto OpenAI function `parameters`.

OpenAI tools take one JSON Schema object of named arguments. Sources differ: BFCL writes
`"type": "dict"` and `"float"`, OpenAPI spreads arguments over path/query parameters and a
request body with `$ref`s into `components`, MCP servers send JSON Schema as is. A schema we
cannot map *reliably* raises `Unmappable` with the reason (paper §2.1.1: such tools are dropped).
"""

from __future__ import annotations

import copy
import re
from typing import Any

JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
# Type names other sources use for the JSON Schema types (BFCL: dict/float/tuple/any; Python names).
TYPE_ALIASES = {"dict": "object", "float": "number", "double": "number", "int": "integer", "long": "integer",
                "bool": "boolean", "str": "string", "list": "array", "tuple": "array", "none": "null"}
UNTYPED = {"any"}
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
MAX_REF_DEPTH = 16


class Unmappable(ValueError):
    """A tool whose schema cannot be mapped to the OpenAI format (the message says why)."""


def tool_name(raw: object) -> str:
    """An OpenAI-valid function name: invalid characters become '_'; empty names are unmappable."""
    if not isinstance(raw, str) or not raw.strip():
        raise Unmappable(f"tool name {raw!r} is empty or not a string")
    name = re.sub(r"[^A-Za-z0-9_.\-]", "_", raw.strip())[:128]
    if not TOOL_NAME.match(name) or not name.strip("_"):
        raise Unmappable(f"tool name {raw!r} has no usable characters")
    return name


def _resolve_ref(ref: str, root: dict, seen: tuple[str, ...]) -> Any:
    if not ref.startswith("#/"):
        raise Unmappable(f"external $ref {ref!r} cannot be resolved offline")
    if ref in seen:
        raise Unmappable(f"recursive $ref {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise Unmappable(f"$ref {ref!r} points nowhere")
        node = node[part]
    return node


def _normalize(schema: Any, root: dict, path: str, seen: tuple[str, ...]) -> Any:
    """A copy of `schema` with local $refs inlined and type aliases replaced."""
    if isinstance(schema, list):
        return [_normalize(item, root, path, seen) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if len(seen) > MAX_REF_DEPTH:
        raise Unmappable(f"$ref nesting deeper than {MAX_REF_DEPTH} at {path}")
    if "$ref" in schema and isinstance(schema["$ref"], str):
        target = _resolve_ref(schema["$ref"], root, seen)
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _normalize(merged, root, path, (*seen, schema["$ref"]))
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            out[key] = _normalize_type(value, path)
            if out[key] is None:
                del out[key]
        elif key in ("properties", "patternProperties", "$defs", "definitions"):
            if not isinstance(value, dict):
                raise Unmappable(f"{path}.{key} is not an object")
            out[key] = {name: _normalize(sub, root, f"{path}.{name}", seen) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not", "anyOf", "oneOf", "allOf", "prefixItems",
                     "contains", "if", "then", "else"):
            out[key] = _normalize(value, root, f"{path}[]", seen)
        else:
            out[key] = copy.deepcopy(value)
    _lift_required_flags(out, path)
    return out


def _normalize_type(value: Any, path: str) -> Any:
    names = value if isinstance(value, list) else [value]
    mapped = []
    for name in names:
        if not isinstance(name, str):
            raise Unmappable(f"type at {path} is {name!r}, not a type name")
        lowered = name.strip().lower()
        if lowered in UNTYPED:
            return None
        lowered = TYPE_ALIASES.get(lowered, lowered)
        if lowered not in JSON_TYPES:
            raise Unmappable(f"unknown type {name!r} at {path}")
        mapped.append(lowered)
    return mapped if isinstance(value, list) else mapped[0]


def _lift_required_flags(schema: dict, path: str) -> None:
    """Draft-3 style `"required": true` inside a property becomes the parent's `required` list."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    flagged = [name for name, sub in properties.items() if isinstance(sub, dict) and sub.get("required") is True]
    for name in properties:
        sub = properties[name]
        if isinstance(sub, dict) and isinstance(sub.get("required"), bool):
            del sub["required"]
    if flagged:
        existing = schema.get("required") if isinstance(schema.get("required"), list) else []
        schema["required"] = existing + [n for n in flagged if n not in existing]


def to_parameters(schema: Any, *, root: dict | None = None) -> dict:
    """OpenAI `parameters` for a tool's argument schema; `root` resolves `#/...` refs (OpenAPI, $defs)."""
    if schema is None:
        return {"type": "object", "properties": {}}
    if not isinstance(schema, dict):
        raise Unmappable(f"argument schema is a {type(schema).__name__}, not a JSON Schema object")
    mapped = _normalize(schema, root if root is not None else schema, "parameters", ())
    kind = mapped.get("type")
    if kind is None and ("properties" in mapped or not mapped):
        mapped["type"] = kind = "object"
    if kind != "object":
        raise Unmappable(f"top-level type is {kind!r}: OpenAI tools take an object of named arguments")
    properties = mapped.setdefault("properties", {})
    if not isinstance(properties, dict):
        raise Unmappable("parameters.properties is not an object")
    required = mapped.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise Unmappable(f"parameters.required must be a list of names, got {required!r}")
    dangling = [r for r in required if r not in properties]
    if dangling:
        raise Unmappable(f"required argument(s) {', '.join(dangling)} not described in properties")
    problem = _schema_problem(mapped)
    if problem:
        raise Unmappable(f"not a valid JSON Schema: {problem}")
    return mapped


def _schema_problem(schema: dict) -> str | None:
    """Why `schema` is not a valid JSON Schema (draft 2020-12), or None. jsonschema is imported here, not at
    module import: it costs a command's start-up a third of a second."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return exc.message
    return None


def output_schema(schema: Any, *, root: dict | None = None) -> dict | None:
    """A tool's output schema (MCP outputSchema, BFCL `response`, OpenAPI 2xx body), or None if unusable."""
    if not isinstance(schema, dict) or not schema:
        return None
    try:
        mapped = _normalize(schema, root if root is not None else schema, "output", ())
        if mapped.get("type") is None and "properties" in mapped:
            mapped["type"] = "object"
    except Unmappable:
        return None
    return None if _schema_problem(mapped) else mapped


def openai_tool(name: Any, description: Any, parameters: Any, *, output: Any = None, root: dict | None = None,
                **extra: Any) -> dict:
    """One tool in our OpenAI form (with optional `output_schema`), or Unmappable."""
    tool: dict[str, Any] = {"type": "function", "function": {
        "name": tool_name(name),
        "description": description.strip() if isinstance(description, str) else "",
        "parameters": to_parameters(parameters, root=root),
    }}
    mapped_output = output_schema(output, root=root)
    if mapped_output is not None:
        tool["output_schema"] = mapped_output
    tool.update({k: v for k, v in extra.items() if v is not None})
    return tool
