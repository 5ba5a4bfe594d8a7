"""`astra-core view --serve`: the report page on 127.0.0.1, its records fetched page by page.

Only the summaries (the index) are kept in memory, with each line's place in its file; a record is read
from disk when its detail view asks for it. Standard input is first copied to a temporary file.

    GET /                               the page
    GET /api/entries?offset=0&limit=N   {"total", "offset", "entries": [summary, ...]}
    GET /api/entry?i=K                  one entry, record included
"""

from __future__ import annotations

import os
import tempfile
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import IO
from urllib.parse import parse_qs, urlsplit

import orjson

from astra_core.http_server import HTTPServer, listen
from astra_core.jsonl import is_compressed, numbered_lines, source_name
from astra_core.view import RawLine, entry_of, iter_lines, summary
from astra_core.view.report import page

MAX_PAGE = 5000


class Index:
    """Summaries of every line of `paths` and where each line is, to read its record on demand."""

    def __init__(self, paths: list[str], stdin: IO[bytes] | None = None):
        self._spool: tempfile.TemporaryDirectory | None = None  # made for the first input that needs copying
        self._real: dict[str, str] = {}  # displayed file name -> file to read
        self.summaries: list[dict] = []
        self._places: list[tuple[str, int, int]] = []  # (displayed file name, line number, byte offset)
        for path in paths:
            # lines are found again by offset: stdin, a pipe (`<(zcat ...)`) and a compressed file are read from a
            # spooled plain copy
            seekable = path != "-" and os.path.isfile(path) and not is_compressed(path)
            real = path if seekable else self._spooled(path, stdin)
            self._real[source_name(path)] = real
            for line in iter_lines([real]):
                shown = RawLine(source_name(path), line.line, line.offset, line.raw)
                self.summaries.append(summary(entry_of(shown, len(self.summaries))))
                self._places.append((shown.file, line.line, line.offset))

    def _spooled(self, path: str, stdin: IO[bytes] | None) -> str:
        if self._spool is None:
            self._spool = tempfile.TemporaryDirectory(prefix="astra-view-")
        target = Path(self._spool.name) / f"{len(self._real)}.jsonl"
        with open(target, "wb") as out:
            for _, line in numbered_lines(path, stdin):
                out.write(line)
        return str(target)

    def entry(self, index: int) -> dict:
        file, lineno, offset = self._places[index]
        with open(self._real[file], "rb") as handle:
            handle.seek(offset)
            raw = handle.readline()
        return entry_of(RawLine(file, lineno, offset, raw), index)

    def close(self) -> None:
        if self._spool is not None:
            self._spool.cleanup()


def _handler(index: Index, html: bytes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            url = urlsplit(self.path)
            query = {key: values[-1] for key, values in parse_qs(url.query).items()}
            try:
                if url.path in ("/", "/index.html"):
                    self._send(html, "text/html; charset=utf-8")
                elif url.path == "/api/entries":
                    offset, limit = int(query.get("offset", 0)), min(int(query.get("limit", 1000)), MAX_PAGE)
                    self._json({"total": len(index.summaries), "offset": offset,
                                "entries": index.summaries[offset:offset + limit]})
                elif url.path == "/api/entry":
                    self._json(index.entry(int(query["i"])))
                else:
                    self.send_error(HTTPStatus.NOT_FOUND)
            except (KeyError, ValueError, IndexError) as exc:
                self.send_error(HTTPStatus.BAD_REQUEST, str(exc))

        def _json(self, value: object) -> None:
            self._send(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS), "application/json")

        def _send(self, body: bytes, content_type: str) -> None:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet: the terminal is the user's
            pass

    return Handler


def make_server(index: Index, port: int = 0, title: str = "ASTRA records") -> HTTPServer:
    """A server on 127.0.0.1:`port` (0 picks a free one: see server.server_address); call serve_forever().
    CannotListen (one line) when the port cannot be bound."""
    html = page({"mode": "serve", "total": len(index.summaries)}, title).encode()
    return listen("127.0.0.1", port, _handler(index, html))
