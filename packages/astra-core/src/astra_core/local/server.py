"""An OpenAI-compatible HTTP server for a local causal LM (default: the bundled SmolLM2-135M-Instruct).

Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions (`tools` -> `tool_calls`, `n`, `seed`,
`stop`, `response_format`, `stream`). Binds to 127.0.0.1 by default.

Tools go the model's own way (`astra_core.local.model_chat`): a checkpoint whose chat template renders tools
gets them through it, and its replies are read by its family's response template (reasoning as
`reasoning_content`, calls with arguments typed by the tools' schemas); a template that knows no tools
(SmolLM2's ChatML) gets them in the Hermes format of `astra_core.chat_format`. A template that renders calls
no known response template reads is refused at start-up (`--response-template` names one).

    astra-core serve --port 8000            # then ASTRA_LLM_BASE_URL=http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from astra_core.chat_format import ParsedReply, parse_reply, to_template_messages
from astra_core.http_server import (
    HTTPServer,
    announce_port,
    base_url,
    content_length,
    listen,
    serve_until_stopped,
)
from astra_core.local.generation import GenerationJob, Generator, GuidedCall, GuidedJson, Sampling
from astra_core.local.model import DEFAULT_MODEL_NAME, ModelNotAvailable, load_model
from astra_core.local.model_chat import ModelChat

JSON_INSTRUCTION = "Reply with a single JSON value and nothing else."


class BadRequest(ValueError):
    pass


class ChatService:
    """Turns OpenAI chat requests into generation jobs and completions into OpenAI responses."""

    def __init__(self, generator: Generator, model_name: str, *, max_tokens_cap: int = 2048,
                 default_max_tokens: int = 512, chat: ModelChat | None = None):
        self.generator = generator
        self.tokenizer = generator.tokenizer
        self.model_name = model_name
        self.max_tokens_cap = max_tokens_cap
        self.default_max_tokens = default_max_tokens
        self.chat = chat or ModelChat(self.tokenizer, "hermes")

    def prompt_text(self, messages: list[dict], tools: list[dict] | None, response_format: dict | None) -> str:
        if self.chat.style == "template":
            templated = self.chat.template_messages(messages, tools)
        else:
            templated = to_template_messages(messages, tools)
        if response_format and response_format.get("type") in ("json_object", "json_schema"):
            schema = (response_format.get("json_schema") or {}).get("schema")
            note = JSON_INSTRUCTION + (f" It must match this JSON schema: {json.dumps(schema)}" if schema else "")
            if templated and templated[0]["role"] == "system":
                templated[0] = {**templated[0], "content": templated[0]["content"] + "\n\n" + note}
            else:
                templated.insert(0, {"role": "system", "content": note})
        if self.chat.style == "template":
            return self.chat.render_raw(templated, tools, generation_prompt=True)
        return self.tokenizer.apply_chat_template(templated, add_generation_prompt=True, tokenize=False)

    @staticmethod
    def guided_call(tool_choice, tools: list[dict] | None, prompt_text: str) -> GuidedCall | None:
        """tool_choice "required" or {"type": "function", "function": {"name": X}} obliges a call."""
        if tool_choice in (None, "auto", "none"):
            return None
        if not tools:
            raise BadRequest("tool_choice requires 'tools'")
        if tool_choice == "required":
            return GuidedCall(prompt_text, tools)
        name = (tool_choice.get("function") or {}).get("name") if isinstance(tool_choice, dict) else None
        if name not in {t["function"]["name"] for t in tools}:
            raise BadRequest(f"tool_choice names {name!r}, which is not among the tools")
        return GuidedCall(prompt_text, tools, name)

    @staticmethod
    def guided_json(response_format: dict | None, prompt_text: str) -> GuidedJson | None:
        """response_format json_schema with a schema obliges a value of that shape (json_object only asks)."""
        if not response_format or response_format.get("type") != "json_schema":
            return None
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise BadRequest("response_format json_schema needs json_schema.schema (an object)")
        return GuidedJson(prompt_text, schema)

    def complete(self, body: dict) -> dict:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant", "tool"):
                raise BadRequest(f"messages[{index}]: needs a role of system, user, assistant or tool")
        tools = body.get("tools") if body.get("tool_choice") != "none" else None
        text = self.prompt_text(messages, tools or None, body.get("response_format"))
        prompt = self.tokenizer.encode(text, add_special_tokens=False)
        guided = self.guided_call(body.get("tool_choice"), tools, text) or self.guided_json(body.get("response_format"),
                                                                                              text)
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or self.default_max_tokens)
        temperature = float(body["temperature"]) if body.get("temperature") is not None else 1.0
        sampling = Sampling(temperature=temperature, top_p=float(body.get("top_p") or 1.0),
                            top_k=max(0, int(body.get("top_k") or 0)), seed=body.get("seed"))
        n = int(body.get("n") or 1)
        if not 1 <= n <= 64:
            raise BadRequest("'n' must be between 1 and 64")
        job = GenerationJob(prompt, min(max_tokens, self.max_tokens_cap), sampling, n=n, guided=guided)
        completions = self.generator.submit(job).result()
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else stops
        read = self.chat.style == "template" and not isinstance(guided, GuidedCall)  # a guided call is Hermes
        choices = [self._read_choice(i, c, stops, tools, text) if read else
                   self._choice(i, c.text, c.finish_reason, stops, bool(tools)) for i, c in enumerate(completions)]
        completion_tokens = sum(len(c.token_ids) for c in completions)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": self.model_name, "choices": choices,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": completion_tokens,
                      "total_tokens": len(prompt) + completion_tokens},
        }

    def _read_choice(self, index: int, completion, stops: list[str], tools: list[dict] | None, prompt: str) -> dict:
        """A choice read by the model's own response template: its prose, reasoning and typed tool calls."""
        text, finish = self.tokenizer.decode(completion.token_ids, skip_special_tokens=False), completion.finish_reason
        for stop in stops:
            if stop and stop in text:
                text, finish = text[:text.index(stop)], "stop"
        reading = self.chat.read(text, prompt, tools, stopped=finish == "stop")
        message: dict = {"role": "assistant", "content": reading.content}
        if reading.reasoning:
            message["reasoning_content"] = reading.reasoning
        if reading.calls and tools:
            message["content"] = reading.content or None
            message["tool_calls"] = ParsedReply(reading.content, reading.calls).openai_tool_calls()
            finish = "tool_calls"
        return {"index": index, "message": message, "finish_reason": finish}

    @staticmethod
    def _choice(index: int, text: str, finish: str, stops: list[str], with_tools: bool) -> dict:
        for stop in stops:
            if stop and stop in text:
                text, finish = text[:text.index(stop)], "stop"
        message: dict = {"role": "assistant", "content": text}
        if with_tools:
            reply = parse_reply(text)
            if reply.calls:
                # Malformed blocks stay in the content so a client can see what the model wrote.
                message = {"role": "assistant", "content": reply.content or None,
                           "tool_calls": reply.openai_tool_calls()}
                finish = "tool_calls"
        return {"index": index, "message": message, "finish_reason": finish}


def stream_events(completion: dict, include_usage: bool) -> list[dict]:
    """A finished completion as the OpenAI API streams one (`stream: true`): per choice, a chunk whose delta holds
    its whole message (tool calls with their index), then a chunk with its finish reason; usage last if asked. The
    model has finished before the first chunk is sent: a client reads a stream, not tokens as they come."""
    head = {key: completion[key] for key in ("id", "created", "model")}

    def chunk(choices: list[dict], **extra) -> dict:
        return {**head, "object": "chat.completion.chunk", "choices": choices, **extra}

    events = []
    for choice in completion["choices"]:
        delta = {key: value for key, value in choice["message"].items() if key != "tool_calls"}
        if choice["message"].get("tool_calls"):
            calls = choice["message"]["tool_calls"]
            delta["tool_calls"] = [{"index": index, **call} for index, call in enumerate(calls)]
        events.append(chunk([{"index": choice["index"], "delta": delta, "finish_reason": None}]))
        events.append(chunk([{"index": choice["index"], "delta": {}, "finish_reason": choice["finish_reason"]}]))
    if include_usage:
        events.append(chunk([], usage=completion["usage"]))
    return events


def make_handler(service: ChatService):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args) -> None:  # keep stdout/stderr for data and errors
            if os.environ.get("ASTRA_SERVER_LOG"):
                sys.stderr.write("astra-server: " + fmt % args + "\n")

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            try:
                self.end_headers()
                self.wfile.write(data)
            except ConnectionError:  # the client gave up (its timeout) while the reply was made: no one to tell
                self.close_connection = True

        def _stream(self, events: list[dict]) -> None:
            """Server-sent events, then [DONE]; the connection closes after them (their length is not said ahead)."""
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            with contextlib.suppress(ConnectionError):  # the client stopped reading mid-stream: no one to tell
                self.end_headers()
                for event in [*(json.dumps(e) for e in events), "[DONE]"]:
                    self.wfile.write(f"data: {event}\n\n".encode())

        def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
            self._send(status, {"error": {"message": message, "type": kind}})

        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if self.path.rstrip("/") in ("/health", "/v1/health"):
                self._send(200, {"status": "ok", "model": service.model_name})
            elif self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": service.model_name, "object": "model",
                                                              "owned_by": "astra"}]})
            else:
                self._error(404, f"no route GET {self.path}")

        def do_POST(self) -> None:  # noqa: N802
            try:
                length = content_length(self.headers)
            except ValueError as exc:  # (raised out of the handler, it dropped the connection without a reply)
                self.close_connection = True
                self._error(HTTPStatus.BAD_REQUEST, str(exc))
                return
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._error(404, f"no route POST {self.path} (the embedded server serves /v1/chat/completions)")
                return
            try:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise BadRequest("request body must be a JSON object")
                completion = service.complete(body)
                if body.get("stream"):
                    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                    self._stream(stream_events(completion, include_usage))
                else:
                    self._send(200, completion)
            except (json.JSONDecodeError, BadRequest, ValueError, TypeError) as exc:
                self._error(HTTPStatus.BAD_REQUEST, str(exc))
            except Exception as exc:  # noqa: BLE001 - report, keep serving
                self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}", "server_error")

    return Handler


def _stop_when_orphaned(httpd: HTTPServer, every_s: float = 1.0) -> None:
    """Shut the server down once its parent is gone (the process is re-parented): a stage killed hard, or a crash,
    would otherwise leave the model running, holding its memory, with nobody to ask it anything. (Polled:
    PR_SET_PDEATHSIG fires when the parent's forking thread ends, not the parent.)"""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        print("astra-core serve: the process that started it is gone; stopping", file=sys.stderr, flush=True)
        httpd.shutdown()

    threading.Thread(target=watch, daemon=True, name="astra-serve-parent-watch").start()


def serve(model: str | None = None, *, host: str = "127.0.0.1", port: int = 0, port_file: str | None = None,
          threads: int | None = None, max_batch: int = 8, prefix_cache_tokens: int = 16384,
          max_tokens_cap: int = 2048, exit_with_parent: bool = False, response_template: str | None = None) -> None:
    """Load the model and serve until interrupted. Writes the bound port to `port_file` once ready. With
    `exit_with_parent`, it also stops when the process that started it ends, even by SIGKILL. `response_template`:
    how replies are read (a response template file or a known format's name; default: the model's own)."""
    httpd = listen(host, port)  # a port in use is said before the model loads; requests wait in the backlog until then
    if exit_with_parent:
        _stop_when_orphaned(httpd)
    import torch

    if threads:
        torch.set_num_threads(threads)
    try:
        lm, tokenizer = load_model(model)
    except BaseException:
        httpd.server_close()
        raise
    try:
        chat = ModelChat(tokenizer, response_template=response_template,
                         generation_eos=getattr(lm.generation_config, "eos_token_id", None))
    except ValueError as exc:  # a template whose calls cannot be read, or no chat template at all
        httpd.server_close()
        raise ModelNotAvailable(f"{model or DEFAULT_MODEL_NAME}: {exc}") from exc
    name = DEFAULT_MODEL_NAME if model is None else Path(model).name
    service = ChatService(Generator(lm, tokenizer, max_batch=max_batch, stop_token_ids=chat.stop_ids,
                                    prefix_cache_tokens=prefix_cache_tokens), name,
                          max_tokens_cap=max_tokens_cap, chat=chat)
    httpd.RequestHandlerClass = make_handler(service)
    bound = httpd.server_address[1]
    if port_file:
        announce_port(port_file, bound)
    print(f"astra-core serve: {name} at {base_url(host, bound)}/v1", file=sys.stderr, flush=True)
    try:
        serve_until_stopped(httpd)
    finally:
        httpd.server_close()
