"""The embedded default model behind a real HTTP server on 127.0.0.1 (SmolLM2-135M-Instruct)."""

import asyncio
import json

import httpx
import pytest
from astra_core.llm import LLMClient, LLMConfig

pytestmark = pytest.mark.llm

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "days", "unit"]}}}
FLIGHTS = {"type": "function", "function": {
    "name": "search_flights", "description": "Flights between two cities",
    "parameters": {"type": "object", "properties": {"origin": {"type": "string"}, "destination": {"type": "string"}},
                   "required": ["origin", "destination"]}}}


def chat(base_url, **body):
    return asyncio.run(_chat(base_url, **body))


async def _chat(base_url, **body):
    messages = body.pop("messages")
    async with LLMClient(LLMConfig(base_url=base_url)) as llm:
        return await llm.chat(messages, **body)


def test_answers_a_chat_request(embedded_llm):
    reply = chat(embedded_llm, messages=[{"role": "user", "content": "What is the capital of France?"}],
                 max_tokens=24, temperature=0)
    assert reply.message["role"] == "assistant"
    assert "paris" in reply.content.lower()
    assert reply.usage["completion_tokens"] <= 24 and reply.usage["prompt_tokens"] > 5
    assert reply.finish_reason in ("stop", "length")


def test_required_tool_choice_returns_a_well_formed_call(embedded_llm):
    reply = chat(embedded_llm, messages=[{"role": "user", "content": "Weather in Oslo for 3 days in celsius?"}],
                 tools=[WEATHER, FLIGHTS], tool_choice="required", temperature=0, max_tokens=64)
    assert reply.finish_reason == "tool_calls"
    (call,) = reply.tool_calls
    assert call["type"] == "function" and call["id"]
    arguments = json.loads(call["function"]["arguments"])
    if call["function"]["name"] == "get_weather":
        assert set(arguments) == {"city", "days", "unit"}
        assert isinstance(arguments["days"], int) and arguments["unit"] in ("celsius", "fahrenheit")
    else:
        assert call["function"]["name"] == "search_flights" and set(arguments) == {"origin", "destination"}


def test_named_tool_choice_and_tool_results_round_trip(embedded_llm):
    named = {"type": "function", "function": {"name": "search_flights"}}
    first = chat(embedded_llm, messages=[{"role": "user", "content": "Flights from Boston to Denver?"}],
                 tools=[WEATHER, FLIGHTS], tool_choice=named, temperature=0)
    assert first.tool_calls[0]["function"]["name"] == "search_flights"
    # Feed the call and a tool result back: the server must render the conversation and answer.
    messages = [{"role": "user", "content": "Flights from Boston to Denver?"},
                {"role": "assistant", "content": None, "tool_calls": first.tool_calls},
                {"role": "tool", "tool_call_id": first.tool_calls[0]["id"], "content": '{"flights": ["UA 12"]}'}]
    second = chat(embedded_llm, messages=messages, tools=[WEATHER, FLIGHTS], max_tokens=24, temperature=0)
    assert second.message["role"] == "assistant"


def test_n_choices_and_seeded_sampling(embedded_llm):
    messages = [{"role": "user", "content": "Name a color."}]
    many = chat(embedded_llm, messages=messages, n=3, temperature=1.0, max_tokens=8, seed=7)
    assert len(many.choices) == 3
    again = chat(embedded_llm, messages=messages, n=3, temperature=1.0, max_tokens=8, seed=7)
    assert [c["message"]["content"] for c in many.choices] == [c["message"]["content"] for c in again.choices]


def test_concurrent_requests_are_batched_and_all_answered(embedded_llm):
    async def many():
        async with LLMClient(LLMConfig(base_url=embedded_llm, concurrency=6)) as llm:
            return await asyncio.gather(*(llm.chat([{"role": "user", "content": f"Say the number {i}."}],
                                                   max_tokens=6, temperature=0) for i in range(6)))

    replies = asyncio.run(many())
    assert len(replies) == 6 and all(r.message["role"] == "assistant" for r in replies)


def test_connections_opened_at_once_are_all_answered(embedded_llm):
    """A client opening 256 connections at once (a stage at --concurrency 256): with the standard library's listen
    backlog of 5, 66 of them were reset here and others waited minutes on SYN retries."""
    import aiohttp

    async def main():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256)) as session:
            async def one():
                async with session.get(f"{embedded_llm}/models") as reply:
                    return reply.status

            return await asyncio.wait_for(asyncio.gather(*[one() for _ in range(256)]), timeout=30)

    assert asyncio.run(main()) == [200] * 256


def read_stream(base_url: str, body: dict) -> tuple[list[dict], str]:
    """(the data events of a streamed reply, the last data line), read as an SSE client reads them."""
    with httpx.stream("POST", f"{base_url}/chat/completions", json={**body, "stream": True}, timeout=60) as response:
        assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream"
        data = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    return [json.loads(event) for event in data[:-1]], data[-1]


def test_a_streamed_reply_assembles_to_the_same_message(embedded_llm):
    """`stream: true` (the OpenAI SDK's and many UIs' default): chunks whose deltas, put together as a client does,
    are the reply the same request gets without streaming; a call's arguments come whole in its first delta."""
    body = {"messages": [{"role": "user", "content": "Weather in Oslo for 3 days in celsius?"}], "tools": [WEATHER],
            "tool_choice": "required", "max_tokens": 64, "temperature": 0, "stream_options": {"include_usage": True}}
    plain = httpx.post(f"{embedded_llm}/chat/completions", json=body, timeout=60).json()
    events, last = read_stream(embedded_llm, body)
    assert last == "[DONE]" and {e["object"] for e in events} == {"chat.completion.chunk"}
    message, finish = {}, None
    for event in events[:-1]:
        [choice] = event["choices"]
        for key, value in choice["delta"].items():
            if key == "tool_calls":
                message["tool_calls"] = [{k: v for k, v in call.items() if k != "index"} for call in value]
            else:
                message[key] = message.get(key, "") + value if isinstance(value, str) else value
        finish = choice["finish_reason"] or finish
    def without_call_ids(reply: dict) -> dict:  # (each reply names its calls afresh)
        assert all(call["id"].startswith("call_") for call in reply["tool_calls"])
        return {**reply, "tool_calls": [{k: v for k, v in call.items() if k != "id"} for call in reply["tool_calls"]]}

    assert without_call_ids(message) == without_call_ids(plain["choices"][0]["message"])
    assert finish == plain["choices"][0]["finish_reason"] == "tool_calls"
    assert events[-1]["choices"] == [] and events[-1]["usage"] == plain["usage"]


def test_content_given_as_text_parts_is_read_as_its_text(embedded_llm):
    """The OpenAI API's other form of content (what some clients send): text parts are the same prompt as the text;
    SmolLM2's template could not render them ("can only concatenate str (not "list") to str"). An image part is a
    400 naming it (the model reads text only)."""
    as_text = [{"role": "system", "content": "Answer in one word."},
               {"role": "user", "content": "What is the capital of France?\nAnswer now."}]
    as_parts = [{"role": "system", "content": [{"type": "text", "text": "Answer in one word."}]},
                {"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"},
                                             {"type": "text", "text": "Answer now."}]}]
    replies = [chat(embedded_llm, messages=messages, max_tokens=12, temperature=0) for messages in (as_text, as_parts)]
    assert replies[0].content == replies[1].content and replies[0].usage == replies[1].usage
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]
    response = httpx.post(f"{embedded_llm}/chat/completions", json={"messages": image}, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "content part 0 is not text ('image_url'): only text parts can be rendered"


def test_bad_requests_get_openai_style_errors(embedded_llm):
    root = embedded_llm
    response = httpx.post(f"{root}/chat/completions", content=b"{not json", timeout=30)
    assert response.status_code == 400 and "error" in response.json()
    response = httpx.post(f"{root}/chat/completions", json={"messages": [{"role": "robot", "content": "x"}]}, timeout=30)
    assert response.status_code == 400 and "messages[0]" in response.json()["error"]["message"]
    response = httpx.post(f"{root}/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                             "tools": [WEATHER], "tool_choice": {
                                                                 "type": "function", "function": {"name": "nope"}}},
                          timeout=30)
    assert response.status_code == 400 and "nope" in response.json()["error"]["message"]
    assert httpx.get(f"{root}/models", timeout=30).json()["data"][0]["id"] == "smollm2-135m-instruct"
    for length in ("two", "-1"):  # (-1: reading the body would wait until the client hung up)
        assert raw_post(root, "/chat/completions", b"{}", {"Content-Length": length}) == (
            400, f"Content-Length {length!r} is not a number of bytes")


def raw_post(base_url: str, path: str, body: bytes, headers: dict) -> tuple[int, str]:
    """A request with headers an HTTP library would refuse to send (http.client sends them as given)."""
    import http.client
    from urllib.parse import urlsplit

    url = urlsplit(base_url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        connection.putrequest("POST", url.path + path)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())["error"]["message"]
    finally:
        connection.close()


PLAN = {"type": "object", "required": ["title", "steps", "difficulty", "needs_tools", "confidence"],
        "properties": {
            "title": {"type": "string"},
            "steps": {"type": "array", "minItems": 1, "maxItems": 3,
                      "items": {"type": "object", "required": ["tool", "why"],
                                "properties": {"tool": {"enum": ["get_weather", "search_flights"]},
                                               "why": {"type": "string"}}}},
            "difficulty": {"type": "integer", "minimum": 1, "maximum": 5},
            "needs_tools": {"type": "boolean"},
            "confidence": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, {"type": "null"}]}}}


def test_json_schema_response_format_obliges_a_value_of_that_shape(embedded_llm):
    from jsonschema import Draft202012Validator

    reply = chat(embedded_llm, messages=[{"role": "user", "content": "Plan a trip from Oslo to Rome as JSON."}],
                 response_format={"type": "json_schema", "json_schema": {"name": "plan", "schema": PLAN}},
                 temperature=0, max_tokens=40)
    value = json.loads(reply.content)
    assert not list(Draft202012Validator(PLAN).iter_errors(value)), value
    assert 1 <= len(value["steps"]) <= 3 and 1 <= value["difficulty"] <= 5


def test_chat_json_succeeds_first_time_on_the_embedded_model(embedded_llm):
    async def ask():
        async with LLMClient(LLMConfig(base_url=embedded_llm)) as llm:
            return await llm.chat_json([{"role": "user", "content": "Rate this plan: fly to Rome."}],
                                       {"type": "object", "required": ["score", "reason"],
                                        "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 10},
                                                       "reason": {"type": "string"}}},
                                       attempts=1, temperature=0, max_tokens=48)

    value, _ = asyncio.run(ask())
    assert set(value) == {"score", "reason"} and 0 <= value["score"] <= 10


def action(tool: dict) -> dict:
    parameters = tool["function"]["parameters"]
    return {"type": "object", "required": ["name", "arguments"],
            "properties": {"name": {"const": tool["function"]["name"]}, "arguments": parameters}}


ACTIONS = {"type": "object", "required": ["actions"], "properties": {"actions": {
    "type": "array", "minItems": 1, "maxItems": 1, "items": {"anyOf": [action(WEATHER), action(FLIGHTS)]}}}}


def test_a_tagged_union_is_written_as_the_likeliest_alternative_with_its_required_keys(embedded_llm):
    """One alternative per tool (anyOf, told apart by a const name): the name is chosen, not always the
    first alternative, and the arguments are that alternative's required ones."""
    from jsonschema import Draft202012Validator

    reply = chat(embedded_llm, messages=[{"role": "user", "content": "Search flights from Oslo to Rome. Reply with "
                                                                      "the search_flights action as JSON."}],
                 response_format={"type": "json_schema", "json_schema": {"name": "actions", "schema": ACTIONS}},
                 temperature=0, max_tokens=40)
    value = json.loads(reply.content)
    assert not list(Draft202012Validator(ACTIONS).iter_errors(value)), value
    [chosen] = value["actions"]
    assert chosen["name"] == "search_flights" and set(chosen["arguments"]) == {"origin", "destination"}


def test_tagged_unions_are_recognised_and_refs_followed():
    from astra_core.local.guided import _tagged_union

    options, tag = _tagged_union(ACTIONS["properties"]["actions"]["items"])
    assert tag == "name" and len(options) == 2
    assert _tagged_union({"anyOf": [{"type": "number"}, {"type": "null"}]}) is None
    same = {"anyOf": [action(WEATHER), action(WEATHER)]}
    assert _tagged_union(same) is None  # one distinct tag per alternative, or no choice to make


def test_a_client_that_gives_up_before_the_reply_is_no_traceback_and_the_server_keeps_serving(capsys):
    """A stand-in service (control flow only: the reply takes 0.5 s, no model) behind the real HTTP handler: the
    client closes its socket before the reply (as a client's timeout does); answering it raised BrokenPipeError
    twice and printed both tracebacks into the demo's log."""
    import socket
    import threading
    import time
    from http.server import ThreadingHTTPServer

    from astra_core.local.server import make_handler

    class SlowService:
        model_name = "slow"

        def complete(self, body):
            time.sleep(0.5)
            return {"id": "x", "object": "chat.completion", "choices": []}

    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(SlowService()))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host, port = server.server_address
        request = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
        with socket.create_connection((host, port)) as client:
            client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n" % len(request) + request)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        time.sleep(1.0)  # the reply is written to a closed socket
        reply = httpx.post(f"http://{host}:{port}/v1/chat/completions", json={"messages": []}, timeout=10)
        assert reply.status_code == 200 and reply.json()["id"] == "x"
    finally:
        server.shutdown()
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("how", ["no directory", "no weights"])
def test_serving_a_checkpoint_that_does_not_load_is_one_line_naming_it(tmp_path, how):
    import shutil

    from astra_core.cli import main
    from astra_core.local.model import default_model_dir
    from click.testing import CliRunner

    model = tmp_path / "model"
    if how == "no weights":
        shutil.copytree(default_model_dir(), model)
        (model / "model.safetensors").unlink()
    result = CliRunner().invoke(main, ["serve", "--model", str(model), "--port", "0"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"Error: {model}")
    assert ("no config.json" if how == "no directory" else "the model does not load (OSError") in line


def test_a_port_in_use_is_one_line_said_before_the_model_loads(tmp_path):
    import socket

    from astra_core.cli import main
    from click.testing import CliRunner

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # a model that could not load either: the port is what is said, so nothing was loaded first
        result = CliRunner().invoke(main, ["serve", "--port", str(port), "--model", str(tmp_path / "none")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    [line] = result.output.strip().splitlines()
    assert line == f"Error: cannot listen on 127.0.0.1:{port}: Address already in use (--port 0 picks a free port)"


@pytest.mark.parametrize("name, hinted", [("Qwen/Qwen3-0.6B", True), ("no/such/dir", False), ("./Qwen3", False),
                                          ("checkpoint", False)])
def test_a_model_name_that_reads_as_a_hub_id_says_how_to_download_it(tmp_path, monkeypatch, name, hinted):
    """Models load from a local path only; a researcher used to `from_pretrained("Qwen/Qwen3-0.6B")` is told how
    to get the directory, and a path that is no hub id gets no such advice."""
    from astra_core.local.model import ModelNotAvailable, resolve_model_path

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotAvailable) as refused:
        resolve_model_path(name)
    message = str(refused.value)
    assert "is not a local transformers checkpoint (no config.json); models load from a local path only" in message
    assert ("hf download Qwen/Qwen3-0.6B --local-dir models/Qwen3-0.6B" in message) is hinted
    assert ("Hub id" in message) is hinted


def test_the_embedded_model_stops_when_the_stage_that_started_it_is_killed(tmp_path):
    """A stage killed hard (SIGKILL, the OOM killer, a crash) runs no atexit: its embedded model went on running,
    holding its memory, with nobody left to ask it anything. It now stops once its parent is gone. The directory
    of the port file it announced itself through is gone as soon as it is serving (one was left in /tmp for every
    embedded model started)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from astra_core.embedded import start_server\n"
        "process, url = start_server(log=False)\n"
        "print(process.pid, flush=True)\n"
        "time.sleep(600)\n")], stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    server = int(parent.stdout.readline())
    assert not list(tmp_path.glob("astra-serve-*"))
    os.kill(server, 0)  # serving
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and os.path.exists(f"/proc/{server}") and _state(server) != "Z":
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{server}") or _state(server) == "Z", "the embedded model outlived its stage"


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"



def test_sigterm_stops_the_server_as_ctrl_c_does():
    """`kill` (the demo's trap, systemd, a scheduler) ended it with the signal's status; it now stops cleanly."""
    from astra_core.embedded import start_server

    process, _ = start_server(log=False)
    process.terminate()
    assert process.wait(timeout=30) == 0
