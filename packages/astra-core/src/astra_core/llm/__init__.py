"""OpenAI-compatible LLM access: the async client, structured output, and JSON extraction."""

from astra_core.llm.client import (
    ChatResponse,
    LLMClient,
    LLMConfig,
    LLMError,
    LLMUnavailable,
    StructuredOutputError,
    Usage,
)
from astra_core.llm.jsontext import extract_json
from astra_core.reasoning import without_reasoning

__all__ = ["ChatResponse", "LLMClient", "LLMConfig", "LLMError", "LLMUnavailable", "StructuredOutputError", "Usage",
           "extract_json", "without_reasoning"]
