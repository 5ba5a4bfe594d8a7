"""Records rendered as the plain text a judge reads.

A conversation becomes numbered lines, one per message, numbered by the message's index in the
record (so [1] is the user's request when [0] is the system prompt), with calls numbered #1, #2, ...
in order across the whole conversation:

    [1] USER: What is the population of the capital of Norway?
    [2] ASSISTANT:
        call #1: get_capital({"country": "Norway"})
    [3] TOOL (result of call #1 get_capital): {"capital": "Oslo"}
    [4] ASSISTANT: Oslo has 709,000 inhabitants.

Contents longer than `max_chars` are cut in the middle with a marker saying how much was left out.
"""

from __future__ import annotations

import json

from astra_reward.conversation import ToolCall, message_text


def clip(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return f"{text[:half]} …[{len(text) - 2 * half} characters left out]… {text[-half:]}"


def tools_text(tools: list[dict] | None) -> str:
    if not tools:
        return "(no tool list given)"
    lines = []
    for tool in tools:
        function = tool.get("function") or {}
        properties = (function.get("parameters") or {}).get("properties") or {}
        params = ", ".join(f"{name}: {spec.get('type', 'any')}" if isinstance(spec, dict) else name
                           for name, spec in properties.items())
        lines.append(f"- {function.get('name')}({params}): {function.get('description') or ''}".rstrip())
    return "\n".join(lines)


def _arguments_text(arguments: object) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def transcript(messages: list[dict], calls: list[ToolCall], *, start: int, end: int, max_chars: int) -> str:
    """Messages[start:end] as numbered lines (see the module docstring)."""
    number_of = {id(call): number for number, call in enumerate(calls, start=1)}
    calls_at: dict[int, list[ToolCall]] = {}
    answered_at: dict[int, ToolCall] = {}
    for call in calls:
        calls_at.setdefault(call.message_index, []).append(call)
        if call.observation_index is not None:
            answered_at[call.observation_index] = call
    lines = []
    for index in range(start, min(end, len(messages))):
        message = messages[index]
        role = str(message.get("role", "?")).upper()
        text = clip(message_text(message.get("content")), max_chars)
        if role == "TOOL":
            call = answered_at.get(index)
            label = f"result of call #{number_of[id(call)]} {call.name}" if call else "answers no call"
            lines.append(f"[{index}] TOOL ({label}): {text}")
            continue
        lines.append(f"[{index}] {role}: {text}".rstrip())
        for call in calls_at.get(index, []):
            arguments = clip(_arguments_text(call.arguments), max_chars)
            lines.append(f"    call #{number_of[id(call)]}: {call.name}({arguments})")
    return "\n".join(lines)


def sub_questions_text(trace: list[dict], max_chars: int) -> str:
    lines = []
    for step in trace:
        depends = step.get("dependency") or []
        depends_text = ", ".join(str(d) for d in depends) if depends else "none"
        tool = "" if step.get("needs_tool", True) else ", answered without a tool"
        lines.append(f"[id {step.get('_uuid')}] (hop {step.get('hop_level', '?')}, depends on: {depends_text}{tool})\n"
                     f"  Q: {clip(str(step.get('sub_question', '')), max_chars)}\n"
                     f"  A: {clip(str(step.get('sub_answer', '')), max_chars)}")
    return "\n".join(lines)
