"""The files a stage writes, claimed before it writes them.

Two mistakes lose data without a word: an output that is also an input (`stage data.jsonl -o data.jsonl`
empties the file before a line is read), and two runs writing one file (shards of a job array all given the
same `-o`, or a second `--resume` while the first still runs: each truncates or interleaves the other's
lines). A stage refuses the first, and holds an exclusive advisory lock (flock) on each regular file it writes
for as long as it runs, so the second run stops at once naming the file. Devices (/dev/null) are not claimed,
and a file system without flock support (some network mounts) is written unclaimed, as before.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from typing import IO


class ClaimRefused(Exception):
    """A file a stage was asked to write that it must not write (see the module docstring)."""


def claim(targets: dict[str, str | None], inputs: Iterable[str]) -> list[IO[bytes]]:
    """Claim every target (flag -> path; None and '-' are skipped); the returned handles hold the locks until
    they are closed. Raises ClaimRefused for an input written over, one file given twice, or a file in use."""
    files = {flag: path for flag, path in targets.items() if path and path != "-"}
    for flag, path in files.items():
        for source in inputs:
            if source != "-" and _same_regular_file(path, source):
                raise ClaimRefused(f"{flag} {path} is also an input: writing it would empty it before it is read "
                                   "(write to another file, then rename it)")
    flags = list(files)
    for i, first in enumerate(flags):
        for second in flags[i + 1:]:
            if _same_regular_file(files[first], files[second]):
                raise ClaimRefused(f"{first} and {second} name the same file, {files[first]}: give each its own")
    held: list[IO[bytes]] = []
    try:
        for flag, path in files.items():
            handle = _lock(flag, path)
            if handle is not None:
                held.append(handle)
    except ClaimRefused:
        release(held)
        raise
    return held


def release(held: list[IO[bytes]]) -> None:
    for handle in held:
        handle.close()
    held.clear()


def _same_regular_file(a: str, b: str) -> bool:
    """Whether two paths name one regular file (or, not existing yet, one path)."""
    try:
        first, second = os.stat(a), os.stat(b)
    except FileNotFoundError:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False
    return stat.S_ISREG(first.st_mode) and os.path.samestat(first, second)


def _lock(flag: str, path: str) -> IO[bytes] | None:
    """An append-mode handle holding an exclusive flock on `path` (created if missing; never truncated here), or
    None where nothing can be locked (a device, a FIFO, no fcntl on this platform, no flock on this mount)."""
    try:
        import fcntl
    except ImportError:  # not on this platform (Windows)
        return None
    try:
        handle = open(path, "ab")  # noqa: SIM115 - held open while the stage runs, closed by release()
    except OSError as exc:  # a directory, no such directory, no permission, a read-only file system
        raise ClaimRefused(f"cannot write {flag} {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            handle.close()
            return None
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ClaimRefused(f"{flag} {path} is being written by another run (shards or runs given the same file? "
                           "give each its own)") from None
    except OSError:  # ENOLCK, EOPNOTSUPP: a mount without flock; written unclaimed
        handle.close()
        return None
    return handle
