"""Tool-document embeddings: the endpoint path (recorded server) and local all-MiniLM-L6-v2 (slow: loads torch)."""

import numpy as np
import pytest
from astra_core.llm import LLMConfig
from astra_qaenv.embed import endpoint_embedder, local_available, local_embedder, tool_document


def tool(name, description, **params):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {k: {"type": "string", "description": v} for k, v in params.items()}}}}


WEATHER = tool("get_weather", "Current weather forecast for a city.", city="City name")
FORECAST = tool("get_forecast", "Weather forecast for the coming days in a city.", city="City name")
STOCK = tool("get_stock_price", "Latest trading price of a company's stock.", ticker="Stock ticker symbol")


def test_tool_document_is_the_openai_documentation_string():
    doc = tool_document({**WEATHER, "output_schema": {"type": "object"}})
    assert doc.startswith('{"description": "Current weather') and '"city"' in doc and "output_schema" not in doc


def test_endpoint_embedder_returns_unit_rows_in_input_order(recorded_llm):
    server = recorded_llm(embeddings=lambda text: [float(len(text)), 1.0, 0.0])
    vectors = endpoint_embedder(LLMConfig(base_url=server.base_url), model="emb", batch_size=2)(["a", "bbb", "cc"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    assert vectors[1, 0] > vectors[2, 0] > vectors[0, 0]
    assert [r["model"] for r in server.requests] == ["emb", "emb"]  # two batches


@pytest.mark.slow
def test_local_minilm_puts_related_tools_closer():
    assert local_available()  # scripts/setup installs the `local` extra
    vectors = local_embedder()([tool_document(t) for t in (WEATHER, FORECAST, STOCK)])
    assert vectors.shape == (3, 384)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > similarity[0, 2] + 0.1
