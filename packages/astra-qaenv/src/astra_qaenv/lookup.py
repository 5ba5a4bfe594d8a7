"""Table-lookup tools: the generated implementations behind programmatic environments.

A lookup sub-environment is data, `{"kind": "lookup", "tool": <OpenAI spec>, "param", "field",
"rows": {subject name: value}}`, rendered to a standard-library Python function. Keeping it as
data makes merging exact: homogeneous lookups merge by taking the union of their rows.
"""

from __future__ import annotations

from astra_qaenv.kb import Field, lookup_key


def lookup_spec(f: Field) -> dict:
    """The OpenAI tool spec of a field's lookup tool."""
    noun = f.type.replace("_", " ")
    return {"type": "function", "function": {
        "name": f.tool,
        "description": f.description,
        "parameters": {"type": "object",
                       "properties": {f.param: {"type": "string", "description": f"Name of the {noun}"}},
                       "required": [f.param]},
    }}


def lookup_source(f: Field, rows: dict[str, object]) -> dict:
    return {"kind": "lookup", "tool": lookup_spec(f), "param": f.param, "field": f.name, "noun": f.type,
            "rows": dict(sorted(rows.items()))}


def render_lookup(source: dict, name: str | None = None) -> str:
    """Python source of one lookup function (standard library only, no module state)."""
    name = name or source["tool"]["function"]["name"]
    param, output_field = source["param"], source["field"]
    noun = source.get("noun", param).replace("_", " ")
    doc = source["tool"]["function"].get("description", "")
    table_lines = "".join(f"        {lookup_key(subject)!r}: ({subject!r}, {value!r}),\n"
                          for subject, value in source["rows"].items())
    return (
        f"def {name}({param}: str) -> dict:\n"
        f"    {doc!r}\n"
        f"    table = {{\n{table_lines}    }}\n"
        f"    if not isinstance({param}, str) or not {param}.strip():\n"
        f"        return {{'error': {f'argument {param!r} must be a non-empty string'!r}}}\n"
        f"    row = table.get(' '.join({param}.casefold().split()))\n"
        f"    if row is None:\n"
        f"        return {{'error': f'no {noun} named {{{param}!r}} in this database'}}\n"
        f"    return {{{param!r}: row[0], {output_field!r}: row[1]}}\n"
    )


class MergeConflict(ValueError):
    """Two lookup tables disagree on a subject's value."""


def merge_rows(base: dict, extra: dict) -> dict:
    """Union of two lookup sources' rows (same tool); a subject with two values cannot merge."""
    rows = dict(base["rows"])
    for subject, value in extra["rows"].items():
        if subject in rows and rows[subject] != value:
            raise MergeConflict(f"{subject!r} is {rows[subject]!r} in one table and {value!r} in the other")
        rows[subject] = value
    return {**base, "rows": dict(sorted(rows.items()))}
