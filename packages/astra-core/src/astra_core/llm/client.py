"""An async client for any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, llama.cpp, OpenAI).

- bounded concurrency (a semaphore per client),
- retries with exponential backoff and jitter on timeouts, connection errors, 429 and 5xx
  (Retry-After honoured),
- JSON-schema structured output where the endpoint supports it, else prompt + parse + retry,
- an optional on-disk cache keyed by the full request,
- token usage accounting.

With no base URL configured (flag or ASTRA_LLM_BASE_URL) the embedded local model server is
started on 127.0.0.1 (needs the `local` extra).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import aiohttp

from astra_core.llm.cache import ResponseCache
from astra_core.llm.jsontext import extract_json
from astra_core.open_files import TooFewOpenFiles, limits, make_room, out_of_descriptors
from astra_core.proxies import is_loopback

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


JSON_BODY = {"Content-Type": "application/json"}


class LLMError(RuntimeError):
    """The endpoint failed for good (after retries) or refused the request."""

    def __init__(self, message: str, status: int | None = None, body: str | None = None):
        super().__init__(message)
        self.status = status
        self.body = body


class LLMUnavailable(LLMError):
    """There is no model to ask: no endpoint configured and the embedded model cannot start, the endpoint does
    not answer (no connection after every retry, or it refuses the API key), or this process cannot hold the
    connections asked for (its open-file limit). A stage stops: records it would reject now would be skipped by
    --resume."""


class EndpointNotFound(LLMUnavailable):
    """HTTP 404: the base URL has no such route (often: it lacks /v1), or the endpoint has no such model."""


class StructuredOutputError(LLMError):
    """No reply parsed as JSON matching the schema within the allowed attempts."""

    def __init__(self, message: str, last_reply: str | None):
        super().__init__(message)
        self.last_reply = last_reply


@dataclass
class LLMConfig:
    """Where and how to reach the model. Flags override env vars, which override defaults."""

    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1; None: start the embedded local server
    model: str | None = None  # None: the first model the endpoint lists
    api_key: str | None = None
    timeout: float = 300.0  # seconds per request
    max_retries: int = 5
    backoff: float = 0.5  # first retry delay in seconds, doubled per retry, with full jitter
    max_backoff: float = 30.0
    concurrency: int = 8  # requests in flight per client
    cache_dir: str | None = None  # on-disk response cache; None: no cache
    temperature: float | None = None  # request defaults; None leaves the endpoint's default
    max_tokens: int | None = None
    seed: int | None = None

    ENV = {"base_url": "ASTRA_LLM_BASE_URL", "model": "ASTRA_LLM_MODEL", "api_key": "ASTRA_LLM_API_KEY",
           "cache_dir": "ASTRA_LLM_CACHE_DIR"}

    @classmethod
    def from_env(cls, **overrides: Any) -> LLMConfig:
        values: dict[str, Any] = {name: os.environ.get(env) or None for name, env in cls.ENV.items()}
        known = {f.name for f in fields(cls)}
        values.update({k: v for k, v in overrides.items() if v is not None and k in known})
        return cls(**values)


@dataclass
class Usage:
    requests: int = 0
    cached: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, usage: Any) -> None:
        """Count a reply's `usage` (a count the endpoint leaves out, or sends as no whole number, is not counted)."""
        if isinstance(usage, dict):
            self.prompt_tokens += _count(usage.get("prompt_tokens"))
            self.completion_tokens += _count(usage.get("completion_tokens"))

    def __str__(self) -> str:
        return (f"{self.requests} requests ({self.cached} cached, {self.retries} retries), "
                f"{self.prompt_tokens:,} prompt + {self.completion_tokens:,} completion tokens")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass
class ChatResponse:
    message: dict  # the first choice's message: role, content, tool_calls?
    choices: list[dict]
    usage: dict
    raw: dict = field(repr=False)

    @property
    def content(self) -> str:
        return self.message.get("content") or ""

    @property
    def tool_calls(self) -> list[dict]:
        return self.message.get("tool_calls") or []

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].get("finish_reason") if self.choices else None


OPENAI_FUNCTION_FIELDS = ("name", "description", "parameters", "strict")


def openai_tools(tools: list[dict], *, strip: bool = True) -> list[dict]:
    """Tools in the OpenAI request form. `strip` (the default) keeps only the fields the OpenAI API
    defines, dropping our `output_schema` and other extras; `strip=False` sends every function field
    as given (a benchmark whose own harness sends more, e.g. BFCL's `response` return schema)."""
    return [{"type": "function", "function": {k: v for k, v in t["function"].items()
                                               if not strip or k in OPENAI_FUNCTION_FIELDS}}
            for t in tools]


def has_null_content(messages: list[dict]) -> bool:
    """An assistant message with tool calls and `"content": null` (the OpenAI API's form of a call without text)."""
    return any(m.get("content", "") is None and m.get("tool_calls") for m in messages)


def null_content_as_text(messages: list[dict]) -> list[dict]:
    """The messages with such a null content as "" (the caller's list unchanged)."""
    return [{**m, "content": ""} if m.get("content", "") is None and m.get("tool_calls") else m for m in messages]


def refuses_null_content(status: int | None, reply: str, request: dict | None) -> bool:
    """The endpoint refused a request holding a null content beside tool calls, naming the field.

    The OpenAI API and vLLM take the null, and benchmark harnesses send it (BFCL's does), so it is sent as given.
    Other servers refuse it: llama-cpp-python's (HTTP 500; without the key its own template fails), and llama.cpp's
    and SGLang's have (ggml-org/llama.cpp#13471, sgl-project/sglang#4236). For them the client sends "", which
    every template in TRL's wheel renders as no text."""
    return (status is not None and status >= 400 and "content" in reply and request is not None
            and has_null_content(request.get("messages") or []))


def _checked_choices(raw: Any) -> list[dict]:
    """The choices of a chat reply, each with a `message` whose content is text or null and whose tool calls are a
    list of calls with a `function` object naming it. A server whose reply has another shape is an LLMError saying
    which field (the record is rejected with it, not with a TypeError of whichever consumer read it first). Two forms
    of other servers are read as the OpenAI API's: content as a list of parts (Mistral's API) is their text joined;
    tool-call arguments sent as an object, or none, are that object's JSON text (every consumer parses a string).
    A call's id is left as sent: a conversation numbers calls without one (rollouts by turn, reproducibly)."""
    if not isinstance(raw, dict):
        raise LLMError(f"the endpoint's reply is not a JSON object: {_excerpt(raw)}")
    choices = raw.get("choices")
    if not choices:
        raise LLMError(f"endpoint returned no choices: {_excerpt(raw)}")
    if not isinstance(choices, list):
        raise LLMError(f"the endpoint's reply has `choices` that is not a list: {_excerpt(raw)}")
    for index, choice in enumerate(choices):
        where = f"the endpoint's reply has choices[{index}]"
        if not isinstance(choice, dict):
            raise LLMError(f"{where} that is not an object: {_excerpt(choice)}")
        message = choice.get("message")
        if message is None:  # (a choice without a message is an empty reply)
            message = choice["message"] = {}
        if not isinstance(message, dict):
            raise LLMError(f"{where}.message that is not an object: {_excerpt(message)}")
        message["content"] = _content_text(message.get("content"), f"{where}.message.content")
        calls = message.get("tool_calls")
        if calls is not None and not (isinstance(calls, list) and all(
                isinstance(call, dict) and isinstance(call.get("function"), dict)
                and isinstance(call["function"].get("name"), str) for call in calls)):
            raise LLMError(f"{where}.message.tool_calls that is not a list of calls with a `function` object naming "
                           f"it: {_excerpt(calls)}")
        for call in calls or []:
            arguments = call["function"].get("arguments")
            if not isinstance(arguments, str):
                call["function"]["arguments"] = "{}" if arguments is None else orjson.dumps(arguments).decode()
    return choices


def _content_text(content: Any, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        return "".join(part["text"] for part in content if isinstance(part.get("text"), str))
    raise LLMError(f"{where} that is neither text nor a list of parts: {_excerpt(content)}")


def _excerpt(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()[:300]


def refuses_a_field(status: int | None, reply: str, request: dict | None) -> bool:
    """An error reply refusing a field the request holds: no passing fault, so not retried."""
    return (request is not None and "response_format" in request and refuses_response_format(status, reply)) \
        or refuses_null_content(status, reply, request)


def refuses_response_format(status: int | None, body: str) -> bool:
    """The endpoint refused the request's `response_format` (it cannot constrain replies to a JSON schema): an
    HTTP error naming the field. Most servers answer 400 or 422; llama-cpp-python's server answers 500 (its request
    validation error), which is no passing fault: asking again is pointless, asking without the field works."""
    return status is not None and status >= 400 and "response_format" in body


def _known_limit(request: dict | None, status: int | None, reply: str) -> str:
    """What a server error that says nothing may mean: a server known to fail that way on a field of the request."""
    if request is None or request.get("tool_choice") != "required" or status != 500:
        return ""
    try:
        message = orjson.loads(reply).get("error", {}).get("message", "") if reply.strip() else ""
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    if message.strip():
        return ""
    return ('. The request asks for tool_choice "required", and the error says nothing: llama-cpp-python\'s server '
            'fails so on it (it takes only "auto" or a named function). Serve the model with vLLM or SGLang, or '
            'run without requiring a tool call')


NEXT_STRUCTURED_FORM = {"json_schema": "json_object", "json_object": None}


def _response_format(form: str, name: str, schema: dict) -> dict:
    if form == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
    return {"type": "json_object", "schema": schema}


def _retry_after(headers) -> float | None:
    try:
        return float(headers["retry-after"])
    except (KeyError, ValueError):
        return None


_validators: dict[bytes, tuple] = {}
_validators_by_id: dict[int, tuple[dict, tuple]] = {}  # the same schema object asked with again: no re-encoding


def _validators_of(schema: dict) -> tuple:
    """(fast jsonschema-rs validator, jsonschema validator that explains), built once per distinct schema (a
    stage asks with the same few schemas, which are not changed once asked with)."""
    held = _validators_by_id.get(id(schema))
    if held is not None and held[0] is schema:
        return held[1]
    key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    pair = _validators.get(key)
    if pair is None:
        import jsonschema_rs
        from jsonschema import Draft202012Validator

        try:
            fast = jsonschema_rs.validator_for(schema)
        except Exception:  # noqa: BLE001 - a schema jsonschema-rs refuses is still checked, slowly
            fast = None
        pair = _validators[key] = (fast, Draft202012Validator(schema))
    if len(_validators_by_id) >= 1024:  # schemas built per request would otherwise pile up
        _validators_by_id.clear()
    _validators_by_id[id(schema)] = (schema, pair)
    return pair


class LLMClient:
    """Use as `async with LLMClient(LLMConfig.from_env()) as llm: reply = await llm.chat(messages)`."""

    def __init__(self, config: LLMConfig | None = None):
        self.config = config or LLMConfig.from_env()
        self.usage = Usage()
        self._http: aiohttp.ClientSession | None = None  # opened on first use (importing aiohttp costs 0.2 s)
        self._base = ""
        self._semaphore = asyncio.Semaphore(self.config.concurrency)
        self._cache = ResponseCache(self.config.cache_dir) if self.config.cache_dir else None
        self._structured_form: str | None = "json_schema"  # how replies are constrained (see _chat_structured)
        self._null_content_as_text = False  # the endpoint refused a null content beside tool calls
        self._model: str | None = self.config.model
        self._endpoint_lock = asyncio.Lock()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._cache is not None:
            self._cache.close()
            self._cache = None

    # -- endpoint -------------------------------------------------------------------------------
    async def _client(self) -> aiohttp.ClientSession:
        if self._http is not None:  # (every request after the first: no lock to take)
            return self._http
        import aiohttp

        async with self._endpoint_lock:
            if self._http is None:
                try:  # (before the embedded model starts: it inherits the room for the connections it serves)
                    make_room(self.config.concurrency)
                except TooFewOpenFiles as exc:
                    raise LLMUnavailable(str(exc)) from None
                base_url = self.config.base_url
                if not base_url:
                    from astra_core.embedded import EmbeddedServerError, embedded_base_url

                    try:
                        base_url = await asyncio.to_thread(embedded_base_url)
                    except EmbeddedServerError as exc:  # one line for the user, not a traceback
                        raise LLMUnavailable(str(exc)) from None
                    self.config.base_url = base_url
                self._base = base_url.rstrip("/") + "/"
                headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
                # One pooled connection per request in flight: no connection churn at high concurrency.
                connector = aiohttp.TCPConnector(limit=self.config.concurrency, limit_per_host=self.config.concurrency)
                self._http = aiohttp.ClientSession(headers=headers, connector=connector,
                                                   timeout=aiohttp.ClientTimeout(total=self.config.timeout),
                                                   trust_env=not is_loopback(self._base))
            return self._http

    def _route_hint(self) -> str:
        if self._base.rstrip("/").endswith("/v1"):
            return ""
        return f" (OpenAI-compatible servers such as vLLM serve under /v1: is the base URL {self._base}v1?)"

    @property
    def model_name(self) -> str | None:
        """The model requests use, once known (configured, or learned on the first request)."""
        return self._model

    async def model(self) -> str:
        """The model name requests use: configured, or the first one the endpoint lists."""
        if self._model is None:
            http = await self._client()
            async with self._semaphore:
                listing = await self._send_with_retries(http, "GET", "models", None)
            models = listing.get("data") if isinstance(listing, dict) else None
            first = models[0] if isinstance(models, list) and models else None
            if not isinstance(first, dict) or not isinstance(first.get("id"), str):
                raise LLMError(f"{self.config.base_url}/models lists no model ({_excerpt(listing)}); set "
                               f"ASTRA_LLM_MODEL")
            self._model = first["id"]
        return self._model

    async def check(self) -> str:
        """The model name requests use, once the endpoint has answered (even with a model configured): a wrong URL,
        a server not started or a refused API key is an LLMUnavailable before any work starts."""
        if self._model is None:
            return await self.model()
        http = await self._client()
        async with self._semaphore:
            try:
                await self._send_with_retries(http, "GET", "models", None)
            except EndpointNotFound:
                pass  # an endpoint without /models: an answer all the same
            except LLMError as exc:
                if isinstance(exc, LLMUnavailable):
                    raise
                # any other error is an answer all the same
        return self._model

    async def _request(self, method: str, path: str, body: dict, check: Callable[[Any], Any]) -> tuple[dict, Any]:
        """(the endpoint's reply, what `check` read from it). `check` raises LLMError on a reply of the wrong shape:
        only a reply it passed is cached."""
        http = await self._client()
        key = None
        if self._cache is not None:
            key = ResponseCache.key(self._base + path, body)
            hit = self._cache.get(key)
            if hit is not None:
                self.usage.requests += 1
                self.usage.cached += 1
                return hit, check(hit)
        async with self._semaphore:
            reply = await self._send_with_retries(http, method, path, body)
        self.usage.requests += 1
        self.usage.add(reply.get("usage") if isinstance(reply, dict) else None)
        checked = check(reply)
        if key is not None:
            self._cache.put(key, reply)
        return reply, checked

    async def _send_with_retries(self, http: aiohttp.ClientSession, method: str, path: str, body: dict | None) -> dict:
        import aiohttp

        cfg = self.config
        payload = None if body is None else orjson.dumps(body)  # bytes as sent: encoded once, not per attempt
        for attempt in range(cfg.max_retries + 1):
            wait = None
            unreachable = False  # no connection at all (a timeout is an answer too slow, not none)
            no_descriptor = False  # this process's open-file limit, not the endpoint
            status, text = None, ""
            try:
                async with http.request(method, self._base + path, data=payload,
                                        headers=JSON_BODY if payload is not None else None) as response:
                    status, data, headers = response.status, await response.read(), response.headers
            except (TimeoutError, aiohttp.ClientError) as exc:
                failure = f"{type(exc).__name__}: {exc}"
                unreachable = isinstance(exc, aiohttp.ClientConnectionError) and not isinstance(exc, TimeoutError)
                no_descriptor = out_of_descriptors(exc)
            else:
                if status < 400:
                    try:
                        return orjson.loads(data)  # JSON is UTF-8 (RFC 8259); no text decoded on the way
                    except orjson.JSONDecodeError as exc:
                        text = data.decode("utf-8", "replace")
                        raise LLMError(f"{method} {path}: the endpoint's reply is not JSON ({exc}): {text[:300]}",
                                       status, text) from None
                text = data.decode("utf-8", "replace")
                failure = f"HTTP {status}: {text[:500]}"
                if status in (401, 403):  # the key (or the account) is refused: no request can succeed
                    raise LLMUnavailable(f"{self._base}{path}: the endpoint refuses the request: {failure}", status, text)
                if status == 404:  # no such route or model: no request can succeed (rejecting each record would lose it)
                    raise EndpointNotFound(f"{self._base}{path}: the endpoint has no such route or model: {failure}"
                                           f"{self._route_hint()}", status, text)
                if status not in RETRY_STATUS or refuses_a_field(status, text, body):
                    raise LLMError(f"{method} {path} failed: {failure}", status, text)
                wait = _retry_after(headers)
            if attempt == cfg.max_retries:
                if no_descriptor:
                    raise LLMUnavailable(f"{self._base}{path}: this process has no file descriptor left for a "
                                         f"connection (ulimit -n: {limits()[0]}; lower the concurrency or raise the "
                                         f"limit): {failure} (after {cfg.max_retries} retries)")
                if unreachable:
                    raise LLMUnavailable(f"{self._base}{path}: the endpoint does not answer ({failure}) after "
                                         f"{cfg.max_retries} retries")
                raise LLMError(f"{method} {path} failed after {cfg.max_retries} retries: {failure}"
                               f"{_known_limit(body, status, text)}")
            self.usage.retries += 1
            if wait is None:
                wait = random.uniform(0, min(cfg.max_backoff, cfg.backoff * 2**attempt))
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    # -- chat -----------------------------------------------------------------------------------
    async def chat(self, messages: list[dict], *, tools: list[dict] | None = None, strip_tools: bool = True,
                   **params: Any) -> ChatResponse:
        """One chat completion. `params` are passed through (temperature, max_tokens, seed, n, stop, ...);
        `strip_tools=False` sends the tools' functions with every field given (see `openai_tools`)."""
        if self._null_content_as_text and has_null_content(messages):
            messages = null_content_as_text(messages)
        body: dict[str, Any] = {"model": await self.model(), "messages": messages}
        for name in ("temperature", "max_tokens", "seed"):
            default = getattr(self.config, name)
            if default is not None:
                body[name] = default
        if tools:
            body["tools"] = openai_tools(tools, strip=strip_tools)
        body.update({k: v for k, v in params.items() if v is not None})
        try:
            raw, choices = await self._request("POST", "chat/completions", body, _checked_choices)
        except LLMError as exc:
            if not refuses_null_content(exc.status, exc.body or "", body):
                raise
            self._null_content_as_text = True  # this endpoint takes "" only, from now on
            raw, choices = await self._request("POST", "chat/completions",
                                               {**body, "messages": null_content_as_text(messages)}, _checked_choices)
        usage = raw.get("usage")
        return ChatResponse(message=choices[0]["message"], choices=choices,
                            usage=usage if isinstance(usage, dict) else {}, raw=raw)

    async def chat_json(self, messages: list[dict], schema: dict, *, name: str = "reply", attempts: int = 3,
                        **params: Any) -> tuple[Any, ChatResponse]:
        """A reply parsed as JSON and valid against `schema`.

        Uses the endpoint's json_schema response format when it accepts one; otherwise (or when
        the reply still does not parse) the error is shown to the model and it tries again, up
        to `attempts` replies. Raises StructuredOutputError with the last reply text.
        """
        fast, validator = _validators_of(schema)
        conversation = list(messages)
        last_text: str | None = None
        problem = ""
        for _ in range(attempts):
            reply = await self._chat_structured(conversation, schema, name, **params)
            last_text = reply.content
            try:
                value = extract_json(last_text)
                if fast is not None and fast.is_valid(value):
                    return value, reply
                errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
                if not errors:
                    return value, reply
                problem = "; ".join(f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
                                    for e in errors[:5])
            except ValueError as exc:
                problem = str(exc)
            conversation = [*conversation, {"role": "assistant", "content": last_text},
                            {"role": "user", "content": f"That reply is not valid: {problem}. Reply again with only a "
                                                        f"JSON value matching this schema:\n{orjson.dumps(schema).decode()}"}]
        raise StructuredOutputError(f"no valid JSON reply after {attempts} attempts: {problem}", last_text)

    async def _chat_structured(self, messages: list[dict], schema: dict, name: str, **params: Any) -> ChatResponse:
        """Ask with the first response_format the endpoint takes: the OpenAI API's json_schema; else json_object with
        a `schema` (llama-cpp-python's server, which refuses json_schema, constrains its replies with it); else none
        (the reply is parsed and checked, see chat_json)."""
        while (form := self._structured_form) is not None:
            try:
                return await self.chat(messages, response_format=_response_format(form, name, schema), **params)
            except LLMError as exc:
                if not refuses_response_format(exc.status, exc.body or ""):
                    raise
                if self._structured_form == form:  # (requests in flight refused alike move it on once)
                    self._structured_form = NEXT_STRUCTURED_FORM[form]
        return await self.chat(messages, **params)

    # -- embeddings -----------------------------------------------------------------------------
    async def embed(self, texts: list[str], *, model: str | None = None, batch_size: int = 256) -> list[list[float]]:
        """Embeddings from the endpoint's /embeddings, in input order."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), batch_size):
            body = {"model": model or await self.model(), "input": texts[start:start + batch_size]}
            check = functools.partial(_checked_embeddings, asked=len(body["input"]))
            _, batch = await self._request("POST", "embeddings", body, check)
            vectors.extend(batch)
        return vectors


def _checked_embeddings(raw: Any, asked: int) -> list[list[float]]:
    """The vectors of an embeddings reply in input order: exactly one per input, every `index` from 0 once (or, in a
    reply without indexes, in the order sent), all of one length. Anything else is an LLMError: a vector missing or
    out of place would give another text's embedding to every text after it."""
    data = raw.get("data") if isinstance(raw, dict) else None
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise LLMError(f"the endpoint's embeddings reply has no `data` list of objects: {_excerpt(raw)}")
    if len(data) != asked:
        raise LLMError(f"the endpoint sent {len(data)} embeddings for {asked} inputs")
    indexes = [item.get("index") for item in data]
    if all(index is None for index in indexes):
        indexes = list(range(asked))
    whole = all(isinstance(index, int) and not isinstance(index, bool) for index in indexes)
    if not whole or sorted(indexes) != list(range(asked)):
        raise LLMError(f"the endpoint's embeddings have indexes {_excerpt(indexes)}, not each of 0..{asked - 1} once")
    vectors: list = [None] * asked
    for index, item in zip(indexes, data, strict=True):
        vectors[index] = item.get("embedding")
    lengths = {len(v) if isinstance(v, list) and all(_is_number(x) for x in v) else -1 for v in vectors}
    if -1 in lengths or len(lengths) != 1 or 0 in lengths:
        raise LLMError("the endpoint's embeddings are not lists of numbers of one length (an `encoding_format` "
                       "other than float?)")
    return vectors


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
