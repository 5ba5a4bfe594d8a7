"""Helpers for judge tests: route recorded judge replies by the judgment a request asks for.

Replies are recorded (served by astra_core.testing's `recorded_llm`, a real loopback HTTP server):
tests exercise parsing and control flow, not judge quality.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from astra_core.llm import LLMClient, LLMConfig
from astra_reward.judges import prompts

TITLES = {value.system.splitlines()[0]: value.name for value in vars(prompts).values()
          if isinstance(value, prompts.Judgment)}


def judgment_of(body: dict) -> str:
    """The Judgment name a chat request asks for (from its system prompt's first line)."""
    return TITLES[body["messages"][0]["content"].splitlines()[0]]


def round_of(body: dict) -> int | None:
    match = re.search(r"tool-call round (\d+) of", body["messages"][1]["content"])
    return int(match.group(1)) if match else None


def score(value, reason: str = "recorded") -> str:
    return json.dumps({"reason": reason, "score": value})


def router(replies: dict[str, object]) -> Callable[[dict], str]:
    """A reply function: replies[name] is a text, or a function of the request body returning one."""

    def reply(body: dict) -> str:
        answer = replies[judgment_of(body)]
        return answer(body) if callable(answer) else answer

    return reply


def requests_for(server, name: str) -> list[dict]:
    return [body for body in server.chat_requests if judgment_of(body) == name]


def client_for(server) -> LLMClient:
    """A client of the recorded server."""
    return LLMClient(LLMConfig(base_url=server.base_url, max_retries=0))
