import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from astra_core import validate
from astra_toolgraph.cli import main
from astra_toolgraph.mcp_client import McpConnection
from astra_toolgraph.normalize import SourceError, detect_format, from_astra, mcp_transports, normalize_source
from click.testing import CliRunner
from toolgraph_helpers import invoke, read_jsonl, time_source, write_jsonl


def test_bundled_samples_cover_every_document_format(sample_servers):
    by_id = {s["id"]: s for s in sample_servers}
    assert {s["source"]["format"] for s in sample_servers} == {"astra", "openai", "bfcl", "openapi"}
    for server in sample_servers:
        validate(server, "tool_server")
    assert [t["function"]["name"] for t in by_id["bookshop"]["tools"]] == [
        "searchBooks", "getBook", "createCart", "addToCart", "checkout"]
    assert by_id["bookshop"]["unmapped_tools"] == [
        {"name": "uploadCover", "reason": "request body is multipart/form-data, not JSON"}]
    # OpenAPI: path + query parameters and the JSON body merge into one object; headers are not arguments.
    add = next(t for t in by_id["bookshop"]["tools"] if t["function"]["name"] == "addToCart")["function"]["parameters"]
    assert set(add["properties"]) == {"cart_id", "isbn", "quantity"} and set(add["required"]) == {"cart_id", "isbn",
                                                                                                     "quantity"}
    search = by_id["bookshop"]["tools"][0]
    assert set(search["function"]["parameters"]["properties"]) == {"q", "limit"}
    assert search["output_schema"]["properties"]["books"]["items"]["properties"]["isbn"]["type"] == "string"
    # BFCL: "dict"/"float" types and the documented response become parameters and output_schema.
    thermostat = next(t for t in by_id["smart-home"]["tools"] if t["function"]["name"] == "set_thermostat")
    assert thermostat["function"]["parameters"]["properties"]["target"]["type"] == "number"
    assert thermostat["output_schema"]["properties"]["target"]["type"] == "number"
    assert by_id["unit-converter"]["unmapped_tools"][0]["name"] == "convert_weird"
    assert by_id["order-desk"]["domain"] == "e-commerce" and by_id["calendar"]["domain"] == "productivity"


@pytest.mark.parametrize(("call_info", "kind"), [
    ({"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "k"}}, "http"),
    ({"mock_tool": True}, "doc_only"),
    ({"python_sdk_url": "https://server.smithery.ai/x/mcp?config={config_b64}"}, "doc_only"),
    ({"command": "mcp-server-x", "args": ["--flag"]}, "stdio"),
    ({}, "doc_only"),
])
def test_astra_call_info_says_how_to_reach_the_server(call_info, kind):
    record = {"mcp_info": {"base_info": {"group_info": {"server_name": "s", "server_description": "d"},
                                         "tool_list": [{"name": "a", "description": "does a thing well",
                                                        "parameters": {"type": "object", "properties": {}}}]},
                           "call_info": call_info}}
    (server,) = from_astra(record)
    assert server["transport"]["kind"] == kind
    if kind == "http":
        assert server["transport"]["headers"] == {"X-Key": "k"}


def test_formats_are_detected_or_refused():
    assert detect_format({"base_info": {}}) == "astra"
    assert detect_format({"openapi": "3.1.0"}) == "openapi"
    assert detect_format({"command": "x"}) == "mcp"
    assert detect_format({"functions": []}) == "openai"
    with pytest.raises(SourceError, match="cannot tell"):
        detect_format({"name": "x"})


def test_a_path_alone_is_an_openapi_spec_when_it_holds_one(tmp_path):
    """`{"path": spec}` is how the formats table shows an OpenAPI source: the spec is recognised by its `openapi`
    key (it was "cannot tell the source format"); an operation without summary or description is described by its
    method and path. Another document behind a bare path still needs its format."""
    spec = {"openapi": "3.0.0", "info": {"title": "Pets"}, "paths": {"/pets/{petId}": {
        "parameters": [{"$ref": "#/components/parameters/PetId"}],
        "put": {"operationId": "updatePet", "requestBody": {"content": {"application/json": {"schema": {
            "$ref": "#/components/schemas/Pet"}}}}}}},
        "components": {"parameters": {"PetId": {"name": "petId", "in": "path", "required": True,
                                                "schema": {"type": "string"}}},
                       "schemas": {"Pet": {"type": "object", "required": ["name"],
                                           "properties": {"name": {"type": "string"}}}}}}
    (tmp_path / "pets.json").write_text(json.dumps(spec))
    (server,) = asyncio.run(normalize_source({"path": str(tmp_path / "pets.json")}))
    [tool] = server["tools"]
    assert server["source"]["format"] == "openapi" and tool["function"]["description"] == "PUT /pets/{petId}"
    assert tool["function"]["parameters"]["required"] == ["petId", "name"]
    (tmp_path / "functions.json").write_text(json.dumps([{"name": "f", "parameters": {"type": "object"}}]))
    with pytest.raises(SourceError, match="a path is recognised on its own only when it holds an OpenAPI spec"):
        detect_format({"path": str(tmp_path / "functions.json")})
    assert [name for name, _ in mcp_transports({"mcpServers": {"a": {"command": "x"}, "b": {"url": "http://h/mcp"}}})] \
        == ["a", "b"]


def test_a_live_stdio_server_is_listed_with_its_output_schemas():
    (server,) = asyncio.run(normalize_source(time_source()))
    names = [t["function"]["name"] for t in server["tools"]]
    assert names == ["get_current_time", "convert_time"]
    assert server["transport"]["kind"] == "stdio" and server["source"]["format"] == "mcp"
    assert "timezone" in server["tools"][0]["function"]["parameters"]["required"]
    assert server["tools"][0]["output_schema"]["type"] == "object"


def test_what_is_not_text_reaches_the_agent_as_its_kind_and_size_not_its_base64():
    """A real MCP server (the SDK's, over stdio) returning an image, audio, a binary resource and a resource link:
    the observation names each; it was up to 2,000 characters of base64 per item."""
    transport = {"kind": "stdio", "command": sys.executable,
                 "args": [str(Path(__file__).parent / "servers" / "media_stdio.py")]}

    async def calls():
        async with McpConnection(transport) as connection:
            return [await connection.call(name, {}) for name in ("snapshot", "recording", "attachments")]

    snapshot, recording, attachments = asyncio.run(calls())
    assert snapshot.ok and snapshot.content == "the shelf\n[image: image/png, 1,000 bytes]"
    assert recording.content == "[audio: audio/wav, 10 bytes]"
    assert attachments.content == "[resource file:///b.bin: binary, 7 bytes]\n[resource link: file:///notes.md (the notes)]"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_server():
    port = _free_port()
    script = Path(__file__).parent / "servers" / "notes_http.py"
    process = subprocess.Popen([sys.executable, str(script), str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(timeout=10)


def test_a_streamable_http_server_is_listed_and_called(http_server, tmp_path):
    sources = write_jsonl(tmp_path / "sources.jsonl", [{"name": "notes", "url": http_server}])
    out = tmp_path / "servers.jsonl"
    invoke("normalize", sources, "-o", out)
    (server,) = read_jsonl(out)
    assert server["transport"] == {"kind": "http", "url": http_server}
    assert {t["function"]["name"] for t in server["tools"]} == {"add_note", "get_note", "list_notes"}

    async def calls():
        async with McpConnection(server["transport"]) as connection:
            added = await connection.call("add_note", {"title": "t1", "text": "hello"})
            read = await connection.call("get_note", {"note_id": "t1"})
            missing = await connection.call("no_such_tool", {})
            return added, read, missing

    added, read, missing = asyncio.run(calls())
    assert added.ok and "t1" in added.content
    assert read.ok and read.content == "hello"
    assert not missing.ok and missing.content.startswith("Error")


def test_an_unreachable_server_is_a_reject_not_a_crash(tmp_path):
    sources = write_jsonl(tmp_path / "sources.jsonl", [{"name": "ghost", "command": str(tmp_path / "nope")},
                                                       {"name": "weird"}])
    rejects = tmp_path / "rejects.jsonl"
    result = invoke("normalize", sources, "--rejects", rejects)
    assert result.stdout == ""
    reasons = [r["reason"] for r in read_jsonl(rejects)]
    assert len(reasons) == 2 and reasons[0].startswith("unreachable:") and "no such file" in reasons[0].lower()
    assert "source: cannot tell the source format" in reasons[1]


@pytest.mark.parametrize(("bad", "field"), [({"path": 5}, "path"), ({"path": ["a"]}, "path"),
                                            ({"domain": ["x"]}, "domain"), ({"description": 3}, "description"),
                                            ({"include_tools": "a"}, "include_tools")])
def test_a_wrong_typed_source_field_is_malformed_input_naming_the_field(tmp_path, bad, field):
    calendar = next(s for s in invoke_samples() if s.get("id") == "calendar")
    sources = write_jsonl(tmp_path / "sources.jsonl", [calendar, {**calendar, "id": "bad", **bad}])
    rejects = tmp_path / "rejects.jsonl"
    result = invoke("normalize", sources, "--skip-bad", "--rejects", rejects)
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["calendar"]
    [reject] = read_jsonl(rejects)
    assert reject["reason"].startswith(f"malformed: {sources}:2: record 'bad': field {field}: ")
    stopped = CliRunner().invoke(main, ["normalize", str(sources)])
    assert stopped.exit_code == 1 and f"{sources}:2: record 'bad': field {field}:" in stopped.stderr


def test_an_astra_source_on_a_file_of_another_format_is_a_source_reject_saying_what_it_found(tmp_path):
    calendar = next(s for s in invoke_samples() if s.get("id") == "calendar")
    broken = write_jsonl(tmp_path / "servers.jsonl", [{"base_info": {"group_info": {"server_name": 3}}}])
    sources = write_jsonl(tmp_path / "sources.jsonl", [{"format": "astra", "path": calendar["path"]},
                                                       {"format": "astra", "path": str(broken)}])
    rejects = tmp_path / "rejects.jsonl"
    invoke("normalize", sources, "--rejects", rejects)
    first, second = (r["reason"] for r in read_jsonl(rejects))
    assert first == (f"source: {calendar['path']} is not in astra format: record #1 has no base_info or mcp_info "
                     "(found keys type, function, output_schema)")
    assert second.startswith(f"source: {broken} record #1: field base_info.group_info.server_name: 3 is not of type")


def test_a_source_can_expose_only_some_tools():
    calendar = next(s for s in invoke_samples() if s.get("id") == "calendar")
    (server,) = asyncio.run(normalize_source({**calendar, "include_tools": ["list_events", "get_event", "nope"],
                                              "exclude_tools": ["get_event"]}))
    assert [t["function"]["name"] for t in server["tools"]] == ["list_events"]


def invoke_samples():
    return [json.loads(line) for line in invoke("samples").stdout.splitlines()]


def test_the_bundled_sample_tasks_are_tasks_for_bundled_tools():

    from astra_core.schema import validate

    tasks = [json.loads(line) for line in invoke("samples", "--what", "tasks").stdout.splitlines()]
    calendar = next(s for s in invoke_samples() if s.get("id") == "calendar")
    (server,) = asyncio.run(normalize_source(calendar))
    calendar_tools = {t["function"]["name"] for t in server["tools"]}
    for task in tasks:
        validate(task, "task")
        assert task["meta"]["sample"].startswith("bundled")
        if task["server_id"] == "calendar":
            assert set(task["chain"]) <= calendar_tools
    assert {t["server_id"] for t in tasks} == {"calendar", "sqlite"}


def test_a_server_on_this_machine_is_called_directly_whatever_proxy_the_environment_names(http_server, monkeypatch):
    """Clusters often set HTTP_PROXY with no NO_PROXY for loopback; httpx then sent a local MCP server's requests
    to the proxy, which cannot reach this machine's loopback."""
    from astra_core.testing import closed_port

    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed_port()}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)

    async def call():
        async with McpConnection({"kind": "http", "url": http_server}) as connection:
            return await connection.call("add_note", {"title": "t2", "text": "direct"})

    assert asyncio.run(call()).ok
