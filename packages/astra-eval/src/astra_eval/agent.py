"""The model under evaluation: any OpenAI-compatible endpoint with function calling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from astra_core.chat_format import new_call_id
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


HISTORY_REASONING = ("keep", "drop")


def history_message(message: dict, reasoning: str = "drop") -> dict:
    """The assistant message as it goes back into the conversation.

    "keep": the message exactly as the endpoint returned it, `reasoning_content` included (what
    bfcl-eval's OpenAI FC handler does: it appends the SDK's message object, which the SDK sends back
    with every field the server set). "drop": role, content and tool calls only (bfcl-eval's
    DeepSeek/Grok handlers; tau2's agent)."""
    if reasoning == "keep":
        return {key: value for key, value in message.items() if not key.startswith("_")}
    kept = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        kept["tool_calls"] = [{"id": call.get("id"), "type": call.get("type", "function"),
                               "function": {"name": call["function"]["name"],
                                            "arguments": call["function"]["arguments"]}}
                              for call in message["tool_calls"]]
    return kept


class EndpointAgent:
    """Asks the endpoint for the next assistant message given the conversation and tools.

    The reply is the endpoint's message as returned (`reasoning_content` and any other field kept);
    `strip_tools=False` sends the tools' functions with every field (BFCL's `response`)."""

    def __init__(self, client: LLMClient, sampling: Sampling, *, strip_tools: bool = True):
        self.client = client
        self.sampling = sampling
        self.strip_tools = strip_tools

    async def __call__(self, messages: list[dict], tools: list[dict] | None, *, seed: int | None = None) -> dict:
        # (a reply of the wrong shape, e.g. a tool call without a name, is the client's LLMError: the item's failure)
        reply = await self.client.chat(messages, tools=tools or None, strip_tools=self.strip_tools,
                                       **self.sampling.params(seed=seed))
        for call in reply.tool_calls:  # a server that sends none: the results answer by id, and records carry one
            if not isinstance(call.get("id"), str) or not call["id"]:
                call["id"] = new_call_id()
        return {"role": "assistant", **reply.message}
