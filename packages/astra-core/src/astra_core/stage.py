"""One run of a JSONL stage: the conventions every `astra-*` command follows.

A stage reads records (files or stdin), processes each into zero or more output records,
and writes them to stdout (or -o FILE). Nothing is lost: an input that yields no output
goes to the rejects file with a reason. Counts go to stderr when the stage ends:

    read = skipped (resume) + other shards + produced output + rejected

Typical use, for a stage that maps each input to outputs:

    with Stage("astra-toolgraph walk", options, in_kind="tool_graph", out_kind="tool_chain") as stage:
        stage.run(walk_one)              # or: asyncio.run(stage.arun(async_fn, concurrency=8))

`walk_one(record)` returns a record, a list of records, or raises `Rejected(reason)`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import io
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from astra_core.claims import ClaimRefused, claim, release
from astra_core.jsonl import MalformedLine, UnreadableInput, dumps, iter_raw_lines, parse_line
from astra_core.records import provenance_step, stable_id
from astra_core.schema import RecordError, validate

if TYPE_CHECKING:
    from astra_core.progress import Progress


class Rejected(Exception):
    """Raise from a stage function to drop the current record with a reason."""


class Malformed(Rejected):
    """Raise from a stage function for bad input its schema cannot express (a rule across fields, e.g. an edge
    naming a node the record does not have): like a malformed line, it stops the stage naming file, line,
    record and `field`, unless --skip-bad sends the record to --rejects."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message, self.field = message, field


def require_text(record: dict, field: str, why: str) -> str:
    """`record[field]`, a string its kind's schema has checked; Malformed naming the field when it is empty or only
    whitespace, for a stage that cannot use a blank text its kind allows (a task's question: `evolve tasks` may
    write an LLM's empty instruction, which `evolve verify-tasks` fails on purpose). `why` ends the message."""
    text = record[field]
    if not text.strip():
        raise Malformed(f"the {field} is {'empty' if not text else 'only whitespace'}: {why}", field=field)
    return text


class StageError(ValueError):
    """A stage was asked for something it cannot do (bad option combination, unreadable input)."""


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count`: records are assigned by a stable hash of their id."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        try:
            index_text, count_text = text.split("/")
            index, count = int(index_text), int(count_text)
        except ValueError:
            raise ValueError(f"--shard wants i/n (e.g. 0/4), got {text!r}") from None
        if count < 1 or not 0 <= index < count:
            raise ValueError(f"--shard {text}: need 0 <= i < n")
        return cls(index, count)

    def owns(self, record_id: str) -> bool:
        digest = hashlib.blake2b(str(record_id).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.count == self.index


@dataclass
class StageOptions:
    """The I/O options shared by every stage command (see `astra_core.cli.stage_options`)."""

    inputs: tuple[str, ...] = ("-",)
    output: str = "-"
    rejects: str | None = None
    shard: Shard | None = None
    skip_bad: bool = False
    resume: bool = False
    progress: bool | None = None  # None: a bar when stderr is a terminal, else a status line every 15 s of a long run
    fail_fast: bool = False
    debug: bool = False  # tracebacks of internal errors (else one line for the first)


@dataclass
class Counts:
    read: int = 0
    skipped_resume: int = 0
    other_shards: int = 0
    produced: int = 0  # inputs that yielded at least one output
    written: int = 0  # output records
    rejected: int = 0
    errors: int = 0  # rejected because the stage raised an unexpected exception
    reasons: collections.Counter = field(default_factory=collections.Counter)
    dropped: collections.Counter = field(default_factory=collections.Counter)  # made by the stage, then dropped

    def add(self, other: Counts) -> None:
        """Count what `other` counted too (a part of this stage's input run elsewhere)."""
        for name in ("read", "skipped_resume", "other_shards", "produced", "written", "rejected", "errors"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.reasons.update(other.reasons)
        self.dropped.update(other.dropped)


@dataclass
class Part:
    """What a stage did with some lines of its input in another process (a batch on a Ray actor,
    astra_core.ray_stage), for the stage that writes its outputs: the output and rejects lines, the counts and
    figures, and the messages it would have printed. `stop`: an error that stops the whole stage (a malformed
    record without --skip-bad, an endpoint that does not answer), after what is here."""

    counts: Counts = field(default_factory=Counts)
    output: bytes = b""
    rejects: bytes = b""
    stats: dict[str, Any] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    stop: str | None = None
    side: dict[str, bytes] = field(default_factory=dict)  # lines written to side outputs (command.side_output)

    def add(self, other: Part) -> None:
        self.counts.add(other.counts)
        self.output += other.output
        self.rejects += other.rejects
        merge_stats(self.stats, other.stats)
        self.messages += other.messages
        self.stop = self.stop or other.stop
        for key, lines in other.side.items():
            self.side[key] = self.side.get(key, b"") + lines


def merge_stats(into: dict[str, Any], more: dict[str, Any]) -> None:
    """Figures of two parts of a run as one: numbers add up, and so do mappings of them (key by key); any other
    figure keeps its first value (a stage sets such a figure once, e.g. the size of a pool every record shares)."""
    for key, value in more.items():
        if key not in into:
            into[key] = dict(value) if isinstance(value, dict) else value
        elif _is_number(value) and _is_number(into[key]):
            into[key] += value
        elif isinstance(value, dict) and isinstance(into[key], dict):
            merge_stats(into[key], value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _reason_key(reason: str) -> str:
    """A reason's kind, to count rejects by: its text before the first ':', without a parenthesis that the
    ':' left open, at most 80 characters in whole words (never a word or clause cut in the middle)."""
    key = reason.split(":", 1)[0]
    if key.count("(") > key.count(")"):
        key = key[:key.rfind("(")]
    key = key.strip()
    if len(key) > 80:
        key = key[:80].rsplit(" ", 1)[0] + " …"
    return key


def _check_unique(record: dict, source: str, lineno: int, raw: bytes, first_seen: dict[str, str]) -> None:
    """Records are known by their id (--shard, --resume, parent links): an id seen twice is bad input."""
    record_id = record.get("id")
    if not isinstance(record_id, str):
        return
    where = first_seen.setdefault(record_id, f"{source}:{lineno}")
    if where != f"{source}:{lineno}":
        raise duplicate_id(record_id, where, source, lineno, raw)


def duplicate_id(record_id: str, first: str, source: str, lineno: int, raw: bytes = b"") -> MalformedLine:
    """The error of a record whose id an earlier line (`first`, as file:line) already has."""
    return MalformedLine(f"duplicate id {record_id!r} (first at {first})", source=source, lineno=lineno, text=raw,
                         record_id=record_id, field="id")


def _done_ids(paths: list[str]) -> set[str]:
    """Ids already handled by an earlier run: output ids, their parents, and rejected ids."""
    done: set[str] = set()
    for path in paths:
        if not os.path.exists(path):
            continue
        for source, lineno, raw in iter_raw_lines([path]):
            try:
                record = parse_line(source, lineno, raw).record
            except MalformedLine:
                continue
            for key in (record.get("id"), record.get("meta", {}).get("parent_id")):
                if isinstance(key, str):
                    done.add(key)
    return done


def _stops_the_stage(exc: BaseException) -> bool:
    """A failure no record can escape (no model to ask, a resource that cannot open): the stage stops with
    one line, rather than rejecting every record in turn. The embedded model starts on first use, so this
    shows only then."""
    from astra_core.llm.client import LLMUnavailable

    return isinstance(exc, (LLMUnavailable, StageError))


def _parquet_writer() -> Callable:
    """JSONL (a binary file) -> a parquet file, with pyarrow (astra-core's `parquet` extra)."""
    try:
        import pyarrow.json as pa_json
        import pyarrow.parquet as pq
    except ImportError:
        raise StageError("writing parquet (-o FILE.parquet) needs pyarrow: "
                         "pip install 'astra-agent-core[parquet]'") from None

    def write(jsonl: IO[bytes], path: str) -> None:
        if not jsonl.read(1):  # nothing written: an empty table (pyarrow cannot infer from no rows)
            import pyarrow

            pq.write_table(pyarrow.table({}), path)
            return
        jsonl.seek(0)
        pq.write_table(pa_json.read_json(jsonl), path)

    return write


def _truncate_partial_last_line(path: str) -> None:
    """A run killed mid-write leaves half a line; resume drops it."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    with open(path, "rb+") as handle:
        data = handle.read()
        if not data.endswith(b"\n"):
            handle.truncate(data.rfind(b"\n") + 1)


# What a shell reports for a producer cut short by its reader (`stage | head`): 128 + SIGPIPE, as for `cat`.
EXIT_PIPE_CLOSED = 141


EXIT_TERMINATED = 143  # 128 + SIGTERM: what a shell reports for a process SIGTERM ended


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (a batch scheduler's time limit or preemption, `kill`): the stage stops as on Ctrl-C."""


def stop_on_sigterm() -> Callable[[], None]:
    """Make SIGTERM raise Terminated; returns what undoes it. Left alone outside the main thread (signal handlers
    live there) and when SIGTERM already has a handler of someone else's, or is ignored."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return lambda: None

    def terminated(signum, frame) -> None:
        raise Terminated

    signal.signal(signal.SIGTERM, terminated)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _private_stdin() -> IO[bytes] | None:
    """The process's stdin as a reader of its own (fd 0 duplicated): Python aborts at exit ("could not acquire lock
    for <stdin>") when a daemon thread is blocked reading sys.stdin. None for a stdin with no descriptor (a test's)."""
    try:
        return os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None


class _PipeReader:
    """Records read from a pipe by a daemon thread, `ahead` at most before the stage takes them. (In a thread of
    asyncio's executor, a read waiting on upstream would hold the stage's exit on Ctrl-C or SIGTERM until upstream
    wrote or closed.)"""

    def __init__(self, records: Iterator[dict], end: object, ahead: int):
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._room = threading.Semaphore(ahead)
        threading.Thread(target=self._read, args=(records, end), daemon=True, name="astra-stage-input").start()

    def _read(self, records: Iterator[dict], end: object) -> None:
        try:
            for record in records:
                self._room.acquire()
                self._put(record)
            self._put(end)
        except BaseException as exc:  # noqa: BLE001 - raised again on the stage's loop (a malformed line, ...)
            self._put(_ReadFailed(exc))

    def _put(self, item: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the stage has stopped, nobody takes it
            return

    async def next(self) -> object:
        item = await self._queue.get()
        self._room.release()
        if isinstance(item, _ReadFailed):
            raise item.error
        return item


@dataclass
class _ReadFailed:
    error: BaseException


def _stdout_to_devnull() -> None:
    """Python flushes stdout again at exit; into a closed pipe that prints an 'Exception ignored' message."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


@contextlib.contextmanager
def _writing(path: str) -> Iterator[None]:
    """An OSError while writing `path` (a full disk, a quota, a file system gone away) is a StageError naming it,
    not a traceback; a closed stdout pipe stays a BrokenPipeError (see Stage.__exit__)."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise StageError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _open_output(path: str, mode: str) -> IO[bytes]:
    """An output or rejects file; a name ending in .gz is written gzip-compressed."""
    if path.endswith(".gz"):
        import gzip

        return gzip.open(path, mode)  # type: ignore[return-value]
    return open(path, mode)  # noqa: SIM115 - closed in __exit__


class Stage:
    def __init__(self, command: str, options: StageOptions, *, in_kind: str | dict | None = None,
                 out_kind: str | None = None, model: str | None = None, seed: int | None = None,
                 total: int | None = None, derive_ids: bool = False):
        self.command = command
        # Foreign rows (e.g. ASTRA's knowledge files) carry no id: with derive_ids they get a stable one
        # from their content so --shard, --resume and meta.parent_id work for them too. Opt-in, because
        # stages with their own id rule (a server's name, say) must see the row as it was written.
        self.derive_ids = derive_ids
        self.options = options
        self.in_kind = in_kind
        self.out_kind = out_kind
        self.counts = Counts()
        self.stats: dict[str, Any] = {}  # extra figures printed with the counts (token usage, ...)
        self._step = provenance_step(command, model=model, seed=seed)
        self._model_of: Callable[[], str | None] | None = None
        self._total = total
        self._out: IO[bytes] | None = None
        self._parquet: Callable | None = None  # -o FILE.parquet: converts the spooled JSONL on exit
        self._rejects: IO[bytes] | None = None
        self._done: set[str] = set()
        self._bar: Progress | None = None
        self._started = 0.0
        self._first_error_shown = False
        self._sources: dict[int, str] = {}  # id(record) -> "file:line" of records being processed
        self._undo_sigterm: Callable[[], None] = lambda: None
        self._claims: list[IO[bytes]] = []  # locks on the files it writes (astra_core.claims)
        self._stdin: IO[bytes] | None = None  # where '-' is read from (None: the process's stdin)
        # A stage run over lines given to it (a batch on a Ray actor: in_memory) rather than its input files:
        self._lines: Iterable[Iterable[tuple[str, int, bytes]]] | None = None
        self._seen: dict[str, str] = {}  # ids whose first line is elsewhere in the input -> that file:line
        self._messages: list[str] | None = None  # what it would print, kept for part() (None: printed)

    def provenance(self, *, model: str | Callable[[], str | None] | None = None, seed: int | None = None) -> None:
        """The model (and seed) the output records' provenance step names. `model` may be a function asked
        at each record: a client learns its endpoint's model on its first request, and a stage that asks
        nothing should not start a model just to name it."""
        self._model_of = model if callable(model) else None
        self._step = provenance_step(self.command, model=None if callable(model) else model, seed=seed)

    # -- lifecycle -------------------------------------------------------------------------
    @contextlib.contextmanager
    def in_memory(self, lines: Iterable[Iterable[tuple[str, int, bytes]]], *, done: set[str] | None = None,
                  seen: dict[str, str] | None = None) -> Iterator[Stage]:
        """This stage over `lines` alone, its outputs, rejects and messages kept for `part()` rather than written
        or printed: a batch of a stage run on Ray. `lines` holds, per input file, the (source, line number, bytes)
        of some of its lines (an iterator may raise UnreadableInput where the file breaks off); `done`: ids
        --resume skips; `seen`: ids whose first line is elsewhere in the input (file:line), so that their lines
        here are duplicates. No file is claimed and no progress shown: the stage that absorbs the part does that."""
        self._lines, self._done, self._seen = lines, done or set(), dict(seen or {})
        self._out = io.BytesIO()
        self._rejects = io.BytesIO() if self.options.rejects else None
        self._messages = []
        self._started = time.monotonic()
        yield self

    def part(self, stop: str | None = None) -> Part:
        """What this stage did in memory (see in_memory)."""
        assert isinstance(self._out, io.BytesIO), "part() is for a stage run in_memory"
        rejects = self._rejects.getvalue() if self._rejects is not None else b""
        return Part(self.counts, self._out.getvalue(), rejects, dict(self.stats), list(self._messages or []), stop)

    def absorb(self, part: Part) -> None:
        """Write and count what was done elsewhere with some lines of this stage's input (a batch on a Ray actor),
        as if done here."""
        with _writing(self._output_name):
            self._out.write(part.output)
            self._out.flush()
        if part.rejects and self._rejects is not None:
            self._write_rejects_line(part.rejects)
        self.counts.add(part.counts)
        merge_stats(self.stats, part.stats)
        for message in part.messages:  # (as _fail prints: the first error, or every traceback with --debug)
            if self.options.debug or not self._first_error_shown:
                self._first_error_shown = True
                print(message, file=sys.stderr)
        if self._bar is not None:
            self._bar.update(part.counts.read)

    @property
    def done_ids(self) -> set[str]:
        """The ids --resume skips (read from -o and --rejects when the stage opened)."""
        return self._done

    def __enter__(self) -> Stage:
        opts = self.options
        if opts.resume:
            if opts.output == "-":
                raise StageError("--resume needs -o FILE: it skips ids already in that file")
            compressed = [path for path in (opts.output, opts.rejects) if path and path.endswith(".gz")]
            if compressed:
                raise StageError(f"--resume cannot append to a compressed file ({compressed[0]}): a run cut short "
                                 "leaves it unreadable; write JSONL and compress it at the end")
        try:
            self._claims = claim({"-o": opts.output, "--rejects": opts.rejects}, opts.inputs)
        except ClaimRefused as exc:
            raise StageError(str(exc)) from None
        try:
            return self._open()
        except BaseException:
            release(self._claims)
            raise

    def _open(self) -> Stage:
        opts = self.options
        if opts.resume:
            _truncate_partial_last_line(opts.output)
            self._done = _done_ids([opts.output] + ([opts.rejects] if opts.rejects else []))
        mode = "ab" if opts.resume else "wb"
        if opts.output.endswith(".parquet"):
            if opts.resume:
                raise StageError("--resume cannot append to a parquet file: write JSONL and convert at the end")
            self._parquet = _parquet_writer()
            self._out = tempfile.TemporaryFile()  # noqa: SIM115 - spooled JSONL, converted on exit
        elif opts.output != "-":
            with _writing(opts.output):
                self._out = _open_output(opts.output, mode)
        else:
            self._out = sys.stdout.buffer
        if opts.rejects:
            if opts.resume:
                _truncate_partial_last_line(opts.rejects)
            with _writing(opts.rejects):
                self._rejects = _open_output(opts.rejects, mode)
        from astra_core.progress import Progress, count_lines

        total = self._total if self._total is not None else (lambda: count_lines(opts.inputs))
        self._bar = Progress(self.command, total, show=opts.progress).__enter__()
        self._started = time.monotonic()
        self._undo_sigterm = stop_on_sigterm()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._undo_sigterm()
        if self._bar is not None:
            self._bar.close()
        pipe_closed, failed_write = self._close_outputs(exc_type)
        release(self._claims)
        if failed_write is not None and exc_type is None:  # (after another failure, what it left unwritten is redone)
            print(self.summary(), file=sys.stderr)
            raise failed_write
        if pipe_closed:
            written = self.counts.written
            print(f"{self.summary()}\n  stopped: the reader of stdout closed it (after {written} "
                  f"record{'s' if written != 1 else ''} written)", file=sys.stderr)
            _stdout_to_devnull()
            raise SystemExit(EXIT_PIPE_CLOSED)
        if exc_type is None:
            print(self.summary(), file=sys.stderr)
        elif exc_type is Terminated:
            print(self.summary() + self._unfinished("terminated (SIGTERM)"), file=sys.stderr)
            raise SystemExit(EXIT_TERMINATED)
        elif exc_type is KeyboardInterrupt:
            print(self.summary() + self._unfinished("interrupted"), file=sys.stderr)
        elif exc_type is not None and issubclass(exc_type, StageError) and self.counts.produced + self.counts.rejected:
            # stopped after some work (why: the error, printed next); stopped before any, the error alone says it
            print(self.summary() + self._unfinished("stopped"), file=sys.stderr)

    def _close_outputs(self, exc_type) -> tuple[bool, StageError | None]:
        """Close the output (converting it to parquet if asked) and the rejects: whether stdout's reader had
        closed it, and the first write that failed."""
        pipe_closed = exc_type is BrokenPipeError and self._out is sys.stdout.buffer
        steps: list[tuple[str, Callable[[], None]]] = []
        if self._parquet is not None and exc_type is None:
            steps.append((self.options.output, self._write_parquet))
        elif self._parquet is not None and os.path.getsize(self.options.output) == 0:
            os.remove(self.options.output)  # the empty file its claim made: no parquet file at all, as before
        if self._out is not None and self._out is not sys.stdout.buffer:
            steps.append((self.options.output, self._out.close))
        elif self._out is not None and not pipe_closed:
            steps.append((self._output_name, self._out.flush))
        if self._rejects is not None:
            steps.append((self.options.rejects, self._rejects.close))
        failed = None
        for path, step in steps:
            try:
                with _writing(path):
                    step()
            except BrokenPipeError:
                pipe_closed = True
            except StageError as exc:
                failed = failed or exc
        return pipe_closed, failed

    def _write_parquet(self) -> None:
        self._out.seek(0)
        self._parquet(self._out, self.options.output)

    @property
    def _output_name(self) -> str:
        return "<stdout>" if self.options.output == "-" else self.options.output

    def summary(self) -> str:
        c = self.counts
        parts = [f"read {c.read}"]
        if c.skipped_resume:
            parts.append(f"skipped {c.skipped_resume} done (resume)")
        if c.other_shards:
            parts.append(f"{c.other_shards} in other shards")
        parts.append(f"wrote {c.written} from {c.produced}")
        parts.append(f"rejected {c.rejected}" + (f" ({c.errors} error{'s' if c.errors != 1 else ''})" if c.errors else ""))
        text = f"{self.command}: " + " · ".join(parts) + f" · {time.monotonic() - self._started:.1f}s"
        for key, value in self.stats.items():
            text += f"\n  {key}: {value}"
        if c.reasons:
            top = ", ".join(f"{reason} ×{n}" for reason, n in c.reasons.most_common(6))
            text += f"\n  reject reasons: {top}"
            if self._rejects is None:
                text += "\n  (pass --rejects FILE to keep the rejected records)"
        if c.dropped:
            top = ", ".join(f"{reason} ×{n}" for reason, n in c.dropped.most_common(6))
            where = "in --rejects" if self._rejects is not None else "pass --rejects FILE to keep them"
            text += f"\n  outputs made and dropped: {c.dropped.total()} ({top}; {where})"
        return text

    def _unfinished(self, what: str) -> str:
        c = self.counts
        unfinished = c.read - c.skipped_resume - c.other_shards - c.produced - c.rejected
        same = "-o and --rejects" if self.options.rejects else "-o"
        how = (f"rerun with the same {same} and --resume to do only what is left"
               if self.options.output != "-" else "write to -o FILE to be able to --resume")
        return f"\n  {what}: {unfinished} read record{'s' if unfinished != 1 else ''} not finished ({how})"

    # -- input -----------------------------------------------------------------------------
    def inputs(self) -> Iterator[dict]:
        """Input records to process: parsed, validated, and filtered by --shard and --resume."""
        first_seen: dict[str, str] = dict(self._seen)  # id -> file:line where it first appeared
        for lines in self._input_files():
            try:
                for source, lineno, raw in lines:
                    record = self._taken(source, lineno, raw, first_seen)
                    if record is not None:
                        yield record
            except UnreadableInput as unreadable:  # e.g. a download cut off: the rest of this file, as a bad line
                if not self.options.skip_bad:
                    raise
                self.counts.read += 1
                self._write_reject({"id": None, "reason": f"malformed: {unreadable}", "stage": self.command,
                                    "source": f"{unreadable.source}:{unreadable.lineno}"})
                self._advance()

    def _input_files(self) -> Iterator[Iterable[tuple[str, int, bytes]]]:
        """Per input file, its (source, line number, bytes) lines."""
        if self._lines is not None:
            yield from self._lines
            return
        for path in self.options.inputs:
            yield iter_raw_lines([path], self._stdin)

    def _taken(self, source: str, lineno: int, raw: bytes, first_seen: dict[str, str]) -> dict | None:
        """The record of one line if this run processes it (None: rejected as malformed, another shard's, or done
        by the run --resume continues)."""
        self.counts.read += 1
        try:
            line = parse_line(source, lineno, raw, self.in_kind)
            _check_unique(line.record, source, lineno, raw, first_seen)
        except MalformedLine as bad:
            if not self.options.skip_bad:
                raise
            self._write_reject({"id": bad.record_id, "reason": f"malformed: {bad}", "stage": self.command,
                                "source": f"{source}:{lineno}", "line": raw.decode("utf-8", "replace")})
            self._advance()
            return None
        record = line.record
        if record.get("id") is None and self.derive_ids:
            record["id"] = stable_id(record, prefix="row-")
        record_id = record.get("id")
        if self.options.shard and not self.options.shard.owns(str(record_id)):
            self.counts.other_shards += 1
            self._advance()
            return None
        if record_id in self._done:
            self.counts.skipped_resume += 1
            self._advance()
            return None
        self._sources[id(record)] = f"{source}:{lineno}"
        return record

    # -- output ----------------------------------------------------------------------------
    def emit(self, outputs: dict | list[dict] | None, source: dict | None = None) -> None:
        """Write the outputs of one input record (or reject it when there are none)."""
        if isinstance(outputs, dict):
            outputs = [outputs]
        if not outputs:
            if source is not None:
                self.reject(source, "no output: the stage produced nothing for this record")
            return
        if source is not None:
            self._sources.pop(id(source), None)
        lines = []
        for record in outputs:
            self._stamp(record, source)
            if self.out_kind is not None:
                try:
                    validate(record, self.out_kind)
                except RecordError as exc:
                    self.counts.errors += 1
                    self.reject(source or record, f"error: stage produced an invalid {self.out_kind}: {exc}")
                    return
            lines.append(dumps(record))
        assert self._out is not None
        with _writing(self._output_name):
            self._out.write(b"".join(lines))
            self._out.flush()
        self.counts.written += len(lines)
        self.counts.produced += 1
        self._advance()

    def reject(self, record: dict, reason: str) -> None:
        """Drop `record` with a reason: it goes to --rejects and is counted."""
        entry = {"id": record.get("id"), "reason": reason, "stage": self.command}
        where = self._sources.pop(id(record), None)
        if where is not None:
            entry["source"] = where
        self._write_reject({**entry, "record": record})
        self._advance()

    def drop(self, made: dict, reason: str) -> None:
        """Drop a record the stage made, not an input record (e.g. one of several instances an LLM wrote for a
        row), with a reason: it goes to --rejects marked `derived` and is counted apart from the inputs' rejects
        (read = written-from + rejected stays a statement about input records)."""
        self.counts.dropped[_reason_key(reason)] += 1
        if self._rejects is not None:
            entry = {"id": made.get("id"), "reason": reason, "stage": self.command, "derived": True, "record": made}
            self._write_rejects_line(dumps(entry))

    def _write_reject(self, entry: dict) -> None:
        if self._rejects is not None:  # (written first: a record whose reject could not be written is not done)
            self._write_rejects_line(dumps(entry))
        self.counts.rejected += 1
        self.counts.reasons[_reason_key(entry["reason"])] += 1

    def _write_rejects_line(self, line: bytes) -> None:
        with _writing(self.options.rejects):
            self._rejects.write(line)
            self._rejects.flush()

    def _stamp(self, record: dict, source: dict | None) -> None:
        meta = record.setdefault("meta", {})
        steps = meta.setdefault("provenance", [])
        if not steps or steps[-1].get("command") != self.command:
            step = dict(self._step)
            if self._model_of is not None:
                step["model"] = self._model_of()
            steps.append(step)
        if source is not None and record.get("id") != source.get("id"):
            meta["parent_id"] = source.get("id")

    def _advance(self) -> None:
        if self._bar is not None:
            self._bar.update(1)

    def note(self, text: str) -> None:
        """Say what the stage is doing now (a long record's phase): shown with its progress."""
        if self._bar is not None:
            self._bar.note(text)

    # -- running a per-record function --------------------------------------------------------
    def _tell(self, text: str) -> None:
        if self._messages is not None:
            self._messages.append(text)
        else:
            print(text, file=sys.stderr)

    def _fail(self, record: dict, exc: BaseException) -> None:
        if isinstance(exc, Malformed):
            source, _, lineno = self._sources.get(id(record), "").rpartition(":")
            error = RecordError(exc.message, record_id=record.get("id"), field=exc.field, source=source or None,
                                lineno=int(lineno) if lineno.isdigit() else None)
            if not self.options.skip_bad:
                raise error
            self.reject(record, f"malformed: {error}")
            return
        if isinstance(exc, Rejected):
            self.reject(record, str(exc))
            return
        if _stops_the_stage(exc):
            raise StageError(str(exc)) from exc
        if self.options.fail_fast:
            raise exc
        self.counts.errors += 1
        if self.options.debug:
            self._tell(f"{self.command}: error on record {record.get('id')!r}:\n"
                       + "".join(traceback.format_exception(exc)).rstrip("\n"))
        elif not self._first_error_shown:
            self._first_error_shown = True
            self._tell(f"{self.command}: error on record {record.get('id')!r}: {type(exc).__name__}: {exc} "
                       "(rejected; --debug for tracebacks, --fail-fast to stop)")
        self.reject(record, f"error: {type(exc).__name__}: {exc}")

    def run(self, fn: Callable[[dict], dict | list[dict] | None]) -> Counts:
        """Apply `fn` to every input record, in order."""
        for record in self.inputs():
            try:
                outputs = fn(record)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a reject with its reason
                self._fail(record, exc)
                continue
            self.emit(outputs, record)
        return self.counts

    def run_batched(self, fn: Callable[[list[dict]], list], size: int) -> Counts:
        """Apply `fn` to batches of up to `size` records; it returns one result per record (its outputs,
        or an exception to reject that record)."""
        batch: list[dict] = []
        for record in self.inputs():
            batch.append(record)
            if len(batch) >= size:
                self._finish_batch(fn, batch)
                batch = []
        if batch:
            self._finish_batch(fn, batch)
        return self.counts

    def _finish_batch(self, fn: Callable[[list[dict]], list], batch: list[dict]) -> None:
        try:
            results = fn(batch)
        except Exception as exc:  # noqa: BLE001 - the whole batch failed: each record is rejected with why
            results = [exc] * len(batch)
        for record, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                self._fail(record, result)
            else:
                self.emit(result, record)

    async def arun(self, fn: Callable[[dict], Awaitable[dict | list[dict] | None]], concurrency: int = 8) -> Counts:
        """Apply async `fn` to every input with up to `concurrency` in flight; output keeps input order."""
        window: collections.deque[asyncio.Task] = collections.deque()
        from_pipe = any(path == "-" or not os.path.isfile(path) for path in self.options.inputs)
        if from_pipe:
            self._stdin = _private_stdin()
        records = self.inputs()
        done = object()

        async def guarded(record: dict):
            try:
                return record, await fn(record), None
            except Exception as exc:  # noqa: BLE001
                return record, None, exc

        def finish(result) -> None:
            record, outputs, exc = result
            if exc is not None:
                self._fail(record, exc)
            else:
                self.emit(outputs, record)

        async def next_from(pipe: _PipeReader):
            """The next record of a pipe; what finishes while upstream is slow is written at once, in order, not
            held until the next line comes."""
            getting = asyncio.ensure_future(pipe.next())
            while not getting.done():
                head = [window[0]] if window else []
                await asyncio.wait({getting, *head}, return_when=asyncio.FIRST_COMPLETED)
                while window and window[0].done():
                    finish(window.popleft().result())
            return getting.result()

        # Regular files are read on the event loop; a pipe (stdin, a FIFO) by a thread of its own.
        pipe = _PipeReader(records, done, ahead=2 * concurrency) if from_pipe else None
        while True:
            record = await next_from(pipe) if pipe is not None else next(records, done)
            if record is done:
                break
            window.append(asyncio.create_task(guarded(record)))
            while window and (len(window) >= concurrency or window[0].done()):
                finish(await window.popleft())
        while window:
            finish(await window.popleft())
        if self._stdin is not None:  # (read to its end: no thread is reading it any more)
            self._stdin.close()
        return self.counts
