"""Environment sessions on the real jail: observations, every error kind, state, and episode isolation."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from astra_sandbox import SandboxError, SessionPool
from astra_sandbox.selftest import IPC_OBJECTS, leftover_processes, settled_snapshot

pytestmark = pytest.mark.nsjail

TOOLS = r'''
import datetime, os, time
from math import sqrt            # imported: not a tool
_SECRET_HELPER = 1

INVENTORY = {"apple": 3}
LOG = []

def _private():
    return "hidden"

def get_stock(item):
    return INVENTORY[item]

def add_stock(item, count: int = 1):
    INVENTORY[item] = INVENTORY.get(item, 0) + count
    LOG.append(item)
    return {"item": item, "stock": INVENTORY[item]}

def greet(name):
    print("greeting", name)
    return f"héllo {name}"

def nothing():
    return None

def odd_values():
    return {"when": datetime.date(2026, 1, 2), "tags": {"b"}}

def raise_type_error():
    return len(5)

def leave(code=0):
    raise SystemExit(code)

def spin():
    while True:
        pass

def nap(seconds):
    time.sleep(seconds)
    return "rested"

def die():
    os._exit(3)

def big(n):
    return "x" * n
'''


def test_observations_and_outputs(pool):
    with pool.session(TOOLS) as session:
        assert session.tools == ["add_stock", "big", "die", "get_stock", "greet", "leave", "nap", "nothing",
                                 "odd_values", "raise_type_error", "spin"]
        assert session.call("get_stock", {"item": "apple"}).output == "3"
        greeting = session.call("greet", {"name": "Ada"})
        assert greeting.output == "héllo Ada"  # a str return value as is
        assert greeting.stdout == "greeting Ada\n"  # prints are kept apart from the observation
        assert session.call("nothing").output == "null"
        assert json.loads(session.call("odd_values").output) == {"when": "2026-01-02", "tags": "{'b'}"}
        assert session.call("add_stock", '{"item": "pear", "count": 2}').output == '{"item": "pear", "stock": 2}'


AWAITED_AND_YIELDED = r'''
import asyncio

async def lookup(city: str):
    await asyncio.sleep(0)
    if city == "Atlantis":
        raise KeyError(city)
    return {"city": city, "capital": city == "Oslo"}

def countdown(n: int):
    print("counting")
    yield from range(n, 0, -1)
'''


def test_async_tools_are_awaited_and_generators_listed(pool):
    """An `async def` tool (as MCP servers write theirs) gives what it returns, not a coroutine; a generator, its items."""
    with pool.session(AWAITED_AND_YIELDED) as session:
        assert session.tools == ["countdown", "lookup"]
        assert json.loads(session.call("lookup", {"city": "Oslo"}).output) == {"city": "Oslo", "capital": True}
        failed = session.call("lookup", {"city": "Atlantis"})
        assert (failed.kind, failed.error) == ("exception", "KeyError: 'Atlantis'")
        assert session.call("lookup", {"town": "Oslo"}).kind == "bad_arguments"
        counted = session.call("countdown", {"n": 3})
        assert (counted.output, counted.stdout) == ("[3, 2, 1]", "counting\n")


UNSHOWABLE = r'''
import math, os, struct
STATE = {"ratio": float("nan"), "limit": math.inf}

class Opaque:
    def __str__(self):
        raise RuntimeError("no text")
    __repr__ = __str__

def nested():
    value = []
    for _ in range(5000):
        value = [value]
    return value

def opaque():
    return {"o": Opaque()}

def broken_text():
    print("p\ud800")
    return "a\ud800b"

def fine():
    return "ok"

def forged(raw: bool = False):  # its own reply frame with a lone surrogate (escaped, or its UTF-8 bytes), then gone
    text = b"x\xed\xb2\x80" if raw else b"x\\udc80"
    body = b'{"ok": true, "kind": "ok", "error": null, "output": "' + text + b'", "stdout": ""}'
    os.write(4, struct.pack(">I", len(body)) + body)
    os._exit(0)
'''


def test_values_that_cannot_be_shown_do_not_end_the_episode(pool):
    """A return value too deep to encode or whose __str__ raises is an exception observation; text with lone
    surrogates (which no UTF-8 writer takes) reaches the host with '?' in their place, also in a forged reply;
    NaN and infinities in a state (JSON has none) come as text."""
    with pool.session(UNSHOWABLE) as session:
        for name, cause in (("nested", "RecursionError"), ("opaque", "RuntimeError: no text")):
            result = session.call(name)
            assert result.kind == "exception" and result.error.startswith(f"the return value cannot be shown: {cause}")
        text = session.call("broken_text")
        assert (text.output, text.stdout) == ("a?b", "p?\n")
        json.dumps(text.to_dict(), ensure_ascii=False).encode("utf-8")  # any UTF-8 writer takes it
        assert session.call("fine").output == "ok"
        assert session.state() == {"STATE": {"ratio": "nan", "limit": "inf"}}
        assert session.call("forged").output == "x?"
    with pool.session(UNSHOWABLE) as session:
        assert session.call("forged", {"raw": True}).output == "x?"


def test_every_error_kind_is_an_observation(pool):
    with pool.session(TOOLS) as session:
        cases = [
            ("nope", None, "unknown_tool"),
            ("_private", None, "unknown_tool"),
            ("sqrt", {"x": 4}, "unknown_tool"),
            ("get_stock", {}, "bad_arguments"),
            ("get_stock", {"item": "apple", "extra": 1}, "bad_arguments"),
            ("get_stock", ["apple"], "bad_arguments"),
            ("get_stock", "{not json", "bad_arguments"),
            ("get_stock", {"item": "kiwi"}, "exception"),
            ("raise_type_error", {}, "exception"),  # a TypeError inside the tool is not a bad call
            ("leave", {"code": 2}, "exception"),
        ]
        for name, arguments, kind in cases:
            result = session.call(name, arguments)
            assert (result.ok, result.kind) == (False, kind), (name, arguments, result)
            assert result.output == f"Error: {result.error}"
        assert "available tools: add_stock" in session.call("nope").error
        assert "KeyError: 'kiwi'" in session.call("get_stock", {"item": "kiwi"}).error
        assert session.alive  # none of that ends the episode
        assert session.call("get_stock", {"item": "apple"}).ok


def test_timeout_stops_the_episode_but_not_the_pool(pool, config):
    with pool.session(TOOLS) as session:
        result = session.call("spin")
        assert (result.ok, result.kind) == (False, "timeout")
        assert not session.alive
        later = session.call("get_stock", {"item": "apple"})
        assert later.kind == "timeout" and "no longer running" in later.error
        with pytest.raises(SandboxError):
            session.state()
    with pool.session(TOOLS) as session:
        assert session.call("nap", {"seconds": config.call_timeout_s * 3}).kind == "timeout"
    with pool.session(TOOLS) as fresh:
        assert fresh.call("get_stock", {"item": "apple"}).output == "3"


def test_crash_is_an_exception_observation(pool):
    with pool.session(TOOLS) as session:
        result = session.call("die")
        assert result.kind == "exception" and "exited with code 3" in result.error
        assert not session.alive
        assert session.call("get_stock", {"item": "apple"}).kind == "exception"


def test_large_observation_is_capped(pool, config):
    with pool.session(TOOLS) as session:
        result = session.call("big", {"n": config.max_output_bytes * 4})
        assert result.ok
        assert len(result.output) < config.max_output_bytes + 100
        assert result.output.endswith("characters]")


@pytest.mark.parametrize(("code", "fragment"), [
    ("def broken(:\n    pass", "SyntaxError"),
    ("raise RuntimeError('no database')", "RuntimeError: no database"),
    ("import numpy_that_does_not_exist", "ModuleNotFoundError"),
    ("while True:\n    pass", "timed out"),
])
def test_load_errors(pool, code, fragment):
    with pool.session(code) as session:
        assert not session.alive
        assert fragment in session.load_error
        result = session.call("anything", {})
        assert result.kind == "load_error" and fragment in result.error


def test_state_snapshot_and_get_state(pool):
    with pool.session(TOOLS) as session:
        session.call("add_stock", {"item": "apple", "count": 2})
        assert session.state() == {"INVENTORY": {"apple": 5}, "LOG": ["apple"]}
    custom = "DB = {'n': 1}\ndef get_state():\n    return {'count': DB['n'], 'items': {1, 2}}\n"
    with pool.session(custom) as session:
        assert session.state() == {"count": 1, "items": [1, 2]}


def test_state_persists_within_an_episode_and_is_gone_in_the_next(pool):
    for _ in range(2):
        with pool.session(TOOLS) as session:
            assert [session.call("add_stock", {"item": "apple"}).output for _ in range(3)] == [
                '{"item": "apple", "stock": 4}', '{"item": "apple", "stock": 5}', '{"item": "apple", "stock": 6}']


TRACES = r'''
import os, subprocess, sys, time
COUNTER = 0

def bump():
    global COUNTER
    COUNTER += 1
    return COUNTER

def leave_traces():
    with open("/tmp/trace", "w") as handle:
        handle.write("x")
    os.environ["TRACE"] = "1"
    import fractions
    fractions.TRACE = True
    subprocess.Popen(["/bin/sleep", "300"])
    child = os.fork()
    if child == 0:  # a daemonized grandchild, orphaned
        os.setsid()
        subprocess.Popen(["/bin/sleep", "301"])
        os._exit(0)
    os.waitpid(child, 0)
    for _ in range(50):  # a just-exec'd child shows up in /proc a moment later
        if len([p for p in os.listdir("/proc") if p.isdigit()]) >= 3:
            break
        time.sleep(0.01)
    return "left"

def look():
    import fractions
    return {"counter": COUNTER, "tmp": sorted(os.listdir("/tmp")), "env": os.environ.get("TRACE"),
            "fractions_marked": hasattr(fractions, "TRACE"),
            "pids": len([p for p in os.listdir("/proc") if p.isdigit()])}

def modules_before_import():
    return "fractions" in sys.modules

def leave_ipc():
    return reach(create=True)

def find_ipc():
    return reach(create=False)
''' + IPC_OBJECTS  # the selftest's: reach(create) lists the IPC objects of a fixed key it reaches


# Run as a child: become root of a new user namespace with a new IPC namespace, and set a limit of that.
SET_IPC_LIMIT = """
import os
uid, gid = os.getuid(), os.getgid()
os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWIPC)
for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
    with open(f"/proc/self/{name}", "w") as handle:
        handle.write(text)
with open("/proc/sys/kernel/shmmni", "w") as handle:
    handle.write("0")
"""


def kernel_lets_a_namespace_close_ipc() -> bool:
    """Whether this kernel lets root of a user namespace set the limits of its IPC namespace: then the
    supervisor closes its jail to IPC objects, else every episode gets an IPC namespace of its own."""
    return subprocess.run([sys.executable, "-I", "-c", SET_IPC_LIMIT], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def one_worker(config):
    """A pool of one worker, so consecutive episodes certainly share it."""
    with SessionPool(size=1, config=config) as pool:
        yield pool


def test_nothing_is_shared_across_episodes(one_worker, config):
    before = settled_snapshot(one_worker, config.uid)
    with one_worker.session(TRACES) as first:
        assert first.call("modules_before_import").output == "false"
        assert [first.call("bump").output for _ in range(2)] == ["1", "2"]
        assert first.call("leave_traces").output == "left"
        seen = json.loads(first.call("look").output)
        assert seen["tmp"] == ["trace"] and seen["env"] == "1" and seen["fractions_marked"]
        assert seen["pids"] >= 3  # the tool process and its two sleeping children
        # where the jail is closed to IPC objects none is made; else the episode's own IPC namespace holds them
        made = json.loads(first.call("leave_ipc").output)
        assert made == ([] if kernel_lets_a_namespace_close_ipc() else ["shmget", "msgget", "semget", "mq_open"])
        assert json.loads(first.call("find_ipc").output) == made
    # the episode's whole process tree is gone, on the host too
    assert leftover_processes(one_worker, config.uid, before) == []
    with one_worker.session(TRACES) as second:
        assert second.call("modules_before_import").output == "false"
        assert second.call("bump").output == "1"
        seen = json.loads(second.call("look").output)
        assert seen == {"counter": 1, "tmp": [], "env": None, "fractions_marked": False, "pids": 1}
        assert second.call("find_ipc").output == "[]"


def test_sessions_from_many_threads(pool):
    errors: list = []

    def episode(worker_number: int) -> None:
        try:
            for _ in range(2):
                with pool.session(TOOLS) as session:
                    for count in range(1, 16):
                        result = session.call("add_stock", {"item": f"t{worker_number}"})
                        assert json.loads(result.output)["stock"] == count, result
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=episode, args=(number,)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_declared_requirements_and_nothing_else(pool):
    code = ("import tqdm\n"
            "def version():\n    return tqdm.__version__\n"
            "def other():\n    import click\n    return 'imported'\n")
    with pool.session(code, requirements=["tqdm>=4"]) as session:
        assert session.alive, session.load_error
        assert session.call("version").ok
        result = session.call("other")
        assert result.kind == "exception" and "No module named 'click'" in result.error
    with pool.session(code) as session:  # not declared: not importable
        assert "No module named 'tqdm'" in session.load_error
    compiled = "import orjson\ndef dump(value):\n    return orjson.dumps(value).decode()\n"
    with pool.session(compiled, requirements=["orjson"]) as session:  # a compiled extension
        assert session.call("dump", {"value": [1, 2]}).output == "[1,2]"


def test_unknown_requirement_is_a_load_error(pool):
    with pool.session("x = 1", requirements=["surely-not-installed-pkg"]) as session:
        assert "not installed" in session.load_error
        assert session.call("x").kind == "load_error"


def test_a_forgotten_session_gives_its_worker_back(one_worker):
    import gc

    forgotten = one_worker.session(TRACES)
    assert forgotten.call("bump").output == "1"
    del forgotten
    gc.collect()
    with one_worker.session(TRACES, wait_s=10) as session:  # the only worker is free again
        assert session.call("bump").output == "1"


def _supervisor_fds(pool) -> int:
    """Open fds of the pool's (single) in-jail supervisor: nsjail's child process."""
    (jail_pid,) = pool.worker_pids()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == jail_pid:
                        return len(os.listdir(f"/proc/{entry}/fd"))
            except OSError:
                continue
    raise AssertionError("no supervisor under the worker")


def _settled_supervisor_fds(pool, at_most: int, wait_s: float = 15.0) -> int:
    """The supervisor's fd count once closing episodes have let go of theirs (polls up to `wait_s`:
    a loaded machine reaps late). A leak grows with every episode and never settles."""
    deadline = time.monotonic() + wait_s
    while True:
        count = _supervisor_fds(pool)
        if count <= at_most or time.monotonic() >= deadline:
            return count
        time.sleep(0.05)


def test_episode_churn_leaks_nothing(one_worker, config):
    """Many episodes, ending every way an episode can end, on one worker, back to back."""
    jail_before = one_worker.worker_pids()
    before = settled_snapshot(one_worker, config.uid)
    fds_before = _supervisor_fds(one_worker)
    for round_number in range(12):
        with one_worker.session(TOOLS) as session:  # closed normally
            assert session.call("add_stock", {"item": "x"}).ok
        with one_worker.session(TOOLS) as session:  # crashed
            assert session.call("die").kind == "exception"
        with one_worker.session("import sys\nsys.exit(1)") as session:  # failed to load
            assert session.load_error
        assert one_worker.run_code({"code": "import os\nos.fork()\nprint('x')"})["status"] == "Success"
        if round_number % 4 == 0:
            with one_worker.session(TOOLS) as session:  # timed out
                assert session.call("spin").kind == "timeout"
    assert one_worker.worker_pids() == jail_before  # the worker was never lost
    assert leftover_processes(one_worker, config.uid, before) == []
    # ~50 episodes ran: a leak of even one fd per episode shows as +50. A spare episode may hold a few.
    assert _settled_supervisor_fds(one_worker, at_most=fds_before + 10) <= fds_before + 10
