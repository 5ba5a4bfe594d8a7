"""A stage's input on Ray (astra_core.ray_stage): its files, their lines in Ray's object store, and their check.

An input is a file, a directory (its files, recursively, in name order; names starting with `.` or `_`, markers
such as _SUCCESS, are skipped) or a URI that pyarrow's file systems open (s3://, gs://, hdfs://...). A file is JSONL
(gzip, bzip2 or xz too) or Parquet (a row is a record), told apart by its first bytes. Ray tasks read the lines and
check each as the stage does (parsed, validated); the driver learns from the checks the first bad line and the ids
that more than one line has, before any record is processed.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from astra_core.jsonl import MalformedLine, UnreadableInput, numbered_lines_of, parse_line
from astra_core.schema import RecordError
from astra_core.stage import duplicate_id

READ_ROWS = 4096  # lines per piece a reading task hands on (its blocks, before they are split into batches)


@dataclass(frozen=True)
class InputFile:
    name: str  # as messages and rejects name it: the input as given, or its path under a directory given
    uri: str  # what is opened: a local path or a URI


def input_files(inputs: Iterable[str]) -> list[InputFile]:
    """The files of the inputs: a file, a directory's files (recursively, in name order, without names that start
    with `.` or `_`: markers such as _SUCCESS), or the same for a URI."""
    found: list[InputFile] = []
    for given in inputs:
        if "://" in given:
            found += _remote_files(given)
        elif os.path.isdir(given):
            found += [InputFile(os.path.join(given, rel), os.path.join(given, rel)) for rel in _local_tree(given)]
        elif os.path.exists(given):
            found.append(InputFile(given, given))
        else:
            raise FileNotFoundError(f"no such file or directory: {given}")
    return found


def _visible(rel: str) -> bool:
    return not any(part.startswith((".", "_")) for part in rel.split("/"))


def _local_tree(root: str) -> list[str]:
    files = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith((".", "_"))]
        files += [os.path.relpath(os.path.join(directory, n), root) for n in names]
    return sorted(rel for rel in files if _visible(rel))


def _remote_files(uri: str) -> list[InputFile]:
    import pyarrow.fs as pafs

    filesystem, path = pafs.FileSystem.from_uri(uri)
    info = filesystem.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"no such file or directory: {uri}")
    if info.type != pafs.FileType.Directory:
        return [InputFile(uri, uri)]
    base = uri.rstrip("/")
    rels = sorted(os.path.relpath(i.path, path) for i in filesystem.get_file_info(pafs.FileSelector(path, recursive=True))
                  if i.type == pafs.FileType.File)
    return [InputFile(f"{base}/{rel}", f"{base}/{rel}") for rel in rels if _visible(rel)]


# -- reading and checking the lines (Ray tasks) ------------------------------------------------------------------

def _open_binary(uri: str) -> io.BufferedReader:
    if "://" not in uri:
        return open(uri, "rb")  # noqa: SIM115 - closed by the caller
    import pyarrow.fs as pafs

    filesystem, path = pafs.FileSystem.from_uri(uri)
    return io.BufferedReader(filesystem.open_input_stream(path, compression=None))


def file_lines(file: InputFile) -> Iterator[tuple[int, bytes, str]]:
    """(line number, bytes, "") of every non-blank line of a JSONL file, or (row number, the row as JSON, "") of
    every row of a Parquet file; last, (line number, b"", why) where compressed data breaks off."""
    with _open_binary(file.uri) as handle:
        if handle.peek(4)[:4] == b"PAR1":
            yield from _parquet_rows(file)
            return
        try:
            for lineno, line in numbered_lines_of(handle, file.name):
                if line.strip():
                    yield lineno, line, ""
        except UnreadableInput as broken:
            yield broken.lineno, b"", broken.message


def _parquet_rows(file: InputFile) -> Iterator[tuple[int, bytes, str]]:
    """Rows as pyarrow reads them: a field that some rows of the file lack is null in those rows (Parquet has one
    schema per file)."""
    import pyarrow.parquet as pq

    if "://" in file.uri:
        import pyarrow.fs as pafs

        filesystem, path = pafs.FileSystem.from_uri(file.uri)
        source: Any = filesystem.open_input_file(path)
    else:
        source = file.uri
    row = 0
    for table in pq.ParquetFile(source).iter_batches():
        for record in table.to_pylist():
            row += 1
            yield row, orjson.dumps(record, default=str), ""


def _read_files(batch: dict, files: list[InputFile]) -> Iterator[dict[str, list]]:
    """map_batches over file indices: the lines of each file, READ_ROWS at a time."""
    for index in batch["file"]:
        rows: dict[str, list] = {"file": [], "line": [], "raw": [], "broken": []}
        for lineno, raw, broken in file_lines(files[int(index)]):
            for key, value in (("file", int(index)), ("line", lineno), ("raw", raw), ("broken", broken)):
                rows[key].append(value)
            if len(rows["line"]) >= READ_ROWS:
                yield rows
                rows = {key: [] for key in rows}
        if rows["line"]:
            yield rows


def _check_lines(batch: dict, names: list[str], kind: str | dict | None) -> dict[str, list]:
    """map_batches over lines: each line's id if the stage would take it (parsed, valid), else why not."""
    out: dict[str, list] = {"file": [], "line": [], "id": [], "error": [], "field": [], "record_id": [],
                            "unreadable": []}
    for file, line, raw, broken in zip(batch["file"], batch["line"], batch["raw"], batch["broken"], strict=True):
        record_id = error = field = bad_id = None
        if broken:
            error = broken
        else:
            try:
                record = parse_line(names[int(file)], int(line), bytes(raw), kind).record
                record_id = record.get("id") if isinstance(record.get("id"), str) else None
            except MalformedLine as bad:
                error, field, bad_id = bad.message, bad.field, bad.record_id
        for key, value in (("file", int(file)), ("line", int(line)), ("id", record_id), ("error", error),
                           ("field", field), ("record_id", bad_id), ("unreadable", bool(broken))):
            out[key].append(value)
    return out


@dataclass
class Checked:
    """What the check of every line found."""

    lines: int = 0
    first_bad: RecordError | None = None  # the first bad line in input order: a run without --skip-bad stops on it
    bad_at: tuple[int, int] | None = None
    seen: dict[str, str] = dataclasses.field(default_factory=dict)  # duplicated ids -> file:line of their first line


def checked(rows: Iterable[dict], names: list[str]) -> Checked:
    """Bad lines and duplicate ids of all the input, from the lines' check rows (in any order)."""
    found = Checked()
    first: dict[str, tuple[int, int]] = {}
    later: list[tuple[tuple[int, int], str]] = []  # lines whose id an earlier line has

    def bad(at: tuple[int, int], error: RecordError) -> None:
        if found.bad_at is None or at < found.bad_at:
            found.bad_at, found.first_bad = at, error

    for row in rows:
        found.lines += 1
        at = (row["file"], row["line"])
        name = names[at[0]]
        if row["error"] is not None:
            error = (UnreadableInput(row["error"], source=name, lineno=at[1]) if row["unreadable"] else
                     MalformedLine(row["error"], source=name, lineno=at[1], text=b"", record_id=row["record_id"],
                                   field=row["field"]))
            bad(at, error)
        elif row["id"] is not None:
            earlier = first.setdefault(row["id"], at)
            if earlier != at:
                later.append((max(earlier, at), row["id"]))
                first[row["id"]] = min(earlier, at)
    where = {record_id: f"{names[first[record_id][0]]}:{first[record_id][1]}" for _, record_id in later}
    found.seen = where
    if later:
        (file, line), record_id = min(later)
        bad((file, line), duplicate_id(record_id, where[record_id], names[file], line))
    return found


def read_lines(ray: Any, files: list[InputFile], size: int) -> Any:
    """The input's lines in Ray's object store, in blocks of at most `size` lines (one batch each); None when
    there are none."""
    if not files:
        return None
    read = ray.data.from_items([{"file": index} for index in range(len(files))],
                               override_num_blocks=len(files))
    lines = read.map_batches(_read_files, batch_size=1, fn_kwargs={"files": files}).materialize()
    count = lines.count()
    return lines.repartition(math.ceil(count / size)).materialize() if count else None


def check_rows(lines: Any, names: list[str], kind: str | dict | None) -> Iterator[dict]:
    """Each line's check (its id if the stage would take it, else why not), computed by Ray tasks."""
    checks = lines.map_batches(_check_lines, fn_kwargs={"names": names, "kind": kind}, batch_format="numpy")
    for batch in checks.iter_batches(batch_size=None, batch_format="pyarrow"):
        yield from batch.to_pylist()
