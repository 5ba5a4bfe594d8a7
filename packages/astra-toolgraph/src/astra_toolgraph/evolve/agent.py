"""One tool-calling turn of an agent against a domain episode (OpenAI protocol), shared by the
task-synthesis agent's exploration and the assistant of a trajectory rollout."""

from __future__ import annotations

import json

from astra_core.llm import LLMClient

from astra_toolgraph.rollout import _normalize_calls, _truncate


async def execute(episode, name: str, arguments_text: str) -> tuple[bool, str]:
    try:
        arguments = json.loads(arguments_text or "{}")
    except json.JSONDecodeError as exc:
        return False, f"Error: arguments are not valid JSON: {exc.msg}"
    if not isinstance(arguments, dict):
        return False, "Error: arguments must be a JSON object"
    return await episode.call(name, arguments)


async def tool_turn(llm: LLMClient, messages: list[dict], tools: list[dict], episode, *, turn: int,
                    tool_choice: str, max_tokens: int, observation_chars: int,
                    executions: list[dict] | None = None, max_calls: int | None = None,
                    detailed: bool = False) -> bool:
    """Ask for the next assistant turn, append it (and its tool results) to `messages`.

    Only the turn's first `max_calls` calls are kept and run (a budget). Each run call is recorded in
    `executions` (turn, tool, ok; `detailed` adds its arguments and observation). Returns True when the
    turn called tools (so the agent goes on), False for a plain message.
    """
    reply = await llm.chat(messages, tools=tools, tool_choice=tool_choice, max_tokens=max_tokens)
    calls = _normalize_calls(reply.tool_calls, turn)[:max_calls]
    message: dict = {"role": "assistant", "content": reply.content or None}
    if calls:
        message["tool_calls"] = calls
    elif not message["content"]:
        message["content"] = ""
    messages.append(message)
    for call in calls:
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        ok, text = await execute(episode, name, arguments)
        text = _truncate(text, observation_chars)
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
        if executions is not None:
            entry = {"turn": turn, "tool": name, "ok": ok}
            executions.append({**entry, "arguments": arguments, "observation": text} if detailed else entry)
    return bool(calls)
