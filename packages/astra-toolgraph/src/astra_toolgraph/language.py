"""The language category of a request, for augmentation's language-consistency check.

Script first (Han -> zh, kana -> ja, Hangul -> ko, Cyrillic -> ru, Arabic -> ar), then, for Latin
script, common function words of en/fr/de/es/it/pt (English when nothing else wins). Enough to
tell an augmentation that switched language from one that did not; not a general identifier.
"""

from __future__ import annotations

import re

SCRIPTS = (("ja", re.compile(r"[\u3040-\u30ff]")), ("ko", re.compile(r"[\uac00-\ud7af]")),
           ("zh", re.compile(r"[\u4e00-\u9fff]")), ("ru", re.compile(r"[\u0400-\u04ff]")),
           ("ar", re.compile(r"[\u0600-\u06ff]")))
FUNCTION_WORDS = {
    "en": "the and is are of to in for with what how my please can you which from this that".split(),
    "fr": "le la les des est et pour avec dans une un que qui mon ma mes pouvez vous quel quelle".split(),
    "de": "der die das und ist mit für ein eine ich mein meine bitte können sie welche wie nicht".split(),
    "es": "el la los las es y para con en una un que mi mis por favor puedes cuál cómo del".split(),
    "it": "il lo la gli le è e per con una un che mio mia per favore puoi quale come del della".split(),
    "pt": "o a os as é e para com em uma um que meu minha por favor pode qual como do da".split(),
}


def detect_language(text: str) -> str:
    letters = [ch for ch in text if ch.isalpha()]
    if not letters:
        return "und"
    for code, pattern in SCRIPTS:
        if len(pattern.findall(text)) >= max(2, len(letters) // 5):
            return code
    tokens = re.findall(r"[a-zà-ÿ]+", text.lower())
    scores = {code: sum(token in words for token in tokens) for code, words in FUNCTION_WORDS.items()}
    best = max(scores, key=lambda code: (scores[code], code == "en"))
    return best if scores[best] > 0 else "en"
