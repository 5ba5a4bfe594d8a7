"""Reading generation replies: numbered lines of requests, and chains from replies that should have
been JSON but are not (small models often write prose).

Task generation and rewrites ask for plain lines (their callers leave a reasoning model's <think> blocks out).
Chain synthesis asks for JSON once and, when the reply does not parse, takes the tool names each line of the reply
without its reasoning mentions; the chain notes `parse: "text"`.
Judgments (verification, intent checks) never fall back: an unparseable verdict rejects.
"""

from __future__ import annotations

import re

from astra_core.llm import LLMClient, StructuredOutputError
from astra_core.reasoning import without_reasoning

_BULLET = re.compile(r"^\s*(?:[-*•#]+|\d+[.)]|\(?[a-z]\))\s*")


def clean_line(line: str) -> str:
    return _BULLET.sub("", line).strip().strip('"').strip("'").strip()


def questions_from_text(text: str, min_words: int) -> list[str]:
    """Request-like lines of a prose reply: bullets and numbering removed, too-short lines dropped."""
    lines = [clean_line(line) for line in text.splitlines()]
    return [line for line in lines if len(line.split()) >= min_words and not line.endswith(":")]


def chains_from_text(text: str, tool_names: set[str]) -> list[list[str]]:
    """Per line, the known tool names it mentions in order of appearance (lines naming two or more)."""
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(tool_names, key=len, reverse=True)) + r")\b")
    chains = []
    for line in text.splitlines():
        names = pattern.findall(line)
        if len(names) >= 2:
            chains.append(names)
    return chains


async def json_or_text(llm: LLMClient, messages: list[dict], schema: dict, name: str,
                       **params) -> tuple[dict | None, str]:
    """(parsed JSON, "json") or (None, the reply text without its reasoning) when the one reply asked for does not
    parse."""
    try:
        value, _ = await llm.chat_json(messages, schema, name=name, attempts=1, **params)
        return value, "json"
    except StructuredOutputError as exc:
        return None, without_reasoning(exc.last_reply or "")
