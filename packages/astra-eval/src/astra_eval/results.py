"""Eval items (what to run) and eval_result records (what happened), with their stable ids.

An *item* is one benchmark task in one trial: `{"id": "bfcl/multi_turn_base/multi_turn_base_0/0",
"benchmark", "category", "item_id", "trial", "seed"}`. Its result is an `eval_result` (astra-core
kind) with the same id, so `--resume` skips items already in the output file.
"""

from __future__ import annotations

from typing import Any

from astra_core.records import new_record
from astra_core.stage import Malformed, Rejected

ITEM_FIELDS = {"id": str, "benchmark": str, "category": str, "item_id": str, "trial": int}


def item_id(benchmark: str, category: str, item: str, trial: int, setting: str | None = None) -> str:
    parts = [benchmark, category, item] + ([setting] if setting else []) + [str(trial)]
    return "/".join(parts)


def make_item(benchmark: str, category: str, item: str, trial: int, seed: int | None,
              setting: str | None = None, **extra: Any) -> dict:
    """One item record: a task to run once, with the sampling seed of that trial."""
    record = {"id": item_id(benchmark, category, item, trial, setting), "benchmark": benchmark,
              "category": category, "item_id": item, "trial": trial, "seed": seed, **extra}
    if setting is not None:
        record["setting"] = setting
    return record


def trial_seed(base: int | None, trial: int) -> int | None:
    """Trial t samples with seed base + t (None: leave sampling unseeded)."""
    return None if base is None else base + trial


def eval_result(item: dict, *, success: bool, score: float, messages: list[dict] | None = None,
                details: dict | None = None, error: str | None = None) -> dict:
    """The eval_result of one item (same id as the item, so resume can match them)."""
    fields: dict[str, Any] = {key: item[key] for key in ("benchmark", "category", "item_id", "trial")}
    for key in ("setting", "language"):
        if key in item:
            fields[key] = item[key]
    record = new_record(item["id"], **fields, success=bool(success), score=float(score),
                        messages=messages or [], details=details or {}, error=error)
    record["seed"] = item.get("seed")
    return record


def failure(item: dict, error: str, *, messages: list[dict] | None = None, details: dict | None = None) -> dict:
    """An item that could not finish (timeout, endpoint error): recorded, scored 0, never dropped."""
    return eval_result(item, success=False, score=0.0, messages=messages, details=details, error=error)


def check_item(item: dict) -> None:
    """An input item that cannot be run (a required field missing or of the wrong type) is malformed input: it
    stops the run naming file, line and field, or with --skip-bad goes to the rejects."""
    for name, kind in ITEM_FIELDS.items():
        value = item.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise Malformed(f"must be {kind.__name__}, got {value!r}", field=name)
    seed = item.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise Malformed(f"must be an integer or null, got {seed!r}", field="seed")


def unknown(item: dict, what: str) -> Rejected:
    """The rejection of an item naming a task or category the benchmark does not have."""
    return Rejected(f"malformed item: {item['benchmark']} has no {what} "
                    f"{item['item_id'] if what == 'task' else item['category']!r} (item {item['id']})")
