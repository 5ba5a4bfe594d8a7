"""Asking a judge for JSON and reading its reply without ever inventing a score.

`ask` uses `LLMClient.chat_json` (the endpoint's json_schema output where supported, else prompt +
parse + retry with the error shown to the model). When no attempt yields a reply valid against
the schema, the last reply is still parsed leniently, so the parts that are valid can be kept (a
reply scoring two dimensions correctly and a third out of range keeps the two). What cannot be
read becomes `None` plus an error message — never a default score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from astra_core.llm import LLMClient, StructuredOutputError, extract_json

from astra_reward.judges.prompts import Judgment


@dataclass
class JudgeSettings:
    """How the judges talk to the model."""

    attempts: int = 2  # replies asked for per judgment before the salvage step (chat_json attempts)
    temperature: float | None = 0.0  # None: the client's / endpoint's default
    max_tokens: int | None = None  # None: the client's / endpoint's default
    max_chars: int = 2000  # longer message contents are cut in what the judge sees


@dataclass
class Reply:
    value: Any  # the parsed JSON value, or None when nothing could be parsed
    problem: str | None  # why the reply is not fully valid (None: valid against the schema)
    text: str | None  # the raw reply


class InvalidScore(ValueError):
    """A judge's value that is not a score on the expected scale."""


async def ask(client: LLMClient, judgment: Judgment, material: str, settings: JudgeSettings) -> Reply:
    """Put `judgment` to the model about `material`; the reply parsed as far as it can be."""
    messages = [{"role": "system", "content": judgment.system}, {"role": "user", "content": judgment.user(material)}]
    try:
        value, response = await client.chat_json(messages, judgment.schema, name=judgment.name,
                                                  attempts=settings.attempts,
                                                  temperature=settings.temperature, max_tokens=settings.max_tokens)
        return Reply(value, None, response.content)
    except StructuredOutputError as exc:
        try:
            value = extract_json(exc.last_reply)
        except ValueError as parse_error:
            return Reply(None, f"unparseable reply: {parse_error}", exc.last_reply)
        return Reply(value, f"reply does not match the schema: {exc}", exc.last_reply)


def score_on(value: Any, scale: tuple[float, ...]) -> float:
    """`value` as one of the scale's points; numbers and numeric strings accepted, nothing rounded."""
    if isinstance(value, bool) or value is None:
        raise InvalidScore(f"score {value!r} is not a number")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise InvalidScore(f"score {value!r} is not a number") from None
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidScore(f"score {value!r} is not a number")
    for point in scale:
        if math.isclose(value, point, abs_tol=1e-9):
            return float(point)
    raise InvalidScore(f"score {value!r} is not one of {', '.join(f'{p:g}' for p in scale)}")


def scored_field(reply: Reply, key: str, scale: tuple[float, ...]) -> tuple[float | None, str | None, str | None]:
    """(score, reason, error) of `reply.value[key]`: an object {score, reason} or a bare number."""
    if reply.value is None:
        return None, None, reply.problem
    container = reply.value
    if not isinstance(container, dict) or key not in container:
        return None, None, f"no {key!r} in the reply" + (f" ({reply.problem})" if reply.problem else "")
    entry = container[key]
    reason = None
    if isinstance(entry, dict):
        reason = entry.get("reason") if isinstance(entry.get("reason"), str) else None
        entry = entry.get("score")
    try:
        return score_on(entry, scale), reason, None
    except InvalidScore as exc:
        return None, reason, str(exc)


def single_score(reply: Reply, scale: tuple[float, ...]) -> tuple[float | None, str | None, str | None]:
    """(score, reason, error) of a reply shaped {"reason": ..., "score": ...}."""
    score, _, error = scored_field(reply, "score", scale)
    reason = reply.value.get("reason") if isinstance(reply.value, dict) else None
    return score, reason if isinstance(reason, str) else None, error


def item_scores(reply: Reply, list_key: str, id_key: str, wanted: list[str], scale: tuple[float, ...]
                ) -> tuple[dict[str, float], dict[str, str], dict[str, str]]:
    """Per-item scores from a reply {list_key: [{id_key, reason, score}, ...]}.

    Returns (scores, reasons, problems), each keyed by item id; `problems` also holds the key
    "reply" for a problem with the reply as a whole. Ids are compared as strings; the first entry
    for an id wins; entries for ids not asked about are ignored.
    """
    problems: dict[str, str] = {}
    if reply.problem:
        problems["reply"] = reply.problem
    entries = reply.value.get(list_key) if isinstance(reply.value, dict) else reply.value
    if not isinstance(entries, list):
        if reply.value is not None:
            problems["reply"] = f"no {list_key!r} list in the reply"
        return {}, {}, problems
    scores: dict[str, float] = {}
    reasons: dict[str, str] = {}
    for entry in entries:
        item = str(entry.get(id_key)) if isinstance(entry, dict) else None
        if item not in wanted or item in scores or item in problems:
            continue
        try:
            scores[item] = score_on(entry.get("score"), scale)
        except InvalidScore as exc:
            problems[item] = str(exc)
        if isinstance(entry.get("reason"), str):
            reasons[item] = entry["reason"]
    return scores, reasons, problems


def item_errors(wanted: list[str], scores: dict[str, float], problems: dict[str, str], label: str) -> list[str]:
    """Why some wanted items have no score (empty when every item has one)."""
    unscored = [item for item in wanted if item not in scores]
    errors = [f"{label} {item}: {problems[item]}" for item in unscored if item in problems]
    silent = [item for item in unscored if item not in problems]
    if silent:
        why = f" ({problems['reply']})" if "reply" in problems else ""
        errors.append(f"no score for {label} {', '.join(silent)}{why}")
    return errors
