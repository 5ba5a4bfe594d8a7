"""The LLM client against a real loopback HTTP server (astra_core.testing.RecordedLLM) serving recorded replies."""

import asyncio
import json
import re
import socket
import struct
import time

import pytest
from astra_core.llm import LLMClient, LLMConfig, LLMError, StructuredOutputError, extract_json
from astra_core.testing import Failure, closed_port


def client(server, **overrides) -> LLMClient:
    return LLMClient(LLMConfig(base_url=server.base_url, backoff=0.01, max_backoff=0.05, **overrides))


async def ask(llm, text="hi", **kw):
    async with llm:
        return await llm.chat([{"role": "user", "content": text}], **kw)


def test_retries_server_errors_then_succeeds(recorded_llm):
    server = recorded_llm(replies=["fine"], failures=[Failure(503), Failure(500), Failure(429)])
    llm = client(server)
    reply = asyncio.run(ask(llm))
    assert reply.content == "fine"
    assert len(server.chat_requests) == 4
    assert llm.usage.retries == 3 and llm.usage.requests == 1


def test_gives_up_after_max_retries(recorded_llm):
    server = recorded_llm(replies=["never"], failures=[Failure(503)] * 5)
    with pytest.raises(LLMError, match="after 2 retries: HTTP 503"):
        asyncio.run(ask(client(server, max_retries=2)))
    assert len(server.chat_requests) == 3


def test_client_errors_are_not_retried(recorded_llm):
    server = recorded_llm(replies=["x"], failures=[Failure(401, body='{"error": "bad key"}')])
    with pytest.raises(LLMError, match="HTTP 401") as info:
        asyncio.run(ask(client(server)))
    assert info.value.status == 401 and len(server.chat_requests) == 1


def test_backoff_honours_retry_after(recorded_llm):
    server = recorded_llm(replies=["ok"], failures=[Failure(429, retry_after=0.4)])
    started = time.monotonic()
    asyncio.run(ask(client(server)))
    assert time.monotonic() - started >= 0.4


def test_timeouts_are_retried(recorded_llm):
    server = recorded_llm(replies=["late but fine"], failures=[Failure(200, sleep=1.0)])
    reply = asyncio.run(ask(client(server, timeout=0.3)))
    assert reply.content == "late but fine"


def test_the_recorded_server_says_nothing_when_a_timed_out_client_has_gone(recorded_llm, capfd):
    server = recorded_llm(replies=["late but fine"], failures=[Failure(200, sleep=0.5)])
    port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # hang up with a reset
    time.sleep(1.0)  # the server answers into the closed connection
    assert "Traceback" not in capfd.readouterr().err


def test_concurrency_is_bounded(recorded_llm):
    server = recorded_llm(replies=[lambda body: (time.sleep(0.05), "ok")[1]])
    llm = client(server, concurrency=3)

    async def many():
        async with llm:
            await asyncio.gather(*(llm.chat([{"role": "user", "content": str(i)}]) for i in range(12)))

    asyncio.run(many())
    assert len(server.chat_requests) == 12
    assert 1 < server.max_in_flight <= 3


def test_usage_is_accounted(recorded_llm):
    server = recorded_llm(replies=["a", "b"])
    llm = client(server)

    async def two():
        async with llm:
            await llm.chat([{"role": "user", "content": "1"}])
            await llm.chat([{"role": "user", "content": "2"}])

    asyncio.run(two())
    assert (llm.usage.requests, llm.usage.prompt_tokens, llm.usage.completion_tokens) == (2, 20, 10)
    assert "2 requests" in str(llm.usage)


def test_cache_answers_repeated_requests(recorded_llm, tmp_path):
    server = recorded_llm(replies=["first", "second"])
    for _ in range(2):
        llm = client(server, cache_dir=str(tmp_path / "cache"))
        assert asyncio.run(ask(llm, "same question")).content == "first"
    assert len(server.chat_requests) == 1
    assert asyncio.run(ask(client(server, cache_dir=str(tmp_path / "cache")), "other")).content == "second"


def test_request_defaults_and_model_discovery(recorded_llm):
    server = recorded_llm(replies=["ok"], model_name="served-model")
    asyncio.run(ask(client(server, temperature=0.0, max_tokens=7, seed=3), tools=[
        {"type": "function", "function": {"name": "f", "parameters": {}}, "output_schema": {"type": "object"}}]))
    body = server.chat_requests[0]
    assert body["model"] == "served-model"
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.0, 7, 3)
    assert "output_schema" not in body["tools"][0]


SCHEMA = {"type": "object", "required": ["score"], "properties": {"score": {"type": "integer", "minimum": 0}}}


def test_structured_output_uses_json_schema_when_supported(recorded_llm):
    server = recorded_llm(replies=['{"score": 2}'])
    llm = client(server)

    async def run():
        async with llm:
            return await llm.chat_json([{"role": "user", "content": "rate"}], SCHEMA)

    value, _ = asyncio.run(run())
    assert value == {"score": 2}
    assert server.chat_requests[0]["response_format"]["type"] == "json_schema"


def test_structured_output_falls_back_and_retries_on_bad_json(recorded_llm):
    unsupported = Failure(400, body='{"error": {"message": "response_format is not supported"}}')
    server = recorded_llm(replies=["I think it is good", '```json\n{"score": -1}\n```', 'Sure: {"score": 3} done'],
                          failures=[unsupported, unsupported])  # json_schema refused, then json_object
    llm = client(server)

    async def run():
        async with llm:
            return await llm.chat_json([{"role": "user", "content": "rate"}], SCHEMA, attempts=3)

    value, _ = asyncio.run(run())
    assert value == {"score": 3}
    assert [r["response_format"]["type"] for r in server.chat_requests[:2]] == ["json_schema", "json_object"]
    later = server.chat_requests[2:]
    assert all("response_format" not in r for r in later)
    assert "no JSON found" in later[1]["messages"][-1]["content"]
    assert "minimum" in later[2]["messages"][-1]["content"] or "-1" in later[2]["messages"][-1]["content"]


# llama-cpp-python 0.3.36's server (`python -m llama_cpp.server`) asked with a json_schema response_format:
# HTTP 500 and this body, recorded from the real server on 2026-11-28 (its app's path shortened).
LLAMA_CPP_PYTHON_500 = (
    '{"error":{"message":"1 validation error:\\n  {\'type\': \'literal_error\', \'loc\': (\'body\', '
    '\'response_format\', \'type\'), \'msg\': \\"Input should be \'text\' or \'json_object\'\\", \'input\': '
    '\'json_schema\', \'ctx\': {\'expected\': \\"\'text\' or \'json_object\'\\"}}\\n\\n  File \\"llama_cpp/server/'
    'app.py\\", line 376, in create_chat_completion\\n    POST /v1/chat/completions","type":"internal_server_error",'
    '"param":null,"code":null}}')


def test_structured_output_takes_the_form_llama_cpp_python_accepts_at_once(recorded_llm):
    """That server refuses a json_schema response_format with HTTP 500 (not retried) and constrains replies to a
    json_object's `schema` (it did both when asked on 2026-11-28); requests in flight when the refusals come move the
    client on once, to json_object, never past it."""

    def llama_cpp_python(body: dict):
        form = body.get("response_format") or {}
        if form.get("type") == "json_schema":
            time.sleep(0.05)  # the refusals arrive while the other requests are in flight
            return Failure(500, body=LLAMA_CPP_PYTHON_500)
        assert form == {"type": "json_object", "schema": SCHEMA}, form
        return '{"score": 1}'

    server = recorded_llm(replies=[llama_cpp_python])
    llm = client(server, concurrency=8)

    async def run():
        async with llm:
            return await asyncio.gather(*(llm.chat_json([{"role": "user", "content": f"rate {i}"}], SCHEMA)
                                          for i in range(8)))

    assert [value for value, _ in asyncio.run(run())] == [{"score": 1}] * 8
    forms = [r["response_format"]["type"] for r in server.chat_requests]  # none without one
    assert forms.count("json_object") == 8 and 1 < forms.count("json_schema") <= 8, forms
    assert llm.usage.retries == 0


def test_a_server_error_that_names_no_response_format_is_still_retried(recorded_llm):
    server = recorded_llm(replies=['{"score": 1}'], failures=[Failure(500, body='{"error": "CUDA out of memory"}')])
    llm = client(server)

    async def run():
        async with llm:
            return await llm.chat_json([{"role": "user", "content": "rate"}], SCHEMA)

    assert asyncio.run(run())[0] == {"score": 1}
    assert [r["response_format"]["type"] for r in server.chat_requests] == ["json_schema", "json_schema"]
    assert llm.usage.retries == 1


def test_a_null_content_beside_tool_calls_is_sent_as_given_unless_the_endpoint_refuses_it(recorded_llm):
    """The OpenAI API takes a null content beside tool calls, and BFCL's own harness sends it: it goes as given.
    llama-cpp-python's server refuses it (HTTP 500 naming the field, as on 2026-11-28): that refusal is not retried,
    the request goes again with "", and so do the client's later ones. The caller's messages keep their null."""

    def strict_server(body: dict):
        if any("content" not in m or m["content"] is None for m in body["messages"]):
            return Failure(500, body='{"error": {"message": "messages.2.content: Input should be a valid string"}}')
        return "done"

    call = {"id": "c1", "type": "function", "function": {"name": "list_tables", "arguments": "{}"}}
    messages = [{"role": "user", "content": "Which tables?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "orders"}]
    lenient = recorded_llm(replies=["fine"])
    asyncio.run(ask_with(client(lenient), messages))
    assert lenient.chat_requests[0]["messages"] == messages  # as given

    strict = recorded_llm(replies=[strict_server])
    llm = client(strict)

    async def twice():
        async with llm:
            return [(await llm.chat(messages)).content for _ in range(2)]

    assert asyncio.run(twice()) == ["done", "done"]
    sent = [r["messages"][1]["content"] for r in strict.chat_requests]
    assert sent == [None, "", ""] and llm.usage.retries == 0
    assert messages[1]["content"] is None


async def ask_with(llm, messages):
    async with llm:
        return await llm.chat(messages)


def test_structured_output_gives_up_with_last_reply(recorded_llm):
    server = recorded_llm(replies=["nope"])
    llm = client(server)

    async def run():
        async with llm:
            return await llm.chat_json([{"role": "user", "content": "rate"}], SCHEMA, attempts=2)

    with pytest.raises(StructuredOutputError) as info:
        asyncio.run(run())
    assert info.value.last_reply == "nope"


@pytest.mark.parametrize("text, expected", [
    ('{"a": 1}', {"a": 1}),
    ('Here you go:\n```json\n{"a": [1, 2]}\n```\nanything else?', {"a": [1, 2]}),
    ('The answer is {"a": {"b": "}"}} as requested.', {"a": {"b": "}"}}),
    ("[1, 2, 3]", [1, 2, 3]),
    # a reasoning model's draft inside its reasoning is not its reply (vLLM without a reasoning parser)
    ('<think>maybe {"score": 3}? no.</think>\n{"score": 8}', {"score": 8}),
    ('the template opened the block: {"score": 3}? no.\n</think>\n\n{"score": 8}', {"score": 8}),
])
def test_extract_json(text, expected):
    assert extract_json(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", "{broken", '<think>a draft {"score": 3}, cut off here'])
def test_extract_json_errors(text):
    with pytest.raises(ValueError):
        extract_json(text)


def test_config_from_env(monkeypatch):
    monkeypatch.setenv("ASTRA_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("ASTRA_LLM_MODEL", "m")
    config = LLMConfig.from_env(model="override", concurrency=2)
    assert (config.base_url, config.model, config.concurrency) == ("http://127.0.0.1:9/v1", "override", 2)


def test_embeddings_in_input_order(recorded_llm):
    server = recorded_llm(embeddings=lambda text: [float(len(text)), 1.0])
    llm = client(server)

    async def run():
        async with llm:
            return await llm.embed(["a", "bbb", "cc"], batch_size=2)

    assert asyncio.run(run()) == [[1.0, 1.0], [3.0, 1.0], [2.0, 1.0]]


def test_tools_are_stripped_to_openai_fields_unless_asked_to_send_them_as_given(recorded_llm):
    server = recorded_llm(replies=["ok"])
    tool = {"type": "function", "function": {"name": "ls", "description": "List.", "parameters": {"type": "object"},
                                             "response": {"type": "dict"}, "output_schema": {"type": "object"}}}
    asyncio.run(ask(client(server), tools=[tool]))
    asyncio.run(ask(client(server), tools=[tool], strip_tools=False))
    stripped, as_given = (request["tools"][0]["function"] for request in server.chat_requests)
    assert set(stripped) == {"name", "description", "parameters"}
    assert as_given == tool["function"]
    assert "strip_tools" not in server.chat_requests[1]


def test_tool_call_arguments_sent_as_an_object_are_read_as_their_json_text(recorded_llm):
    """Recorded replies of a server that puts tool-call arguments as an object (or leaves them out), not the OpenAI
    API's JSON string: every consumer (rollouts, judges, benchmarks) parses a string, so the client hands one on."""
    server = recorded_llm(replies=[{"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}},
        {"id": "b", "type": "function", "function": {"name": "now"}},
        {"id": "c", "type": "function", "function": {"name": "same", "arguments": "{\"x\": 1}"}}]}])
    reply = asyncio.run(ask(client(server)))
    assert [call["function"]["arguments"] for call in reply.tool_calls] == [
        '{"city":"Zürich","days":2}', "{}", '{"x": 1}']


MALFORMED_CHAT_REPLIES = {  # what a proxy or another server's API may send as a 200 reply, and what the error names
    "[1, 2]": "reply is not a JSON object",
    '{"choices": {"message": {"content": "x"}}}': "`choices` that is not a list",
    '{"choices": ["hello"]}': "choices[0] that is not an object",
    '{"choices": [{"message": "hello"}]}': "choices[0].message that is not an object",
    '{"choices": [{"message": {"content": 5}}]}': "choices[0].message.content that is neither text",
    '{"choices": [{"message": {"tool_calls": {"function": {"name": "f"}}}}]}': "choices[0].message.tool_calls",
    '{"choices": [{"message": {"tool_calls": ["f()"]}}]}': "choices[0].message.tool_calls",
    '{"choices": [{"message": {"tool_calls": [{"function": {"arguments": "{}"}}]}}]}': "choices[0].message.tool_calls",
}


@pytest.mark.parametrize("body", MALFORMED_CHAT_REPLIES)
def test_a_reply_of_the_wrong_shape_is_an_llm_error_naming_the_field_and_is_not_cached(recorded_llm, tmp_path, body):
    """A stage rejects the record with the LLMError's text (before: an AttributeError of whichever line read the
    reply first); asked again, the endpoint is asked again (the bad reply was not cached)."""
    server = recorded_llm(replies=["fine"], failures=[Failure(200, body=body)])
    cache = str(tmp_path / "cache")
    with pytest.raises(LLMError, match=re.escape(MALFORMED_CHAT_REPLIES[body])):
        asyncio.run(ask(client(server, max_retries=0, cache_dir=cache)))
    assert asyncio.run(ask(client(server, cache_dir=cache))).content == "fine"
    assert len(server.chat_requests) == 2


def test_content_as_a_list_of_parts_is_its_text_and_odd_usage_is_not_counted(recorded_llm):
    """Recorded reply in the form of Mistral's API for reasoning models: the content is a list of parts (a thinking
    part, then text parts); the answer is the text parts joined. A usage count that is no whole number is left out
    of the accounting, not a crash of the request."""
    content = [{"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]},
               {"type": "text", "text": "Oslo"}, {"type": "text", "text": "."}]
    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}],
                       "usage": {"prompt_tokens": "many", "completion_tokens": 3}})
    server = recorded_llm(failures=[Failure(200, body=body)])
    llm = client(server)
    assert asyncio.run(ask(llm)).content == "Oslo."
    assert (llm.usage.prompt_tokens, llm.usage.completion_tokens) == (0, 3)


@pytest.mark.parametrize(("data", "error"), [
    (lambda texts: [{"index": 0, "embedding": [1.0]}], "sent 1 embeddings for 3 inputs"),
    (lambda texts: [{"index": 0, "embedding": [1.0]}] * 3, "indexes [0,0,0]"),
    (lambda texts: [{"index": str(i), "embedding": [1.0]} for i in range(3)], "not each of 0..2 once"),
    (lambda texts: [{"index": i, "embedding": [1.0] * (i + 1)} for i in range(3)], "of one length"),
    (lambda texts: [{"index": i, "embedding": "AACAPw=="} for i in range(3)], "encoding_format"),
    (lambda texts: {"0": [1.0]}, "no `data` list"),
])
def test_embeddings_that_do_not_match_the_inputs_one_to_one_are_an_llm_error(recorded_llm, data, error):
    """A vector missing, repeated or of another length would silently give texts each other's embeddings (the
    distractor pool's similarity bands are computed from them)."""
    server = recorded_llm(embedding_data=data)

    async def run():
        async with client(server) as llm:
            return await llm.embed(["a", "bbb", "cc"])

    with pytest.raises(LLMError, match=re.escape(error)):
        asyncio.run(run())


def test_embeddings_without_indexes_are_taken_in_the_order_sent(recorded_llm):
    server = recorded_llm(embedding_data=lambda texts: [{"embedding": [float(len(text))]} for text in texts])

    async def run():
        async with client(server) as llm:
            return await llm.embed(["a", "bbb", "cc"])

    assert asyncio.run(run()) == [[1.0], [3.0], [2.0]]


async def checked(llm):
    async with llm:
        return await llm.check()


def test_an_endpoint_that_does_not_answer_is_unavailable_and_one_that_fails_is_an_error(recorded_llm):
    """No connection after every retry is LLMUnavailable (stages stop on it, not reject every record); HTTP
    failures after every retry are still an LLMError of the request."""
    from astra_core.llm import LLMUnavailable

    nowhere = LLMConfig(base_url=f"http://127.0.0.1:{closed_port()}/v1", model="m", max_retries=1, backoff=0.01)
    with pytest.raises(LLMUnavailable, match=r"/v1/chat/completions: the endpoint does not answer \(Client"):
        asyncio.run(ask(LLMClient(nowhere)))
    with pytest.raises(LLMUnavailable, match=r"/v1/models: the endpoint does not answer"):
        asyncio.run(checked(LLMClient(nowhere)))  # a configured model is no reason to skip the check
    server = recorded_llm(replies=["never"], failures=[Failure(503)] * 2)
    with pytest.raises(LLMError) as failed:
        asyncio.run(ask(client(server, max_retries=1)))
    assert not isinstance(failed.value, LLMUnavailable)
    assert asyncio.run(checked(client(server, model="configured"))) == "configured"
    refused = recorded_llm(replies=["never"], failures=[Failure(401, body='{"error": {"message": "bad key"}}')])
    with pytest.raises(LLMUnavailable, match=r"/v1/chat/completions: the endpoint refuses the request: HTTP 401"):
        asyncio.run(ask(client(refused)))
    assert len(refused.chat_requests) == 1  # not retried


def test_a_missing_route_or_model_stops_at_once_and_says_where_v1_goes(recorded_llm):
    """HTTP 404 (a base URL without /v1; a model the endpoint does not serve): a stage rejected every record in turn,
    each an LLMError, and --resume then skipped them all as done. Now LLMUnavailable at the first: the stage stops."""
    from astra_core.llm import LLMUnavailable

    server = recorded_llm(replies=["never"], failures=[Failure(404, body='{"detail": "Not Found"}')] * 2)
    bare = LLMConfig(base_url=server.base_url.removesuffix("/v1"), model="m", max_retries=2, backoff=0.01)
    with pytest.raises(LLMUnavailable, match=r"^http://127\.0\.0\.1:\d+/chat/completions: the endpoint has no such "
                                             r"route or model: HTTP 404: .* is the base URL http://127\.0\.0\.1:\d+/v1\?\)$"):
        asyncio.run(ask(LLMClient(bare)))
    assert len(server.chat_requests) == 1  # not retried
    with pytest.raises(LLMUnavailable, match=r"/v1/chat/completions: the endpoint has no such route or model: HTTP "
                                             r"404: \{\"detail\": \"Not Found\"\}$"):  # under /v1: no word of it
        asyncio.run(ask(client(server, model="m")))

    without_models = recorded_llm(replies=["fine"], lists_models=False)
    assert asyncio.run(checked(client(without_models, model="configured"))) == "configured"  # a 404 there is no stop
    assert asyncio.run(ask(client(without_models, model="configured"))).content == "fine"


class ForwardProxy:
    """A plain HTTP forward proxy (what HTTP_PROXY names on a cluster): it reads the absolute URL of each request,
    notes it, and forwards the request to `upstream`, whatever host the URL names (no DNS here)."""

    def __init__(self, upstream: str):
        import http.server
        import threading
        import urllib.parse
        import urllib.request

        self.seen: list[str] = []
        seen, target = self.seen, urllib.parse.urlsplit(upstream)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's names
                self._forward(None)

            def do_POST(self):  # noqa: N802
                self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def _forward(self, body):
                seen.append(self.path)
                url = urllib.parse.urlsplit(self.path)._replace(scheme=target.scheme, netloc=target.netloc).geturl()
                request = urllib.request.Request(url, data=body, method=self.command,
                                                 headers={"Content-Type": "application/json"})
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                with opener.open(request, timeout=30) as reply:
                    data = reply.read()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_an_endpoint_elsewhere_is_reached_through_the_proxy_the_environment_names(recorded_llm, monkeypatch):
    """A hosted API behind a cluster's proxy: curl, requests and the OpenAI SDK go through HTTP(S)_PROXY; the
    client did not (aiohttp ignores it unless told), so no request reached the endpoint at all."""
    server = recorded_llm(replies=["through the proxy"])
    proxy = ForwardProxy(server.base_url)
    try:
        for name in ("HTTP_PROXY", "http_proxy"):
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        llm = LLMClient(LLMConfig(base_url="http://llm.example.invalid/v1", model="m", max_retries=1, backoff=0.01))
        assert asyncio.run(ask(llm)).content == "through the proxy"
        assert proxy.seen == ["http://llm.example.invalid/v1/chat/completions"]
    finally:
        proxy.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_an_endpoint_on_this_machine_is_never_asked_through_a_proxy(recorded_llm, monkeypatch, host):
    """Clusters often set HTTP_PROXY with no NO_PROXY for loopback; a proxy cannot reach this machine's loopback."""
    server = recorded_llm(replies=["direct"])
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed_port()}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    base_url = server.base_url.replace("127.0.0.1", host)
    assert asyncio.run(ask(LLMClient(LLMConfig(base_url=base_url, model="m", max_retries=1)))).content == "direct"
    from astra_core.proxies import open_direct  # the embedded model's health check: urllib, likewise direct

    with open_direct(server.base_url + "/models", timeout=10) as reply:
        assert reply.status == 200


def test_a_proxy_in_the_environment_gets_loopback_added_to_no_proxy_for_libraries_we_do_not_drive():
    from astra_core.proxies import loopback_bypassed

    plain = {"PATH": "/bin"}
    assert loopback_bypassed(plain) is plain  # no proxy: nothing to bypass
    env = loopback_bypassed({"https_proxy": "http://proxy:3128", "NO_PROXY": "internal.example, localhost"})
    assert env["NO_PROXY"] == "internal.example,localhost,127.0.0.1,::1"
    assert env["no_proxy"] == "127.0.0.1,localhost,::1"
    import urllib.request

    assert urllib.request.proxy_bypass_environment("127.0.0.1", {"no": env["no_proxy"]})


MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
90 27 0:50 / /home rw,relatime shared:40 - nfs4 filer:/export/home rw,vers=4.2
91 90 0:51 / /home/me/scratch\\040space rw,relatime - lustre 10.0.0.1@tcp:/scratch rw
92 27 0:52 / /tmp rw - tmpfs tmpfs rw
"""


@pytest.mark.parametrize("path, kind", [("/home/me/cache", "nfs4"), ("/home/me/scratch space/c", "lustre"),
                                        ("/tmp/c", "tmpfs"), ("/var/c", "ext4"), ("/homework", "ext4")])
def test_the_file_system_of_a_path_is_that_of_its_longest_mount_point(path, kind):
    from astra_core.llm.cache import file_system_type

    assert file_system_type(path, MOUNTINFO) == kind


def test_the_response_cache_uses_no_write_ahead_log_on_a_network_file_system(tmp_path, monkeypatch):
    """sqlite's WAL keeps its index in memory shared on one machine: shards of a job array on several nodes caching
    into one NFS directory would corrupt it. There, a rollback journal; on a local disk, the faster WAL."""
    from astra_core.llm import cache

    local = cache.ResponseCache(tmp_path / "local")
    assert local._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    local.close()
    monkeypatch.setattr(cache, "file_system_type", lambda path, mountinfo=None: "nfs4")  # no NFS mount here
    shared = cache.ResponseCache(tmp_path / "shared")
    assert shared._conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    shared.put("k", {"answer": 1})
    assert shared.get("k") == {"answer": 1}
    shared.close()


# llama-cpp-python's server (0.3.36) answers tool_choice "required" with HTTP 500 and an empty message (seen against the
# real server): its chat handler asserts tool_choice == "auto", and its error handler (llama_cpp/server/errors.py) writes
# the AssertionError, which has no message, as this body.
LLAMA_CPP_EMPTY_500 = '{"error":{"message":"","type":"internal_server_error","param":null,"code":null}}'


def test_an_empty_server_error_on_tool_choice_required_names_the_known_cause(recorded_llm):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    server = recorded_llm(replies=["x"], failures=[Failure(500, body=LLAMA_CPP_EMPTY_500)] * 2)
    with pytest.raises(LLMError, match='after 1 retries: HTTP 500.*tool_choice "required".*llama-cpp-python'):
        asyncio.run(ask(client(server, max_retries=1), tools=tools, tool_choice="required"))
    assert len(server.chat_requests) == 2  # still retried: an empty 500 may be a passing fault

    for tool_choice, body in (("auto", LLAMA_CPP_EMPTY_500), ("required", '{"error":{"message":"out of memory"}}')):
        server = recorded_llm(replies=["x"], failures=[Failure(500, body=body)] * 2)
        with pytest.raises(LLMError) as info:
            asyncio.run(ask(client(server, max_retries=1), tools=tools, tool_choice=tool_choice))
        assert "llama-cpp-python" not in str(info.value)
