"""Pull a JSON value out of model text: fenced blocks, leading prose, trailing chatter."""

from __future__ import annotations

import json
import re

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
    """The first JSON value found in `text`; raises ValueError naming what was seen."""
    if not text:
        raise ValueError("empty reply: no JSON found")
    for candidate in _candidates(text):
        if not isinstance(candidate, str):
            return candidate
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    raise ValueError(f"no JSON found in reply: {text[:200]!r}")
