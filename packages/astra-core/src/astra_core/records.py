"""Record conventions shared by every stage: ids, provenance and derived records.

Records are plain dicts (they round-trip through JSONL and keep fields a stage does not
know about). Every record has an `id` and a `meta` dict; stages append a provenance step
to `meta.provenance` and set `meta.parent_id` on records derived from an input.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
from datetime import UTC, datetime
from typing import Any

import orjson

KINDS = (
    "tool_server",
    "tool_graph",
    "tool_chain",
    "task",
    "trajectory",
    "qa_instance",
    "environment",
    "rl_sample",
    "rollout",
    "eval_result",
    "plan",
)


def stable_id(*parts: Any, prefix: str = "", length: int = 16) -> str:
    """A deterministic id from content: same parts, same id, on every machine and run."""
    blob = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    digest = hashlib.blake2b(blob, digest_size=16).hexdigest()[:length]
    return f"{prefix}{digest}" if prefix else digest


DISTRIBUTIONS = {"astra-core": "astra-agent-core"}  # commands whose distribution has another name


def _package_version(command: str) -> str | None:
    package = command.split()[0]
    package = DISTRIBUTIONS.get(package, package)
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def provenance_step(command: str, *, model: str | None = None, seed: int | None = None, **details: Any) -> dict:
    step = {
        "command": command,
        "version": _package_version(command),
        "model": model,
        "seed": seed,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    step.update(details)
    return step


def add_provenance(record: dict, command: str, *, model: str | None = None, seed: int | None = None, **details: Any) -> dict:
    """Append one provenance step to `record['meta']['provenance']` (in place) and return the record."""
    meta = record.setdefault("meta", {})
    meta.setdefault("provenance", []).append(provenance_step(command, model=model, seed=seed, **details))
    return record


def new_record(record_id: str, *, parent: dict | None = None, **fields: Any) -> dict:
    """A record derived from `parent` (or a root record): inherits provenance, points back to it."""
    meta: dict[str, Any] = {"provenance": []}
    if parent is not None:
        meta["provenance"] = copy.deepcopy(parent.get("meta", {}).get("provenance", []))
        meta["parent_id"] = parent["id"]
    return {"id": record_id, **fields, "meta": meta}
