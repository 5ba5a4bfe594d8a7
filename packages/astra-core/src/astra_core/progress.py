"""Progress of a long command on stderr: done/total, rate and ETA.

On a terminal it is a tqdm bar. Elsewhere (a log file, a pipe, CI) a bar would be noise, so a command
that is still running after `interval` seconds prints a status line every `interval` seconds (less often
as the run goes on: every quarter of the time elapsed):

    astra-toolgraph evolve run: 1/3 records · 41.2 s/record · ETA 1m 22s · 45s elapsed · plan 2: rollouts

Short commands print nothing. `show=True` forces the bar, `show=False` silences both; the interval is
ASTRA_PROGRESS_INTERVAL seconds (default 15; 0 turns the status lines off).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

DEFAULT_INTERVAL = 15.0


def _interval() -> float:
    try:
        return float(os.environ.get("ASTRA_PROGRESS_INTERVAL", DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL


def duration(seconds: float) -> str:
    """'42s', '3m 05s', '1h 02m'."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def status_line(label: str, done: int, total: int | None, elapsed: float, unit: str = "record",
                note: str = "", initial: int = 0) -> str:
    """One line of progress: counts, the rate (per second, or seconds per unit when slower than one a
    second; `initial` of `done` were done before this run), the ETA when the total is known, the time
    elapsed and what is running now."""
    parts = [f"{done}/{total} {unit}s" if total is not None else f"{done} {unit}s done"]
    if done > initial and elapsed > 0:
        rate = (done - initial) / elapsed
        parts.append(f"{rate:.1f} {unit}s/s" if rate >= 1 else f"{1 / rate:.1f} s/{unit}")
        if total is not None and total >= done:
            parts.append(f"ETA {duration((total - done) / rate)}")
    parts.append(f"{duration(elapsed)} elapsed")
    if note:
        parts.append(note)
    return f"{label}: " + " · ".join(parts)


class Progress:
    """`with Progress(label, total) as progress: ... progress.update(); progress.note("rollouts")`.
    `total` may be a function, asked when the first status is shown (counting input lines costs a pass
    over the input: short commands never pay it)."""

    def __init__(self, label: str, total: int | Callable[[], int | None] | None = None, *, unit: str = "record",
                 show: bool | None = None, interval: float | None = None, stream: Any = None, initial: int = 0):
        self.label, self.unit = label, unit
        self.stream = stream if stream is not None else sys.stderr
        self._total_of = total if callable(total) else None
        self.total = None if callable(total) else total
        self.done, self.initial, self._note = initial, initial, ""  # initial: done before (a resumed run)
        self.interval = _interval() if interval is None else interval
        self._bar_wanted = show if show is not None else _isatty(self.stream)
        self._lines_wanted = show is None and not self._bar_wanted and self.interval > 0
        self._bar = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def __enter__(self) -> Progress:
        self._started = time.monotonic()
        if self._bar_wanted:
            from tqdm import tqdm

            self._bar = tqdm(total=self._resolve_total(), initial=self.initial, desc=self.label, unit=self.unit,
                             file=self.stream, dynamic_ncols=True, leave=False)
        elif self._lines_wanted:
            self._thread = threading.Thread(target=self._status_loop, name=f"progress {self.label}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def note(self, text: str) -> None:
        """What is running now (shown at the end of the status line, and as the bar's postfix)."""
        self._note = text
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def status(self) -> str:
        return status_line(self.label, self.done, self._resolve_total(), time.monotonic() - self._started,
                           self.unit, self._note, initial=self.initial)

    def _resolve_total(self) -> int | None:
        if self._total_of is not None:
            total_of, self._total_of = self._total_of, None
            try:
                self.total = total_of()
            except OSError:
                self.total = None
        return self.total

    def _status_loop(self) -> None:
        # Every `interval` seconds at first, then less often: a quarter of the time elapsed (a run of an hour
        # prints a line every 15 minutes, not 240 lines).
        while not self._stop.wait(max(self.interval, 0.25 * (time.monotonic() - self._started))):
            print(self.status(), file=self.stream, flush=True)


def _isatty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def count_lines(paths: tuple[str, ...] | list[str], limit_bytes: int = 1 << 30) -> int | None:
    """Lines in these files (records of JSONL inputs), or None when one is stdin, compressed, or they are too
    big to count cheaply."""
    from astra_core.jsonl import is_compressed

    if any(path == "-" or not os.path.isfile(path) or is_compressed(path) for path in paths):
        return None
    if sum(os.path.getsize(path) for path in paths) > limit_bytes:
        return None
    total = 0
    for path in paths:
        with open(path, "rb") as handle:
            for block in iter(lambda handle=handle: handle.read(1 << 20), b""):
                total += block.count(b"\n")
            if handle.tell() and not _ends_with_newline(path):
                total += 1
    return total


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"
