"""The standard library's threading HTTP server, as the toolkit's local servers use it (the embedded model, the
sandbox's SandboxFusion interface, the recorded endpoint of tests), and how they announce the port they bound
(`--port-file`).

A stage or an RL trainer at --concurrency 64 opens its connections at once. The default listen backlog of 5
overflowed: connections were reset, or their SYNs retried seconds later (measured against the embedded server with
256 connections at once: 66 reset, the slowest answered after 258 s; with this backlog none, all within 0.3 s).
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HTTPServer(ThreadingHTTPServer):
    request_queue_size = 1024  # the kernel caps it at net.core.somaxconn (4096 on current kernels)
    daemon_threads = True  # a connection's thread does not hold the process's exit


class HTTPServerIPv6(HTTPServer):
    address_family = socket.AF_INET6


class CannotListen(OSError):
    """The server's address cannot be bound (a port in use, a host not on this machine)."""


def listen(host: str, port: int, handler: type[BaseHTTPRequestHandler] = BaseHTTPRequestHandler) -> HTTPServer:
    """A server bound to host:port (0 picks a free port), or CannotListen saying why in one line. Bind before
    the slow part of starting (a model, a pool), so that a port in use is said at once."""
    server_class = HTTPServerIPv6 if ":" in host else HTTPServer  # an IPv6 address (::1, ::)
    try:
        return server_class((host, port), handler)
    except OSError as exc:
        hint = " (--port 0 picks a free port)" if exc.errno == errno.EADDRINUSE else ""
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None


def serve_until_stopped(server: HTTPServer) -> None:
    """serve_forever() until Ctrl-C or SIGTERM (`kill`, systemd, a scheduler), which stop it alike: the caller's
    clean-up (its `finally` and `with` blocks) runs either way."""
    from astra_core.stage import stop_on_sigterm

    undo_sigterm = stop_on_sigterm()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        undo_sigterm()


def content_length(headers) -> int:
    """A request's body length, as its Content-Length header says (none: 0); ValueError saying so when the header is
    not a number of bytes (`int()` alone takes "-1", with which reading the body waits until the client hangs up)."""
    value = headers.get("Content-Length") or "0"
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"Content-Length {value!r} is not a number of bytes")
    return int(value)


def base_url(host: str, port: int) -> str:
    """http://host:port, an IPv6 address in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def announce_port(port_file: str, port: int) -> None:
    """Write the port to `port_file` atomically (whoever polls for the file never reads it empty), through a
    temporary file of this process's own: servers announcing themselves at once never share one."""
    directory = os.path.dirname(os.path.abspath(port_file))
    with tempfile.NamedTemporaryFile("w", dir=directory, prefix=".astra-port-", delete=False) as handle:
        handle.write(str(port))
    os.replace(handle.name, port_file)
