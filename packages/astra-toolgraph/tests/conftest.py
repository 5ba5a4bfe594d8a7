"""Shared fixtures of astra-toolgraph's tests (helpers live in toolgraph_helpers)."""

import pytest
from toolgraph_helpers import invoke, read_jsonl


@pytest.fixture
def sample_servers(tmp_path) -> list[dict]:
    """The bundled sample documents, normalized."""
    out = tmp_path / "servers.jsonl"
    sources = invoke("samples").stdout
    invoke("normalize", "-o", out, input=sources)
    return read_jsonl(out)
