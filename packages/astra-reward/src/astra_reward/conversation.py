"""What a rollout did: its tool calls paired with their observations, and its final answer.

Shared by the F1 reward and the trajectory judge so both read a conversation the same way.

Pairing: a `tool` message answers the call whose id equals its `tool_call_id`. A tool message
without a `tool_call_id` answers the oldest call still unanswered (formats that carry no ids keep
calls and results in order). A tool message that answers no call made earlier in the conversation
(unknown id, or a second answer to the same call) is an *orphan*: it is not an observation of
anything the agent did.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from astra_core.reasoning import without_reasoning


def message_text(content: object) -> str:
    """A message's content as text (OpenAI content may be a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return json.dumps(content, ensure_ascii=False)


def is_error_observation(text: str) -> bool:
    """A tool observation that reports a failed call.

    Recognised: text starting with "Error" followed by ":" (astra-sandbox's convention for every
    failure: unknown tool, bad arguments, exception, timeout), a Python traceback, or a JSON object
    with a truthy top-level "error" or "isError" (MCP's error result).
    """
    stripped = text.strip()
    if re.match(r"(?i)error\b[^\n:]{0,40}:", stripped) or stripped.startswith("Traceback (most recent call last)"):
        return True
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError:
            return False
        return isinstance(value, dict) and bool(value.get("error") or value.get("isError"))
    return False


@dataclass
class ToolCall:
    """One call the agent made, with the observation that answered it (None: never answered)."""

    message_index: int  # index of the assistant message that issued it
    id: str | None
    name: str
    arguments: str | dict | None
    observation: str | None = None
    observation_index: int | None = None

    @property
    def failed(self) -> bool:
        """No observation, or one that reports an error."""
        return self.observation is None or is_error_observation(self.observation)

    @property
    def arguments_object(self) -> dict | None:
        """The arguments as a JSON object, or None when they are not one."""
        if isinstance(self.arguments, dict):
            return self.arguments
        try:
            value = json.loads(self.arguments or "")
        except (TypeError, ValueError):
            return None
        return value if isinstance(value, dict) else None


def tool_calls(messages: list[dict]) -> list[ToolCall]:
    """Every tool call in `messages`, in order, paired with its observation (see module docstring)."""
    calls: list[ToolCall] = []
    unanswered: list[ToolCall] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            for raw in message.get("tool_calls") or []:
                function = raw.get("function") or {}
                call = ToolCall(index, raw.get("id"), str(function.get("name") or ""), function.get("arguments"))
                calls.append(call)
                unanswered.append(call)
        elif role == "tool":
            call = _answered_call(unanswered, message.get("tool_call_id"))
            if call is not None:
                call.observation = message_text(message.get("content"))
                call.observation_index = index
                unanswered.remove(call)
    return calls


def _answered_call(unanswered: list[ToolCall], call_id: str | None) -> ToolCall | None:
    if not call_id:
        return unanswered[0] if unanswered else None
    return next((call for call in unanswered if call.id == call_id), None)


def strip_thinking(text: str) -> str:
    """Text without its reasoning: <think>...</think> blocks (an unclosed block runs to the end), and a leading part
    ending in </think> (the template opened the block in the prompt, as DeepSeek-R1's does)."""
    return without_reasoning(text)


def final_answer(messages: list[dict]) -> str | None:
    """The content of the last assistant message, when it makes no tool call (else None).

    Reasoning inside <think>...</think> is not part of the answer.
    """
    for message in reversed(messages):
        if message.get("role") == "assistant":
            if message.get("tool_calls"):
                return None
            return strip_thinking(message_text(message.get("content")))
    return None
