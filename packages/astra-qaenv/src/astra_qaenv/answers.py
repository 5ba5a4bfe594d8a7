"""Does a text contain a sub-answer? Used to verify tool observations and final answers."""

from __future__ import annotations

import re
import unicodedata


def normalize_text(text: str) -> str:
    text = unicodedata.normalize("NFKC", str(text)).casefold()
    text = re.sub(r"(?<=\d)[,_](?=\d{3}(?!\d))", "", text)  # 709,000 -> 709000
    return " ".join(text.split())


def contains_answer(observation: str, answer: str) -> bool:
    """Does the observation contain the answer (normalized)? An empty answer never matches."""
    expected = normalize_text(answer).strip(" .\"'")
    if not expected:
        return False
    seen = normalize_text(observation)
    return expected in seen or expected in seen.replace('\\"', '"')
