import asyncio

import pytest
from astra_core.stage import Rejected
from astra_toolgraph.filtering import FilterConfig, filter_server, vague_description
from astra_toolgraph.normalize import normalize_source
from astra_toolgraph.schema_map import openai_tool
from toolgraph_helpers import invoke, read_jsonl, time_source, write_jsonl


def _server(*tools, unmapped=()):
    return {"id": "s", "name": "s", "tools": list(tools), "transport": {"kind": "doc_only"},
            "unmapped_tools": list(unmapped), "meta": {"provenance": []}}


def _tool(name, description):
    return openai_tool(name, description, {"type": "object", "properties": {}})


def test_the_time_server_is_rejected_by_the_three_tool_rule(tmp_path):
    """The real mcp-server-time (2 tools), started over stdio, normalized, filtered."""
    servers = write_jsonl(tmp_path / "servers.jsonl", asyncio.run(normalize_source(time_source())))
    rejects = tmp_path / "rejects.jsonl"
    result = invoke("filter", servers, "--rejects", rejects)
    assert result.stdout == ""
    (reject,) = read_jsonl(rejects)
    assert reject["id"] == "time" and reject["stage"] == "astra-toolgraph filter"
    assert reject["reason"] == "fewer than 3 tools: 2 usable (get_current_time, convert_time)"
    assert "fewer than 3 tools ×1" in result.stderr


@pytest.mark.parametrize(("description", "vague"), [
    (None, "missing description"),
    ("TODO", "placeholder description"),
    ("Gets users", "fewer than 3 words"),
    ("get_user", "only repeats the name"),
    ("Fetch a user's profile by their e-mail address.", None),
    ("查询指定城市的天气", None),
])
def test_vague_descriptions(description, vague):
    reason = vague_description("get_user", description, 3)
    assert (reason is None) if vague is None else (vague in reason)


def test_dropped_tools_are_noted_and_too_few_left_rejects_with_every_reason():
    good = [_tool(f"tool_{i}", "Does a clearly described thing.") for i in range(3)]
    server = _server(*good, _tool("tool_0", "A duplicate of the first tool name."), _tool("vague", "x"),
                     unmapped=[{"name": "odd", "reason": "top-level type is 'string'"}])
    kept = filter_server(server, FilterConfig())
    assert [t["function"]["name"] for t in kept["tools"]] == ["tool_0", "tool_1", "tool_2"]
    assert {d["name"]: d["reason"] for d in kept["meta"]["filter"]["dropped"]} == {
        "odd": "unmappable schema: top-level type is 'string'", "tool_0": "duplicate tool name",
        "vague": "vague description 'x' (fewer than 3 words)"}
    assert "unmapped_tools" not in kept
    with pytest.raises(Rejected, match=r"fewer than 4 tools: 3 usable .*dropped odd: unmappable schema"):
        filter_server(server, FilterConfig(min_tools=4))


def test_bundled_samples_filter(sample_servers, tmp_path):
    servers = write_jsonl(tmp_path / "servers.jsonl", sample_servers)
    rejects = tmp_path / "rejects.jsonl"
    kept = read_jsonl_str(invoke("filter", servers, "--rejects", rejects).stdout)
    assert [s["id"] for s in kept] == ["order-desk", "weather-station", "calendar", "smart-home", "bookshop"]
    (reject,) = read_jsonl(rejects)
    assert reject["id"] == "unit-converter"
    assert "convert: placeholder description 'TODO'" in reject["reason"]


def read_jsonl_str(text):
    import json
    return [json.loads(line) for line in text.splitlines() if line.strip()]
