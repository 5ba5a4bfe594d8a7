"""Quality filters for tool servers (paper §2.1.1): keep servers that support multi-step work.

Per tool: a missing or vague description, a schema that cannot be mapped to the OpenAI format,
or a duplicate name drops the tool (the server keeps a note in `meta.filter.dropped`). Per
server: fewer than `min_tools` usable tools rejects the server, with every reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from astra_core.config import knob
from astra_core.stage import Rejected

from astra_toolgraph.schema_map import Unmappable, to_parameters

PLACEHOLDERS = {"", "todo", "tbd", "n/a", "na", "none", "null", "description", "no description",
                "no description available", "test", "placeholder", "tool", "function", "api", "...", "-", "desc"}


@dataclass
class FilterConfig:
    min_tools: int = knob(3, "Reject servers left with fewer usable tools (they rarely support multi-turn work).",
                          minimum=0)
    min_description_words: int = knob(3, "Drop tools whose description is shorter (a vague description).", minimum=0)


def words(text: str) -> list[str]:
    """Lower-cased word tokens; snake_case and camelCase split."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return [w for w in re.split(r"[^A-Za-z0-9\u00C0-\uFFFF]+", text.lower()) if w]


def vague_description(name: str, description: str | None, min_words: int) -> str | None:
    """Why a description is too vague to tell what the tool does, or None when it is usable."""
    text = (description or "").strip()
    if not text:
        return "missing description"
    if text.lower().strip(" .") in PLACEHOLDERS:
        return f"placeholder description {text!r}"
    tokens = words(text)
    cjk = sum(1 for ch in text if "\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af")
    if cjk >= 4:  # word counts mean little for Chinese/Japanese/Korean
        return None
    if tokens == words(name):
        return f"description only repeats the name {name!r}"
    if len(tokens) < min_words:
        return f"vague description {text!r} (fewer than {min_words} words)"
    return None


def filter_server(record: dict, config: FilterConfig) -> dict:
    """The server with only its usable tools (and what was dropped, why), or Rejected."""
    dropped = [{"name": u["name"], "reason": f"unmappable schema: {u['reason']}"}
               for u in record.get("unmapped_tools", [])]
    kept, seen = [], set()
    for tool in record["tools"]:
        function = tool["function"]
        name = function["name"]
        if name in seen:
            dropped.append({"name": name, "reason": "duplicate tool name"})
            continue
        try:
            to_parameters(function.get("parameters"))
        except Unmappable as exc:
            dropped.append({"name": name, "reason": f"unmappable schema: {exc}"})
            continue
        vague = vague_description(name, function.get("description"), config.min_description_words)
        if vague:
            dropped.append({"name": name, "reason": vague})
            continue
        seen.add(name)
        kept.append(tool)
    if len(kept) < config.min_tools:
        listed = ", ".join(t["function"]["name"] for t in kept) or "none"
        reason = f"fewer than {config.min_tools} tools: {len(kept)} usable ({listed})"
        if dropped:
            reason += "; dropped " + "; ".join(f"{d['name']}: {d['reason']}" for d in dropped)
        raise Rejected(reason)
    out = {k: v for k, v in record.items() if k != "unmapped_tools"}
    out["tools"] = kept
    out["meta"] = {**record.get("meta", {}), "filter": {"kept": len(kept), "dropped": dropped}}
    return out
