"""Helpers of astra-qaenv's tests: JSONL files and recorded LLM replies routed by step."""

import json
from pathlib import Path


def read(path):
    path = Path(path)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def write(path, records):
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def schema_name(body):
    """Which LLM step a recorded request is (the JSON-schema name the client sent)."""
    return ((body.get("response_format") or {}).get("json_schema") or {}).get("name")


def router(**by_step):
    """A recorded-reply function: answers each step with the next of its replies (the last one repeats)."""
    served = {}

    def reply(body):
        name = schema_name(body)
        replies = by_step[name]
        n = served.get(name, 0)
        served[name] = n + 1
        value = replies[min(n, len(replies) - 1)]
        value = value(body) if callable(value) else value
        return value if isinstance(value, str) else json.dumps(value)

    return reply
