"""The report page: one self-contained HTML file (inline CSS and JS, the entries embedded as JSON)."""

from __future__ import annotations

import html
from importlib.resources import files

import orjson

# Inside <script type="application/json"> the browser ends the element at the first "</script" whatever the
# JSON means, so the characters that could spell a tag are written as JSON escapes (same value once parsed).
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def embed_json(data: object) -> str:
    text = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS).decode()
    return text.translate(str.maketrans(_JSON_ESCAPES))


def _static(name: str) -> str:
    return (files("astra_core.view") / "static" / name).read_text(encoding="utf-8")


def page(data: dict, title: str) -> str:
    """The HTML page around `data`: {"mode": "embedded", "entries": [...]} or {"mode": "serve", "total": N}."""
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_static('report.css')}</style>",
        "</head><body>",
        f'<header><h1>{html.escape(title)}</h1><span id="status"></span></header>',
        '<main><section id="index"></section><section id="detail" hidden></section></main>',
        f'<script type="application/json" id="astra-data">{embed_json(data)}</script>',
        f"<script>{_static('report.js')}</script>",
        "</body></html>",
    ]) + "\n"


def render(entries: list[dict], title: str = "ASTRA records") -> str:
    """A report with every entry (record included) embedded."""
    return page({"mode": "embedded", "entries": entries}, title)
