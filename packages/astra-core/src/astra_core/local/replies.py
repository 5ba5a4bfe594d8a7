"""Reading a generated turn with a response template (transformers' declarative response parsing): its prose,
reasoning and tool calls, each call's arguments typed by the tool's JSON schema, and why each unreadable call is so.

A template is the one a user gives (`load_response_template`: a known format's name or a JSON file), the
checkpoint's own, or one of `astra_core.reply_formats`; `astra_core.local.model_chat` picks it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from astra_core.chat_format import ParsedCall
from astra_core.reply_formats import REPLY_FORMATS, ReplyFormat

__all__ = ["REASONING_KEYS", "Reading", "UnreadableTemplate", "load_response_template", "openai_tool", "read_turn",
           "said"]

REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")  # the names a message's reasoning goes by


class UnreadableTemplate(ValueError):
    """The chat template renders tool calls that no response template at hand reads back."""


@dataclass
class Reading:
    """One generated turn read back: prose, reasoning, well-formed calls, and why each unreadable call is so."""

    content: str
    calls: list[ParsedCall] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    reasoning: str = ""


def openai_tool(tool: dict) -> dict:
    """A tool as chat templates and endpoints expect it (our `output_schema` stripped)."""
    return {"type": "function", "function": tool["function"]}


def load_response_template(spec: str) -> tuple[str, dict, ReplyFormat | None]:
    """(name, response template, its format if it is one of ours) for `--response-template`: a known format's
    name, or a JSON file holding a transformers `response_template`."""
    if spec in REPLY_FORMATS:
        return spec, REPLY_FORMATS[spec].response_template, REPLY_FORMATS[spec]
    path = Path(spec).expanduser()
    if not path.is_file():
        raise UnreadableTemplate(f"--response-template {spec}: neither a known format ({', '.join(REPLY_FORMATS)}) "
                                 "nor a JSON file")
    try:
        template = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UnreadableTemplate(f"--response-template {spec}: line {exc.lineno}: not JSON ({exc.msg})") from exc
    template = template.get("response_template", template) if isinstance(template, dict) else template
    return str(path), template, None


def read_turn(template: dict, text: str, prefix: str, tools: list[dict] | None, stopped: bool,
                        name: str) -> Reading:
    """`text` (a generated turn, without its stop token) read with `template` after `prefix` (the prompt it
    continued); `stopped`: it ended on a stop token (else a call still open at its end was cut off); `name` names the
    template in the reasons."""
    from transformers.utils.chat_parsing import ResponseParser

    try:
        parser = ResponseParser(template, prefix=prefix, tools=[openai_tool(t) for t in tools or []])
        parser.feed(text)
        message, closing = parser.finalize()
    except (ValueError, KeyError, TypeError) as exc:
        reason = " ".join(str(exc).split())
        return Reading(text.strip(), malformed=[f"the reply cannot be read as {name}: {reason[:300]}"])
    calls, malformed = [], []
    raw = message.get("tool_calls") or []
    cut_inside = not stopped and any(e["type"] == "region_close" and e["field"] == "tool_calls" for e in closing)
    for index, entry in enumerate(raw):
        function = entry.get("function", entry) if isinstance(entry, dict) else None
        name_, arguments = (function.get("name"), function.get("arguments", {})) if isinstance(function, dict) \
            else (None, None)
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        if cut_inside and index == len(raw) - 1:
            malformed.append(f"the reply was cut off inside a tool call: {json.dumps(entry)[:200]}")
        elif not isinstance(name_, str) or not name_:
            malformed.append(f"a tool call has no name: {json.dumps(entry)[:200]}")
        elif not isinstance(arguments, dict):
            malformed.append(f"the arguments of {name_} are not an object: {json.dumps(arguments)[:200]}")
        else:
            calls.append(ParsedCall(name_, arguments))
    reasoning = next((message[k] for k in REASONING_KEYS if isinstance(message.get(k), str)), "")
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    return Reading(content.strip(), calls, malformed, reasoning.strip())


def said(reading: Reading) -> str:
    """What a reading holds, in a few words (for the reasons a response template is refused)."""
    if reading.malformed:
        return f"a malformed call ({reading.malformed[0][:200]})"
    return f"calls {[(c.name, c.arguments) for c in reading.calls]}" if reading.calls else "no call"
