"""A lean HTTP/1.1 client for one JSON API: keep-alive connections, one request on each at a time.

The LLM client sends thousands of small requests with hundreds in flight; its CPU per request decides
how many records a stage gets through. aiohttp spent ~190 µs of CPU on each; this spends ~50 (what a
JSON API needs and nothing more: no cookies, redirects or proxies, which the client never used).
Responses are read by Content-Length, chunked, or to the end of the connection; gzip and deflate
bodies are decoded. Failures are OSErrors: ConnectionError (refused, reset, closed, malformed reply)
or TimeoutError.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 1 << 16


class ProtocolError(ConnectionError):
    """The server's reply is not HTTP/1.x we can read."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # names in lower case (a repeated header keeps its last value)
    body: bytes
    keep_alive: bool = True  # the connection can carry another request


class _Reader:
    """Parses one response out of the bytes of a connection as they arrive."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.status = 0
        self.headers: dict[str, str] | None = None
        self.length: int | None = None  # of the body; None: chunked or to the end of the connection
        self.chunked = False
        self.chunks = bytearray()
        self.keep_alive = True

    def feed(self, data: bytes) -> Response | None:
        self.buffer += data
        while self.headers is None:
            if not self._read_head():
                return None
        if self.chunked:
            return self._read_chunks()
        if self.length is not None and len(self.buffer) >= self.length:
            body = bytes(self.buffer[:self.length])
            del self.buffer[:self.length]
            return self._response(body)
        return None

    def end(self) -> Response | None:
        """The response when the connection ends: complete only if its body runs to the end."""
        if self.headers is not None and self.length is None and not self.chunked:
            self.keep_alive = False
            return self._response(bytes(self.buffer))
        return None

    def _response(self, body: bytes) -> Response:
        return Response(self.status, self.headers, body, self.keep_alive and not self.buffer)

    def _read_head(self) -> bool:
        """Reads a head if one is complete (False: it is not yet)."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise ProtocolError("the reply's header is too long")
            return False
        lines = self.buffer[:end].decode("latin-1").split("\r\n")
        del self.buffer[:end + 4]
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP/1.x reply: {lines[0][:100]!r}")
        status = int(parts[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if 100 <= status < 200:  # an interim reply: the real one follows
            return True
        self.status, self.headers = status, headers
        connection = headers.get("connection", "").lower()
        self.keep_alive = connection != "close" and (parts[0] != "HTTP/1.0" or connection == "keep-alive")
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if status in (204, 304):
            self.length = 0
        elif not self.chunked and "content-length" in headers:
            try:
                self.length = int(headers["content-length"])
            except ValueError:
                raise ProtocolError(f"bad Content-Length {headers['content-length']!r}") from None
        return True

    def _read_chunks(self) -> Response | None:
        while True:
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                return None
            try:
                size = int(self.buffer[:line_end].split(b";", 1)[0], 16)
            except ValueError:
                raise ProtocolError("bad chunk size in a chunked reply") from None
            if size == 0:  # the last chunk, then optional trailers and an empty line
                rest = line_end + 2
                if self.buffer[rest:rest + 2] == b"\r\n":
                    end = rest + 2
                else:
                    found = self.buffer.find(b"\r\n\r\n", rest)
                    if found < 0:
                        return None
                    end = found + 4
                del self.buffer[:end]
                return self._response(bytes(self.chunks))
            start = line_end + 2
            if len(self.buffer) < start + size + 2:
                return None
            self.chunks += self.buffer[start:start + size]
            del self.buffer[:start + size + 2]


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reader: _Reader | None = None
        self.waiter: asyncio.Future | None = None
        self.received = False  # any byte of the current reply

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():  # bytes nobody asked for: the connection cannot be trusted
            self.close()
            return
        self.received = True
        try:
            response = self.reader.feed(data)
        except ProtocolError as exc:
            waiter.set_exception(exc)
            self.close()
            return
        if response is not None:
            waiter.set_result(response)

    def eof_received(self) -> bool:
        return False  # close our side too: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        response = self.reader.end() if self.reader is not None else None
        if response is not None:
            waiter.set_result(response)
        else:
            waiter.set_exception(ConnectionResetError(f"the server closed the connection{f' ({exc})' if exc else ''}"))

    def send(self, data: bytes) -> asyncio.Future:
        self.reader = _Reader()
        self.received = False
        self.waiter = asyncio.get_running_loop().create_future()
        if self.closed or self.transport.is_closing():
            self.waiter.set_exception(ConnectionResetError("the connection is closed"))
        else:
            self.transport.write(data)
        return self.waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class HTTPClient:
    """Requests to one server (the scheme, host and port of `base_url`); paths are relative to its path."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None):
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/") + "/"
        self._ssl = ssl.create_default_context() if url.scheme == "https" else None
        host = f"[{self.host}]" if ":" in self.host else self.host
        default_port = self.port == (443 if url.scheme == "https" else 80)
        fixed = {"Host": host if default_port else f"{host}:{self.port}", "Accept": "application/json",
                 "Accept-Encoding": "gzip, deflate", "User-Agent": "astra-core", **(headers or {})}
        self._fixed = "".join(f"{name}: {value}\r\n" for name, value in fixed.items()).encode("latin-1")
        self._idle: list[_Connection] = []

    async def request(self, method: str, path: str, body: bytes | None, timeout: float) -> Response:
        """One request, its reply within `timeout` seconds (connecting included)."""
        head = f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._fixed
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        data = head + b"\r\n" + (body or b"")
        async with asyncio.timeout(timeout):
            while self._idle:
                connection = self._idle.pop()
                if connection.closed:
                    continue
                try:
                    return await self._exchange(connection, data)
                except ConnectionError:
                    if connection.received:
                        raise
                    # the server closed a kept-alive connection before reading the request: try a new one
            connection = await self._connect()
            return await self._exchange(connection, data)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(_Connection, self.host, self.port, ssl=self._ssl)
        return connection

    async def _exchange(self, connection: _Connection, data: bytes) -> Response:
        try:
            response = await connection.send(data)
        except BaseException:  # a timeout or cancellation mid-reply: the rest of it would confuse the next one
            connection.close()
            raise
        if connection.closed or not response.keep_alive:
            connection.close()
        else:
            self._idle.append(connection)
        encoding = response.headers.get("content-encoding", "identity").lower()
        if encoding in ("gzip", "deflate"):
            try:
                response.body = zlib.decompress(response.body, 47)  # 32 + 15: a zlib or gzip header
            except zlib.error as exc:
                raise ProtocolError(f"cannot decode the {encoding} reply: {exc}") from None
        return response

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
