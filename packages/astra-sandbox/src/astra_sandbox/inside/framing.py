"""Length-prefixed JSON frames: the host <-> supervisor <-> code channels. Standard library only."""

from __future__ import annotations

import json
import os
import select
import struct
import time

_HEADER = struct.Struct(">I")
MAX_FRAME = 256 << 20


def _wait(fd: int, *, write: bool, deadline: float | None) -> None:
    if deadline is None:
        return
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    ready = select.select([], [fd], [], remaining) if write else select.select([fd], [], [], remaining)
    if not ready[1 if write else 0]:
        raise TimeoutError


def write_frame(fd: int, message: dict, deadline: float | None = None) -> None:
    """Send one JSON message. With a deadline, `fd` should be non-blocking."""
    body = json.dumps(message, default=str).encode()
    view = memoryview(_HEADER.pack(len(body)) + body)
    while view:
        _wait(fd, write=True, deadline=deadline)
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            continue


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes | None:
    chunks, got = [], 0
    while got < size:
        _wait(fd, write=False, deadline=deadline)
        try:
            chunk = os.read(fd, min(size - got, 1 << 20))
        except BlockingIOError:
            continue
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, deadline: float | None = None, max_size: int = MAX_FRAME) -> dict | None:
    """Receive one JSON message; None at end of stream. Raises TimeoutError past the deadline,
    ValueError for a frame over `max_size` bytes or one that is not a JSON object."""
    header = _read_exact(fd, _HEADER.size, deadline)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > max_size:
        raise ValueError(f"frame of {size} bytes exceeds the {max_size} byte limit")
    body = _read_exact(fd, size, deadline)
    if body is None:
        return None
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ValueError("frame is not a JSON object")
    return message
