"""What a record is (its kind) and the few facts the report's index shows about it."""

from __future__ import annotations

from astra_core.records import KINDS
from astra_core.schema import errors, is_valid, schema

# Fields every kind requires: they say nothing about which kind a record is.
_SHARED = {"id", "meta"}
# A record missing required fields is still shown as the kind it most resembles, if it has at least
# this share of that kind's own required fields.
_GUESS_THRESHOLD = 0.5
_TITLE_LENGTH = 160


def _own_required(kind: str) -> set[str]:
    return set(schema(kind)["required"]) - _SHARED


def detect(record: object) -> tuple[str, list[str]]:
    """(kind, schema problems) of a parsed line: its `kind` field, else the schema it fits (the most specific
    when several fit), else the kind it most resembles with what breaks that kind's schema, else "unknown"."""
    if not isinstance(record, dict):
        return "unknown", [f"not a JSON object: {type(record).__name__}"]
    declared = record.get("kind")
    if isinstance(declared, str) and declared in KINDS:
        return declared, _problems(record, declared)
    fitting = [kind for kind in KINDS if is_valid(record, kind)]
    if fitting:
        return max(fitting, key=lambda kind: len(_own_required(kind))), []
    guess = _resemblance(record)
    return (guess, _problems(record, guess)) if guess else ("unknown", [])


def _resemblance(record: dict) -> str | None:
    def share(kind: str) -> tuple[float, int]:
        own = _own_required(kind)
        present = len(own & record.keys())
        return present / len(own), present

    best = max(KINDS, key=share)
    return best if share(best)[0] >= _GUESS_THRESHOLD else None


def _problems(record: dict, kind: str) -> list[str]:
    return [f"{problem.field}: {problem.message}" for problem in errors(record, kind)]


def _number(value: object) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def reward(record: dict) -> float | None:
    """The record's headline number: a rollout's reward, a judged overall/QS score, an eval item's score."""
    scores = record.get("scores") if isinstance(record.get("scores"), dict) else {}
    for value in (record.get("reward"), scores.get("overall"), scores.get("QS"), record.get("score")):
        if _number(value) is not None:
            return value
    return None


def verdict(record: dict) -> str | None:
    """A verification verdict (PASS/FAIL/SUCCESS...), a chain check (ok/not ok), or an eval item's success."""
    verification = record.get("verification")
    if isinstance(verification, dict):
        if isinstance(verification.get("verdict"), str):
            return verification["verdict"]
        if isinstance(verification.get("ok"), bool):
            return "ok" if verification["ok"] else "not ok"
    if isinstance(record.get("success"), bool):
        return "success" if record["success"] else "failure"
    return None


def title(record: dict) -> str:
    """A short line saying what the record is about."""
    for key in ("question", "main_question", "focus", "description", "name", "instance_id", "item_id"):
        if isinstance(record.get(key), str) and record[key]:
            return record[key][:_TITLE_LENGTH]
    if isinstance(record.get("tools"), list) and all(isinstance(tool, str) for tool in record["tools"]):
        return " → ".join(record["tools"])[:_TITLE_LENGTH]
    messages = record.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"][:_TITLE_LENGTH]
    return ""
