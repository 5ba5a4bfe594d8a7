"""Talking to deployed MCP servers with the `mcp` SDK: stdio (a command) or streamable HTTP (a URL).

`McpConnection` owns one client session in a background task (the SDK's transports are anyio
context managers that must be entered and exited in the same task), so calls can come from any
task of the event loop: the concurrent records of a stage, parallel tool calls of one turn.

Servers started over stdio inherit this process's environment (PATH, proxy and certificate
settings) plus the transport's `env`; their stderr goes to ours unless `errlog` says otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp import Client

# The `mcp` SDK takes about a second to import: it is imported where a server is first reached, so that
# the commands that never talk to one start fast.
MCP_TIMEOUT_S, MCP_STREAM_READ_TIMEOUT_S = 30.0, 300.0  # the SDK's defaults for its own HTTP client


class McpUnavailable(RuntimeError):
    """The server could not be started or reached."""


@dataclass
class CallOutcome:
    """What one tool call returned, as the agent sees it (`content`) and as bookkeeping."""

    ok: bool
    content: str  # the observation text; "Error: ..." when the call failed
    kind: str  # ok | error | timeout | unreachable
    duration_s: float
    structured: Any = None


def _http_client(url: str, headers: dict[str, str] | None):
    """The HTTP client of a streamable-HTTP server (httpx2, the SDK's HTTP library), with its headers; a server on
    this machine is never asked through the environment's proxy (astra_core.proxies)."""
    import httpx2
    from astra_core.proxies import is_loopback

    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(MCP_TIMEOUT_S, read=MCP_STREAM_READ_TIMEOUT_S),
                              trust_env=not is_loopback(url))


def default_errlog() -> IO[str]:
    """Our stderr when it is a real file (a started server needs a file descriptor), else /dev/null."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process


def _transport(spec: dict, errlog: IO[str]):
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    kind = spec.get("kind")
    if kind == "stdio":
        env = {**os.environ, **(spec.get("env") or {})}
        params = StdioServerParameters(command=spec["command"], args=list(spec.get("args") or []), env=env,
                                       cwd=spec.get("cwd"))
        return stdio_client(params, errlog=errlog)
    if kind == "http":
        return streamable_http_client(spec["url"], http_client=_http_client(spec["url"], spec.get("headers") or None))
    raise McpUnavailable(f"transport kind {kind!r} is not a deployed MCP server")


def describe(spec: dict) -> str:
    if spec.get("kind") == "stdio":
        return " ".join([spec["command"], *spec.get("args", [])])
    return str(spec.get("url") or spec.get("kind"))


def result_text(result) -> str:
    """The text an agent sees for a CallToolResult: its text parts, else its structured content as JSON."""
    parts = [_item_text(item) for item in result.content or []]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _item_text(item) -> str:
    """One content item as text. An image, audio or binary resource is named with its type and size: its base64
    data is nothing a text model can read (it was 2,000 characters of it)."""
    kind = getattr(item, "type", None)
    if getattr(item, "text", None) is not None:
        return item.text
    if kind in ("image", "audio"):
        return f"[{kind}: {item.mime_type}, {_decoded_size(item.data):,} bytes]"
    if kind == "resource":
        resource = item.resource
        if getattr(resource, "text", None) is not None:
            return resource.text
        return f"[resource {resource.uri}: {resource.mime_type or 'binary'}, {_decoded_size(resource.blob):,} bytes]"
    if kind == "resource_link":
        return f"[resource link: {item.uri}" + (f" ({item.description})" if item.description else "") + "]"
    return json.dumps(item.model_dump(mode="json", exclude_none=True), ensure_ascii=False)[:2000]


def _decoded_size(base64_text: str) -> int:
    return len(base64_text.rstrip("=")) * 3 // 4


class McpConnection:
    """`async with McpConnection(transport) as server: await server.list_tools(); await server.call(name, args)`."""

    def __init__(self, transport: dict, *, timeout_s: float = 60.0, connect_timeout_s: float = 120.0,
                 errlog: IO[str] | None = None):
        self.transport = transport
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.errlog = errlog or default_errlog()
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._error: BaseException | None = None

    async def _own(self) -> None:
        try:
            from mcp import Client

            async with Client(_transport(self.transport, self.errlog)) as client:
                self._client = client
                self._ready.set()
                await self._closing.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to whoever waits on the connection
            self._error = exc
        finally:
            self._client = None
            self._ready.set()

    async def __aenter__(self) -> McpConnection:
        self._task = asyncio.create_task(self._own())
        try:
            await asyncio.wait_for(self._ready.wait(), self.connect_timeout_s)
        except TimeoutError:
            await self.aclose()
            raise McpUnavailable(
                f"{describe(self.transport)}: no MCP handshake within {self.connect_timeout_s:.0f}s") from None
        if self._client is None:
            raise McpUnavailable(f"{describe(self.transport)}: {_root_cause(self._error)}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closing.set()
        if self._task is not None:
            await asyncio.wait([self._task], timeout=30)
            self._task = None

    async def list_tools(self) -> list:
        """Every tool the server lists (all pages of tools/list)."""
        client = self._alive()
        tools, cursor = [], None
        while True:
            page = await asyncio.wait_for(client.list_tools(cursor=cursor), self.timeout_s)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call(self, name: str, arguments: dict) -> CallOutcome:
        started = time.monotonic()
        try:
            client = self._alive()
            result = await asyncio.wait_for(client.call_tool(name, arguments), self.timeout_s)
        except TimeoutError:
            return CallOutcome(False, f"Error: timeout: {name} did not answer within {self.timeout_s:.0f}s", "timeout",
                               time.monotonic() - started)
        except McpUnavailable as exc:
            return CallOutcome(False, f"Error: unreachable: {exc}", "unreachable", time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 - a failed call is an observation for the agent
            return CallOutcome(False, f"Error: {_root_cause(exc)}", "error", time.monotonic() - started)
        text = result_text(result)
        if result.is_error:
            body = text if text.startswith("Error") else f"Error: {text}"
            return CallOutcome(False, body, "error", time.monotonic() - started, result.structured_content)
        return CallOutcome(True, text, "ok", time.monotonic() - started, result.structured_content)

    def _alive(self) -> Client:
        if self._client is None:
            raise McpUnavailable(f"{describe(self.transport)}: connection closed"
                                 + (f" ({_root_cause(self._error)})" if self._error else ""))
        return self._client


def _root_cause(exc: BaseException | None) -> str:
    """The innermost meaningful message of an exception (group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if exc is None:
        return "unknown error"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def list_server_tools(transport: dict, *, timeout_s: float = 60.0, errlog: IO[str] | None = None) -> list:
    async with McpConnection(transport, timeout_s=timeout_s, errlog=errlog) as server:
        return await server.list_tools()


class ServerPool:
    """One live connection per server id, opened on first use and shared by every trajectory of a run."""

    def __init__(self, *, timeout_s: float = 60.0, errlog: IO[str] | None = None):
        self.timeout_s = timeout_s
        self.errlog = errlog
        self._connections: dict[str, McpConnection] = {}
        self._failures: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def get(self, server_id: str, transport: dict) -> McpConnection:
        async with self._lock:
            if server_id in self._failures:
                raise McpUnavailable(self._failures[server_id])
            if server_id not in self._connections:
                connection = McpConnection(transport, timeout_s=self.timeout_s, errlog=self.errlog)
                try:
                    await connection.__aenter__()
                except McpUnavailable as exc:
                    self._failures[server_id] = str(exc)
                    raise
                self._connections[server_id] = connection
            return self._connections[server_id]

    async def call(self, server_id: str, transport: dict, name: str, arguments: dict) -> CallOutcome:
        started = time.monotonic()
        try:
            connection = await self.get(server_id, transport)
        except McpUnavailable as exc:
            return CallOutcome(False, f"Error: unreachable: {exc}", "unreachable", time.monotonic() - started)
        return await connection.call(name, arguments)

    async def aclose(self) -> None:
        for connection in self._connections.values():
            await connection.aclose()
        self._connections.clear()
