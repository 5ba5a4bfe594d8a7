"""Reading and writing JSON Lines with errors that say file, line and what is wrong."""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson

from astra_core.schema import RecordError, kind_name, validate

_DUMP_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE


def dumps(record: dict) -> bytes:
    """One JSONL line (with its newline)."""
    return orjson.dumps(record, option=_DUMP_OPTIONS)


@dataclass
class Line:
    """A parsed input record and where it came from."""

    source: str
    lineno: int
    record: dict


class MalformedLine(RecordError):
    """A line that is not a JSON object, or a record that breaks the schema of its kind."""

    def __init__(self, message: str, *, source: str, lineno: int, text: bytes, record_id: str | None = None,
                 field: str | None = None):
        super().__init__(message, record_id=record_id, field=field, source=source, lineno=lineno)
        self.text = text


# Compressed inputs are recognised by their first bytes (stdin too), not by their name. The modules are imported
# when needed: a Python built without liblzma or libbz2 (a pyenv build can be) has no lzma or bz2 module.
_DECOMPRESSORS = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "lzma"}
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class UnreadableInput(RecordError):
    """Input whose bytes cannot be read as (possibly compressed) JSONL from line `lineno` on: bad input like a
    malformed line (a one-line error; a stage's --skip-bad rejects the rest of that file)."""

    def __init__(self, message: str, *, source: str, lineno: int):
        super().__init__(message, source=source, lineno=lineno)


def is_compressed(path: str) -> bool:
    """Whether a file's first bytes are those of a compressed stream we read (or refuse) as JSONL."""
    with open(path, "rb") as handle:
        head = handle.read(6)
    return head.startswith(_ZSTD_MAGIC) or any(head.startswith(magic) for magic in _DECOMPRESSORS)


def _decompressed(source: IO[bytes], name: str) -> IO[bytes]:
    """`source` itself, or the stream of its decompressed bytes when it is gzip, bzip2 or xz."""
    head = source.peek(6)[:6] if hasattr(source, "peek") else b""
    if head.startswith(_ZSTD_MAGIC):
        raise UnreadableInput("zstd-compressed; decompress it first (zstd -dc FILE | ... -)", source=name, lineno=1)
    for magic, module_name in _DECOMPRESSORS.items():
        if head.startswith(magic):
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                raise UnreadableInput(f"{module_name}-compressed, and this Python has no {module_name} module; "
                                      "decompress it first", source=name, lineno=1) from None
            return module.open(source, "rb")
    return source


def source_name(path: str) -> str:
    """How an input is named in messages and records: its path, or <stdin> for '-'."""
    return "<stdin>" if path == "-" else path


def numbered_lines(path: str, stdin: IO[bytes] | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every line of a file ('-': `stdin`, default the process's), decompressed on the
    fly when it is gzip, bzip2 or xz. Compressed data that breaks off is an UnreadableInput after the lines
    before it."""
    source = (stdin or sys.stdin.buffer) if path == "-" else open(path, "rb")  # noqa: SIM115 - closed below
    try:
        yield from numbered_lines_of(source, source_name(path))
    finally:
        if path != "-":
            source.close()


def numbered_lines_of(source: IO[bytes], name: str) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every line of an open binary file (buffered: its first bytes are peeked) that
    messages call `name`, decompressed as `numbered_lines` does."""
    lines = _decompressed(source, name)
    lineno = 0
    try:
        for lineno, line in enumerate(lines, start=1):  # noqa: B007 - lineno is read after a failed read
            yield lineno, line
    except Exception as exc:  # noqa: BLE001 - EOFError, OSError, zlib.error, lzma.LZMAError: data that breaks off
        if lines is source:
            raise
        raise UnreadableInput(f"the compressed data is broken after line {lineno} ({exc}); the lines before "
                              "it were read", source=name, lineno=lineno + 1) from None
    finally:
        if lines is not source:
            lines.close()


def iter_raw_lines(paths: Iterable[str], stdin: IO[bytes] | None = None) -> Iterator[tuple[str, int, bytes]]:
    """(source, line number, bytes) for every non-blank line of every input ('-' is `stdin`, default the
    process's), decompressed when gzip, bzip2 or xz."""
    for path in paths:
        name = source_name(path)
        for lineno, line in numbered_lines(path, stdin):
            if line.strip():
                yield name, lineno, line


def parse_line(source: str, lineno: int, raw: bytes, kind: str | dict | None = None) -> Line:
    """Parse one line as a record, validating it as `kind` when given; raise MalformedLine."""
    as_read = raw
    if lineno == 1 and raw.startswith(_BOM):
        raw = raw[3:]  # a byte-order mark some editors write
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedLine(f"invalid JSON: {exc}{not_jsonl_hint(as_read, error=exc, lineno=lineno)}", source=source,
                            lineno=lineno, text=raw) from None
    if not isinstance(record, dict):
        raise MalformedLine(f"expected a JSON object, got {type(record).__name__}"
                            f"{not_jsonl_hint(as_read, value=record)}", source=source, lineno=lineno, text=raw)
    _check_shared_fields(record, source, lineno, raw)
    if kind is not None:
        try:
            validate(record, kind)
        except RecordError as exc:
            raise MalformedLine(f"not a valid {kind_name(kind)}: {exc.message}", source=source, lineno=lineno, text=raw,
                                record_id=exc.record_id, field=exc.field) from None
    return Line(source, lineno, record)


_BOM = b"\xef\xbb\xbf"
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)  # a complete JSON string, escapes and all


def not_jsonl_hint(raw: bytes, *, error: ValueError | None = None, value: object = None, lineno: int = 1) -> str:
    """What a line that is no JSON Lines record (`error`: the parser's error, else the parsed `value`) is
    instead, and how to fix the file: '; ...' for a message, or '' when the line has none of these shapes.

    - bytes that are not UTF-8 (a Latin-1 file, say): the first bad byte and where it is;
    - the opening of one JSON document spread over several lines (a JSON array, pretty-printed JSON): the parser
      ran out of data on a line that is only '[' or '{' (as json.dump(indent=...), JSON.stringify and jq write
      it), or, on a file's first line, one that starts with '[' or '{' and breaks off after '[', '{', ',' or ':'
      outside a string, where such a document goes on (further down, that is likelier a record cut off);
    - NaN or Infinity where the parser stopped (Python's json.dumps writes them; JSON has no such values);
    - a JSON array of records written on one line."""
    if error is not None:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            return (f"; the line is not UTF-8 text (byte 0x{raw[bad.start]:02x} at byte {bad.start + 1} of the "
                    f"line, counting from 1): JSON Lines is UTF-8, convert the file, e.g. from Latin-1 with "
                    f"iconv -f latin1 -t utf-8 FILE")
        position = getattr(error, "pos", None)  # in characters of the line the parser read (no BOM)
        at = raw.removeprefix(_BOM).decode("utf-8")[position:] if position is not None else ""
        if at.lstrip("-").startswith(("NaN", "Infinity")):
            return ("; NaN and Infinity are not JSON (Python's json.dumps writes them unless allow_nan=False): write "
                    "null, or the number as a string")
        rest = _STRING.sub(b"0", raw.removeprefix(_BOM)).strip()  # each whole string a value, to see what ends it
        opening = rest[:1] in (b"[", b"{") and rest[-1:] in b"[{,:" and b'"' not in rest
        if str(error).startswith("unexpected end of data") and opening and (lineno == 1 or not rest.strip(b"[{ \t")):
            return ("; the file looks like one JSON document spread over several lines (a JSON array or pretty-printed "
                    "JSON), not JSON Lines (one record per line): convert an array with jq -c '.[]' FILE, "
                    "pretty-printed records with jq -c . FILE")
        return ""
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return (f"; the line is a JSON array of {len(value)} record{'s' if len(value) != 1 else ''}, not one record: "
                f"JSON Lines has one record per line (convert with jq -c '.[]' FILE)")
    return ""


def _check_shared_fields(record: dict, source: str, lineno: int, raw: bytes) -> None:
    """The two fields every record may carry, whatever its kind: stages key records by `id` (--shard, --resume,
    duplicates) and append to `meta` (a step to `meta.provenance`, `meta.parent_id`), so a wrong type there is
    bad input of any kind."""
    record_id = record.get("id")
    if record_id is not None and not (isinstance(record_id, str) and record_id):
        raise MalformedLine(f"must be a non-empty string, got {_shown(record_id)}", source=source, lineno=lineno,
                            text=raw, field="id")

    def malformed(problem: str, field: str) -> MalformedLine:
        return MalformedLine(problem, source=source, lineno=lineno, text=raw, record_id=record_id, field=field)

    meta = record.get("meta", {})
    if not isinstance(meta, dict):
        raise malformed(f"must be an object, got {_shown(meta)}", "meta")
    steps = meta.get("provenance", [])
    if not isinstance(steps, list):
        raise malformed(f"must be an array of provenance steps, got {_shown(steps)}", "meta.provenance")
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            raise malformed(f"must be an object (a provenance step), got {_shown(step)}", f"meta.provenance[{index}]")
    parent_id = meta.get("parent_id")
    if parent_id is not None and not isinstance(parent_id, str):
        raise malformed(f"must be a string, got {_shown(parent_id)}", "meta.parent_id")


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "integer", float: "number", bool: "boolean"}


def _shown(value) -> str:
    """A wrong value as the JSON the user wrote: its JSON type and (the start of) its text."""
    text = orjson.dumps(value).decode()
    kind = _JSON_TYPES.get(type(value))
    return f"{kind + ' ' if kind else ''}{text[:60]}{'...' if len(text) > 60 else ''}"


def read_jsonl(paths: str | Path | Iterable[str | Path], kind: str | None = None) -> Iterator[dict]:
    """Records of one or more JSONL files; the first malformed line raises MalformedLine."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    for source, lineno, raw in iter_raw_lines(str(p) for p in paths):
        yield parse_line(source, lineno, raw, kind).record


def load_checked(paths: Iterable[str], kind: str, *, stage: str, check: Callable[[dict], None] | None = None,
                 skip_bad: bool = False, rejects: str | None = None) -> list[dict]:
    """Every record of `paths` valid as `kind` that `check` accepts (it raises RecordError naming the field), read
    into memory in order, for a command that needs all of its input before it starts (a trainer, a server).

    A bad record stops it with file, line, id and field; with `skip_bad` it goes to stderr and, when given, the
    `rejects` file (appended, as a stage writes it: id, reason, stage, source, the line when it is no record).
    No record left is an error too."""
    paths = list(paths)
    records: list[dict] = []
    skipped = 0
    with open(rejects or os.devnull, "ab") as rejected:
        for source, lineno, raw in iter_raw_lines(paths):
            try:
                record = parse_line(source, lineno, raw, kind).record
                if check is not None:
                    try:
                        check(record)
                    except RecordError as exc:
                        raise exc.located(source, lineno) from None
            except RecordError as exc:
                if not skip_bad:
                    raise
                skipped += 1
                print(f"{stage}: skipping {exc}", file=sys.stderr)
                entry = {"id": exc.record_id, "reason": f"malformed: {exc}", "stage": stage,
                         "source": f"{source}:{lineno}"}
                if isinstance(exc, MalformedLine):
                    entry["line"] = raw.decode("utf-8", "replace")
                rejected.write(dumps(entry))
                continue
            records.append(record)
    if skipped:
        print(f"{stage}: {skipped} {kind_name(kind)} record(s) skipped{f' (in {rejects})' if rejects else ''}",
              file=sys.stderr)
    if not records:
        raise RecordError(f"no usable {kind_name(kind)} record in {', '.join(paths)}")
    return records


def write_jsonl(path_or_handle: str | Path | IO[bytes], records: Iterable[dict]) -> int:
    """Write records as JSONL to a path or a binary handle; returns the count written."""
    count = 0
    if isinstance(path_or_handle, (str, Path)):
        with open(path_or_handle, "wb") as handle:
            return write_jsonl(handle, records)
    for record in records:
        path_or_handle.write(dumps(record))
        count += 1
    return count
