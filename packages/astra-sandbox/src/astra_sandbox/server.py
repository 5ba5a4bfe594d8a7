"""`astra-sandbox serve`: the SandboxFusion HTTP interface (POST /run_code) on a warm pool.

Standard library http.server: one thread per connection, each waits for a free worker.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler

from astra_core.http_server import content_length

from astra_sandbox.pool import SessionPool
from astra_sandbox.run_code import sandbox_error

MAX_BODY = 64 << 20


def make_handler(pool: SessionPool) -> type[BaseHTTPRequestHandler]:
    """The request handler of a server bound with `astra_core.http_server.listen`."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/") in ("/health", "/v1/ping", ""):
                self._send(200, {"ok": True, "workers": pool.workers_alive, "jail": pool.config.jail})
            else:
                self._send(404, {"error": f"no route GET {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != "/run_code":
                self._send(404, {"error": f"no route POST {self.path} (use /run_code)"})
                return
            try:
                length = content_length(self.headers)
            except ValueError as exc:
                self._send(400, sandbox_error(str(exc)))
                return
            if length > MAX_BODY:
                self._send(413, sandbox_error(f"request body over {MAX_BODY} bytes"))
                return
            body = self.rfile.read(length)
            if not body.strip():
                self._send(400, sandbox_error('the body is empty: POST a run_code request, {"code": ..., '
                                              '"language": "python"}'))
                return
            try:
                request = json.loads(body)
            except ValueError as exc:
                self._send(400, sandbox_error(f"the body is not JSON: {exc}"))
                return
            result = pool.run_code(request)
            self._send(200, result)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
            print(f"astra-sandbox serve: {self.address_string()} {format % args}", file=sys.stderr)

    return Handler
