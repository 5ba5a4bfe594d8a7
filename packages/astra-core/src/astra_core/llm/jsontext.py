"""Pull a JSON value out of model text: fenced blocks, leading prose, trailing chatter, reasoning."""

from __future__ import annotations

import json
import re

from astra_core.reasoning import without_reasoning

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def _candidates(text: str):
    for match in _FENCE.finditer(text):
        yield match.group(1).strip()
    yield text.strip()
    # The first balanced {...} or [...] anywhere in the text.
    decoder = json.JSONDecoder()
    for index, char in enumerate(text):
        if char in "{[":
            try:
                value, _ = decoder.raw_decode(text[index:])
            except json.JSONDecodeError:
                continue
            yield value
            return


def extract_json(text: str | None):
    """The first JSON value found in `text` once its reasoning is taken out (a draft inside <think> is not the
    reply); raises ValueError naming what was seen."""
    answer = without_reasoning(text or "")
    if not answer:
        raise ValueError("empty reply: no JSON found" if not (text or "").strip() else
                         f"the reply is all reasoning, no JSON after it: {text[:200]!r}")
    for candidate in _candidates(answer):
        if not isinstance(candidate, str):
            return candidate
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    raise ValueError(f"no JSON found in reply: {text[:200]!r}")
