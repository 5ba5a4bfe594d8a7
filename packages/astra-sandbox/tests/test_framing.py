"""The supervisor channel: length-prefixed JSON frames, and observations made JSON-able."""

import json
import os
import threading
import time

import pytest
from astra_sandbox.inside.environment import to_jsonable
from astra_sandbox.inside.framing import read_frame, write_frame
from hypothesis import given, settings
from hypothesis import strategies as st

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30)
python_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.binary(max_size=8) | st.dates(),
    lambda children: (st.lists(children, max_size=4) | st.tuples(children, children)
                      | st.frozensets(st.integers(), max_size=4)
                      | st.dictionaries(st.integers() | st.text(max_size=4), children, max_size=4)),
    max_leaves=20)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.text(), json_values, max_size=6), st.sampled_from([0, 10, 70_000, 300_000]))
def test_frames_round_trip_through_a_pipe(message, padding):
    message = {**message, "padding": "x" * padding}  # some frames bigger than a pipe buffer
    read_fd, write_fd = os.pipe()
    try:
        writer = threading.Thread(target=write_frame, args=(write_fd, message))
        writer.start()
        received = read_frame(read_fd, deadline=time.monotonic() + 10)
        writer.join()
        assert received == message
    finally:
        os.close(read_fd)
        os.close(write_fd)


@given(python_values)
def test_to_jsonable_is_json_and_stable(value):
    converted = to_jsonable(value)
    assert json.loads(json.dumps(converted)) == converted
    assert to_jsonable(converted) == converted


def test_end_of_stream_timeouts_and_oversized_frames():
    read_fd, write_fd = os.pipe()
    with pytest.raises(TimeoutError):
        read_frame(read_fd, deadline=time.monotonic() + 0.05)
    os.write(write_fd, (2**31).to_bytes(4, "big"))
    with pytest.raises(ValueError, match="exceeds"):
        read_frame(read_fd)
    os.write(write_fd, b"\x00\x00\x00\x10{")  # a frame cut short by the writer exiting
    os.close(write_fd)
    assert read_frame(read_fd) is None
    os.close(read_fd)
