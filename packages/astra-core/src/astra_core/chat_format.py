"""Hermes-style tool calling for chat templates that know nothing of tools (e.g. SmolLM2's ChatML).

The same rendering is used by the embedded server (OpenAI requests -> prompt) and by the
trainer's rollouts (so what the policy is trained on is what it is served with):

- tools are listed in the system message inside <tools></tools>, one JSON schema per line;
- an assistant tool call is `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`;
- tool results come back in a user turn as `<tool_response>\n...\n</tool_response>` blocks
  (consecutive tool messages share one turn).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_WHITESPACE = re.compile(r"\s*")
_JSON = json.JSONDecoder()

TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n"
    "</tool_call>"
)


def tools_block(tools: list[dict]) -> str:
    lines = [json.dumps({"type": "function", "function": t["function"]}, ensure_ascii=False) for t in tools]
    return TOOLS_PREAMBLE.format(tools="\n".join(lines))


def _arguments_text(arguments: str | dict) -> dict | str:
    if isinstance(arguments, dict):
        return arguments
    try:
        return json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return arguments  # keep what the model wrote: the template shows it back verbatim


def render_tool_call(name: str, arguments: str | dict) -> str:
    payload = json.dumps({"name": name, "arguments": _arguments_text(arguments)}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"


def content_text(content: object) -> str:
    """A message's content as text: the OpenAI API's content may also be a list of parts, whose text parts are
    joined (as vLLM does); a part of another type (an image) is a ValueError naming it."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, part in enumerate(content):
            is_text = isinstance(part, dict) and part.get("type", "text") == "text" and isinstance(part.get("text"), str)
            if not is_text:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(f"content part {index} is not text ({kind!r}): only text parts can be rendered")
            texts.append(part["text"])
        return "\n".join(texts)
    raise ValueError(f"content must be text or a list of text parts, got {type(content).__name__}")


def to_template_messages(messages: list[dict], tools: list[dict] | None = None) -> list[dict]:
    """OpenAI messages (with tool_calls / tool roles) -> plain {role, content} for a ChatML template."""
    out: list[dict] = []
    system_extra = tools_block(tools) if tools else None
    for message in messages:
        role, content = message["role"], content_text(message.get("content"))
        if role == "system":
            text = f"{content}\n\n{system_extra}" if system_extra and content else (system_extra or content)
            system_extra = None
            out.append({"role": "system", "content": text})
        elif role == "assistant":
            parts = [content] if content else []
            for call in message.get("tool_calls") or []:
                parts.append(render_tool_call(call["function"]["name"], call["function"]["arguments"]))
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif role == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool": True})
        else:
            out.append({"role": role, "content": content})
    if system_extra:
        out.insert(0, {"role": "system", "content": system_extra})
    return [{"role": m["role"], "content": m["content"]} for m in out]


@dataclass
class ParsedCall:
    name: str
    arguments: dict


def new_call_id() -> str:
    """A tool call's id, unique in any conversation: `call_` and 12 hex digits."""
    return f"call_{uuid.uuid4().hex[:12]}"


@dataclass
class ParsedReply:
    """An assistant completion split into prose, well-formed calls and malformed call blocks."""

    content: str
    calls: list[ParsedCall] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # each: why the block could not be read

    def openai_tool_calls(self) -> list[dict]:
        return [{"id": new_call_id(), "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                for c in self.calls]


def _parse_call(block: str) -> ParsedCall | str:
    try:
        payload = json.loads(block)
    except json.JSONDecodeError as exc:
        return f"tool call is not valid JSON ({exc.msg}): {block[:200]}"
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return f"tool call needs a string 'name': {block[:200]}"
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return f"tool call arguments are not a JSON object: {arguments[:200]}"
    if not isinstance(arguments, dict):
        return f"tool call arguments must be an object, got {type(arguments).__name__}"
    return ParsedCall(payload["name"], arguments)


def call_blocks(text: str) -> Iterator[tuple[int, int, ParsedCall | str]]:
    """Each `<tool_call>` block of a completion: (start, end, the call or why it cannot be read).

    A block ends after its JSON object, so a `</tool_call>` inside an argument string does not cut
    it short; a block whose JSON does not parse ends at the first `</tool_call>`; an unclosed last
    block runs to the end of the text.
    """
    position = 0
    while (start := text.find(TOOL_CALL_OPEN, position)) != -1:
        body_start = start + len(TOOL_CALL_OPEN)
        body_end = _json_body_end(text, body_start)
        if body_end is None:
            close = text.find(TOOL_CALL_CLOSE, body_start)
            body_end = len(text) if close == -1 else close
        end = body_end + len(TOOL_CALL_CLOSE) if text.startswith(TOOL_CALL_CLOSE, body_end) else body_end
        yield start, end, _parse_call(text[body_start:body_end].strip())
        position = end


def _json_body_end(text: str, body_start: int) -> int | None:
    """Where a block's body ends if it is one JSON value followed only by whitespace and the close tag."""
    try:
        _, value_end = _JSON.raw_decode(text, _WHITESPACE.match(text, body_start).end())
    except json.JSONDecodeError:
        return None
    after = _WHITESPACE.match(text, value_end).end()
    return after if after == len(text) or text.startswith(TOOL_CALL_CLOSE, after) else None


def parse_reply(text: str, *, keep_unreadable: bool = False) -> ParsedReply:
    """Split a completion into content and <tool_call> blocks (an unclosed last block still counts).
    `keep_unreadable`: a block that cannot be read stays in the content, as the model wrote it."""
    calls: list[ParsedCall] = []
    malformed: list[str] = []
    prose: list[str] = []
    position = 0
    for start, end, parsed in call_blocks(text):
        prose.append(text[position:start])
        if isinstance(parsed, ParsedCall):
            calls.append(parsed)
        else:
            malformed.append(parsed)
            if keep_unreadable:
                prose.append(text[start:end])
        position = end
    prose.append(text[position:])
    return ParsedReply(content="".join(prose).strip(), calls=calls, malformed=malformed)
