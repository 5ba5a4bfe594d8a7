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
    write_body(fd, json.dumps(message, default=str).encode(), deadline)


def write_body(fd: int, body: bytes, deadline: float | None = None) -> None:
    """Send one frame's JSON text as it is: header and body in one write (a pipe usually takes it whole)."""
    view = memoryview(_HEADER.pack(len(body)) + body)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            _wait(fd, write=True, deadline=deadline)


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
    return decode(body)


def decode(body: bytes) -> dict:
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ValueError("frame is not a JSON object")
    return message


def frames_in(data: bytes) -> list[dict]:
    """The complete frames at the start of `data` (a channel read to its end), decoded; a frame that is not a
    JSON object ends them."""
    frames, at = [], 0
    while at + _HEADER.size <= len(data):
        (size,) = _HEADER.unpack_from(data, at)
        end = at + _HEADER.size + size
        if end > len(data):
            break
        try:
            frames.append(decode(data[at + _HEADER.size:end]))
        except ValueError:
            break
        at = end
    return frames


class FrameReader:
    """Frames from one fd, read in as few syscalls as the data allows (usually one per frame).
    Bytes past a frame stay buffered for the next read, as they would have stayed in the pipe."""

    def __init__(self, fd: int):
        self.fd = fd
        self._buffer = bytearray()

    @property
    def pending(self) -> bool:
        return bool(self._buffer)

    def read(self, deadline: float | None = None, max_size: int = MAX_FRAME) -> dict | None:
        """As `read_frame`."""
        body = self.read_body(deadline, max_size)
        return None if body is None else decode(body)

    def read_body(self, deadline: float | None = None, max_size: int = MAX_FRAME) -> bytes | None:
        """One frame's JSON text, not decoded; None at end of stream."""
        if not self._fill(_HEADER.size, deadline):
            return None
        (size,) = _HEADER.unpack_from(self._buffer)
        if size > max_size:
            raise ValueError(f"frame of {size} bytes exceeds the {max_size} byte limit")
        end = _HEADER.size + size
        if not self._fill(end, deadline):
            return None
        body = bytes(self._buffer[_HEADER.size:end])
        del self._buffer[:end]
        return body

    def _fill(self, size: int, deadline: float | None) -> bool:
        while len(self._buffer) < size:
            _wait(self.fd, write=False, deadline=deadline)
            try:
                chunk = os.read(self.fd, min(max(size - len(self._buffer), 1 << 16), 1 << 20))
            except BlockingIOError:
                continue
            if not chunk:
                return False
            self._buffer += chunk
        return True
