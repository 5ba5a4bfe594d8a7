"""Answer matching: does a sub-task's answer appear in a text (a tool observation, a final answer)?

Both sides are normalized the same way, then split into tokens, and the answer matches when its
tokens occur as a *contiguous run* of the text's tokens. Matching whole tokens is what keeps short
answers honest: "1" is not found in "10", "1.5" or "2024-01-15", and "Oslo" is not found in
"Oslofjord".

Normalization, in order:

1. A text that is a JSON document is re-serialized without ASCII escapes ("Z\\u00fcrich" -> "Zürich").
2. Unicode NFKC, case folding, accents removed ("São" -> "sao"), the Unicode minus "−" -> "-".
3. Thousands separators removed between digit groups: "709,000", "709 000" (thin/no-break space),
   "709_000" and "709'000" all become "709000" (a separator counts only when exactly three digits
   follow, so "3,14" and "1, 2" are left alone).
4. Tokens are maximal runs of letters and digits; a "." between two digits stays inside the token
   (decimals, versions), and a "-" directly before a digit that does not follow a letter or digit
   is kept as a sign ("-3" is not "3"). Every other character (punctuation, symbols, "%", "$",
   "°") separates tokens. Chinese, Japanese and Korean characters are one token each (those
   scripts have no spaces between words).
5. Decimal tokens lose trailing zeros: "2.50" -> "2.5", "709000.0" -> "709000", "-0" -> "0".

An answer that normalizes to no token at all (e.g. "?!") never matches anything.
"""

from __future__ import annotations

import json
import re
import unicodedata

_SPACE_SEPARATOR = re.compile(r"(?<=\d)[\u00a0\u2009\u202f](?=\d{3}(?!\d))")  # before NFKC turns them into " "
_THOUSANDS_SEPARATOR = re.compile(r"(?<=\d)[,_'](?=\d{3}(?!\d))")
_TOKEN = re.compile(r"(?:(?<![^\W_])-(?=\d))?(?:[^\W_]|(?<=\d)\.(?=\d))+")
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_HAS_CJK = re.compile(f"[{_CJK}]")
_CJK_SPLIT = re.compile(f"[{_CJK}]|[^{_CJK}]+")
_DECIMAL = re.compile(r"-?\d+\.\d+")


def _unescape_json(text: str) -> str:
    stripped = text.strip()
    if not stripped or stripped[0] not in '{["':
        return text
    try:
        return json.dumps(json.loads(stripped), ensure_ascii=False)
    except (ValueError, RecursionError):
        return text


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold().replace("\u2212", "-")
    decomposed = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn")
    return unicodedata.normalize("NFKC", text)


def _canonical_number(token: str) -> str:
    if _DECIMAL.fullmatch(token):
        token = token.rstrip("0").rstrip(".")
    return "0" if token == "-0" else token


def tokens(text: object) -> list[str]:
    """The normalized tokens of `text` (any value; non-strings are JSON-serialized first)."""
    if text is None:
        return []
    if not isinstance(text, str):
        text = json.dumps(text, ensure_ascii=False)
    text = _SPACE_SEPARATOR.sub("", _unescape_json(text))
    text = _THOUSANDS_SEPARATOR.sub("", _fold(text))
    out: list[str] = []
    for token in _TOKEN.findall(text):
        parts = _CJK_SPLIT.findall(token) if _HAS_CJK.search(token) else [token]
        out.extend(_canonical_number(part) for part in parts)
    return out


def normalize_answer(text: object) -> str:
    """The normalized form of an answer: its tokens joined by single spaces."""
    return " ".join(tokens(text))


class Haystack:
    """A text normalized once, to look for many answers in it."""

    def __init__(self, text: object):
        self._padded = f" {normalize_answer(text)} "

    def contains(self, answer: object) -> bool:
        """True when the tokens of `answer` occur as a contiguous run in this text's tokens.

        `answer` may be a list of alternatives: any one of them matching is enough.
        """
        if isinstance(answer, (list, tuple)):
            return any(self.contains(alternative) for alternative in answer)
        needle = normalize_answer(answer)
        return bool(needle) and f" {needle} " in self._padded


def contains_answer(text: object, answer: object) -> bool:
    """True when the tokens of `answer` occur as a contiguous run in the tokens of `text` (see Haystack)."""
    return Haystack(text).contains(answer)
