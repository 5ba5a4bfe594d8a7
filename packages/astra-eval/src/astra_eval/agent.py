"""The model under evaluation: any OpenAI-compatible endpoint with function calling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from astra_core.llm.client import LLMClient


@dataclass
class Sampling:
    """Decoding settings sent with every request (None: the endpoint's default)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # vLLM/SGLang extension; -1 means no top-k restriction
    max_tokens: int | None = None
    seed: int | None = None

    def params(self, **overrides: Any) -> dict:
        values = {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                  "max_tokens": self.max_tokens, "seed": self.seed}
        values.update(overrides)
        return {key: value for key, value in values.items() if value is not None}


def history_message(message: dict) -> dict:
    """The assistant message as it goes back into the conversation (reasoning is not resent)."""
    kept = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        kept["tool_calls"] = message["tool_calls"]
    return kept


class EndpointAgent:
    """Asks the endpoint for the next assistant message given the conversation and tools."""

    def __init__(self, client: LLMClient, sampling: Sampling):
        self.client = client
        self.sampling = sampling

    async def __call__(self, messages: list[dict], tools: list[dict] | None, *, seed: int | None = None) -> dict:
        reply = await self.client.chat(messages, tools=tools or None, **self.sampling.params(seed=seed))
        message = {"role": "assistant", "content": reply.message.get("content")}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        if reply.message.get("reasoning_content"):
            message["reasoning_content"] = reply.message["reasoning_content"]
        return message
