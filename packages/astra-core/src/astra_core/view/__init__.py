"""`astra-core view`: JSONL files of any record kinds as entries for a browsable report.

An entry is {i, file, line, kind, id, rejected, reasons, stage, problems, error, verdict, reward, title,
record}. Reading never fails on content: a line that is not JSON becomes an entry of kind "invalid" with
the parse error, a record that fits no schema is kind "unknown" and shown raw. A reject (a line of a
`--rejects` file, named like `x.rejects.jsonl` or `rejects.x.jsonl`) is shown as the record it wraps,
marked rejected with its reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson

from astra_core.jsonl import not_jsonl_hint, numbered_lines, source_name
from astra_core.view import kinds

SUMMARY_FIELDS = ("i", "file", "line", "kind", "id", "rejected", "reasons", "stage", "problems", "error", "verdict",
                  "reward", "title")


@dataclass
class RawLine:
    """One non-blank line of an input and where it is (offset: its first byte in the file)."""

    file: str
    line: int
    offset: int
    raw: bytes


def is_rejects_file(name: str) -> bool:
    return "rejects" in Path(name).name.split(".")


def iter_lines(paths: Iterable[str], stdin: IO[bytes] | None = None) -> Iterator[RawLine]:
    """Every non-blank line of every file ('-' reads `stdin`, default the process's; compressed files are read
    decompressed, the offsets in their decompressed bytes)."""
    for path in paths:
        name = source_name(path)
        offset = 0
        for lineno, raw in numbered_lines(path, stdin):
            if raw.strip():
                yield RawLine(name, lineno, offset, raw)
            offset += len(raw)


def _parse(raw: bytes | str, lineno: int) -> tuple[object, str | None]:
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        as_bytes = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw
        return None, f"invalid JSON: {exc}{not_jsonl_hint(as_bytes, error=exc, lineno=lineno)}"


def _is_reject(value: dict) -> bool:
    return isinstance(value.get("reason"), str) and ("record" in value or "line" in value)


def entry_of(line: RawLine, index: int) -> dict:
    """The entry of one line (see the module doc)."""
    entry = {"i": index, "file": line.file, "line": line.line, "kind": "invalid", "id": None,
             "rejected": is_rejects_file(line.file), "reasons": [], "stage": None, "problems": [], "error": None,
             "verdict": None, "reward": None, "title": ""}
    value, error = _parse(line.raw.removeprefix(b"\xef\xbb\xbf"), line.line)
    if error is None and isinstance(value, dict) and _is_reject(value):
        entry.update(rejected=True, reasons=[value["reason"]], stage=value.get("stage"), id=value.get("id"))
        value, error = (value["record"], None) if "record" in value else _parse(value["line"], 0)
    if error is not None:
        return {**entry, "error": error, "record": line.raw.decode("utf-8", "replace")}
    if not isinstance(value, dict):
        error = f"expected a JSON object, got {type(value).__name__}{not_jsonl_hint(line.raw, value=value)}"
        return {**entry, "error": error, "record": value}
    if isinstance(value.get("reason"), str) and entry["rejected"] and not entry["reasons"]:
        entry["reasons"] = [value["reason"]]
    kind, problems = kinds.detect(value)
    record_id = value.get("id")
    return {**entry, "kind": kind, "problems": problems,
            "id": entry["id"] if entry["id"] is not None else (str(record_id) if record_id is not None else None),
            "verdict": kinds.verdict(value), "reward": kinds.reward(value), "title": kinds.title(value),
            "record": value}


def load(paths: Iterable[str], stdin: IO[bytes] | None = None) -> list[dict]:
    """Every line of every file as an entry, in file order."""
    return [entry_of(line, index) for index, line in enumerate(iter_lines(paths, stdin))]


def summary(entry: dict) -> dict:
    """The entry without its record: what the index needs."""
    return {key: entry[key] for key in SUMMARY_FIELDS}


@dataclass
class Counts:
    records: int = 0
    files: int = 0
    rejected: int = 0
    invalid: int = 0

    def add(self, entry: dict) -> None:
        self.records += 1
        self.rejected += entry["rejected"]
        self.invalid += entry["kind"] == "invalid"

    def text(self) -> str:
        return (f"{self.records} records from {self.files} files "
                f"({self.rejected} rejected, {self.invalid} invalid)")


def counts(entries: Iterable[dict], files: int) -> Counts:
    total = Counts(files=files)
    for entry in entries:
        total.add(entry)
    return total
