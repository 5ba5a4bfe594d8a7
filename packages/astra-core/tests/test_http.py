"""The LLM client's HTTP/1.1 transport against a real loopback TCP server that answers with scripted bytes."""

import asyncio
import gzip

import pytest
from astra_core.llm.http import HTTPClient, ProtocolError


class Closing(bytes):
    """A scripted reply after which the server closes the connection."""


class Scripted:
    """Answers each request it reads with the next scripted reply (bytes, or None: close without one)."""

    def __init__(self, replies: list[bytes | None]):
        self.replies = list(replies)
        self.requests: list[bytes] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)
                self.requests.append(head + await reader.readexactly(length))
                reply = self.replies.pop(0)
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
                if isinstance(reply, Closing):
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()


async def exchange(replies: list[bytes | None], requests: int, timeout: float = 5.0):
    """Send `requests` POSTs one after another; the responses (or the exception) and the server."""
    server = Scripted(replies)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    client = HTTPClient(f"http://127.0.0.1:{port}/v1", {"Authorization": "Bearer k"})
    try:
        results = [await client.request("POST", "chat/completions", b'{"a": 1}', timeout) for _ in range(requests)]
    finally:
        await client.close()
        listener.close()
    return results, server


def reply(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 {status}\r\n{head}".encode() + b"\r\n" + body


def test_sends_the_request_line_headers_and_body_and_keeps_the_connection():
    ok = reply(b'{"x": 1}', "Content-Length: 8")
    responses, server = asyncio.run(exchange([ok, ok], 2))
    assert [r.body for r in responses] == [b'{"x": 1}'] * 2 and responses[0].status == 200
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"Authorization: Bearer k\r\n" in first and b"Content-Length: 8\r\n" in first
    assert first.endswith(b'\r\n\r\n{"a": 1}')


def test_reads_chunked_bodies_with_trailers_and_interim_replies():
    chunked = (b"HTTP/1.1 100 Continue\r\n\r\n"
               + reply(b"4\r\n{\"x\"\r\n5;ext=1\r\n: 12}\r\n0\r\nX-Trailer: t\r\n\r\n", "Transfer-Encoding: chunked"))
    responses, server = asyncio.run(exchange([chunked, reply(b"0\r\n\r\n", "Transfer-Encoding: chunked")], 2))
    assert [r.body for r in responses] == [b'{"x": 12}', b""]
    assert server.connections == 1


def test_decodes_gzip_and_reads_to_the_end_without_a_length():
    packed = gzip.compress(b'{"big": true}')
    gz = reply(packed, f"Content-Length: {len(packed)}", "Content-Encoding: gzip")
    to_end = Closing(b'HTTP/1.0 200 OK\r\n\r\n{"end": 1}')
    responses, server = asyncio.run(exchange([gz, to_end], 2))
    assert [r.body for r in responses] == [b'{"big": true}', b'{"end": 1}']
    assert not responses[1].keep_alive


def test_a_connection_the_server_closes_is_not_reused():
    close = reply(b"{}", "Content-Length: 2", "Connection: close")
    responses, server = asyncio.run(exchange([close, reply(b"[]", "Content-Length: 2")], 2))
    assert [r.body for r in responses] == [b"{}", b"[]"]
    assert server.connections == 2


def test_a_kept_alive_connection_closed_before_reading_is_replaced_without_an_error():
    # the server answers once, then drops the idle connection (None), as servers do after their keep-alive time
    async def run():
        server = Scripted([reply(b"1", "Content-Length: 1")])
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        client = HTTPClient(f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/")
        first = await client.request("GET", "models", None, 5)
        await asyncio.sleep(0.05)  # the server has closed it by now
        server.replies.append(reply(b"2", "Content-Length: 1"))
        second = await client.request("GET", "models", None, 5)
        await client.close()
        listener.close()
        return first.body, second.body, server.connections

    assert asyncio.run(run()) == (b"1", b"2", 2)


def test_a_reply_cut_off_mid_body_is_a_connection_error():
    cut = reply(b'{"x"', "Content-Length: 100")

    async def run():
        server = Scripted([cut])
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        client = HTTPClient(f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/")
        try:
            await client.request("POST", "x", b"{}", 5)
        finally:
            listener.close()

    with pytest.raises(ConnectionError):
        asyncio.run(run())


def test_garbage_instead_of_http_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="not an HTTP/1.x reply"):
        asyncio.run(exchange([b"SSH-2.0-OpenSSH\r\n\r\n"], 1))


def test_a_slow_reply_times_out_and_its_connection_is_dropped():
    async def run():
        async def slow(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            await asyncio.sleep(0.5)
            writer.write(reply(b"late", "Content-Length: 4"))
            await writer.drain()
            writer.close()

        listener = await asyncio.start_server(slow, "127.0.0.1", 0)
        client = HTTPClient(f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/")
        try:
            with pytest.raises(TimeoutError):
                await client.request("GET", "models", None, 0.1)
            assert client._idle == []
        finally:
            listener.close()

    asyncio.run(run())
