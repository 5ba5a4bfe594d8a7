"""The ready queue: each worker keeps blank episodes prepared (forked, isolated, waiting for their
code), forked in batches. What is handed out must be blank, used at most once, and gone with the pool."""

import json
import os
import signal
import time

import pytest
from astra_sandbox import SessionPool
from astra_sandbox.selftest import leftover_processes, prepared_processes, settled_snapshot

pytestmark = pytest.mark.nsjail

TRACES = r'''
import os, subprocess
MARK = []

def mark(text):
    MARK.append(text)
    with open("/tmp/mark", "w") as handle:
        handle.write(text)
    os.environ["MARK"] = text
    subprocess.Popen(["/bin/sleep", "300"])
    return "marked"

def look():
    return {"mark": MARK, "tmp": sorted(os.listdir("/tmp")), "env": os.environ.get("MARK"),
            "pids": len([p for p in os.listdir("/proc") if p.isdigit()]),
            "namespace": os.readlink("/proc/self/ns/pid")}

def die():
    os._exit(3)

def spin():
    while True:
        pass
'''
BLANK = {"mark": [], "tmp": [], "env": None, "pids": 1}
FORKS = """
import os, time

def fork_until_refused():
    children = 0
    while True:
        try:
            pid = os.fork()
        except OSError:
            return children
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children += 1
"""


@pytest.fixture
def one_worker(config):
    with SessionPool(size=1, config=config) as pool:
        yield pool


def ready(pool: SessionPool, wait_s: float = 10.0) -> list[int]:
    """The prepared episodes of the pool's only worker, once there is one."""
    deadline = time.monotonic() + wait_s
    while True:
        (status,) = pool.episode_status()
        if status["ready"] or time.monotonic() >= deadline:
            return status["ready"]
        time.sleep(0.02)


def _running(pid: int) -> bool:
    """Whether a process exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def look(session) -> dict:
    seen = json.loads(session.call("look").output)
    return {key: seen[key] for key in BLANK} | {"namespace": seen["namespace"]}


def test_episodes_are_prepared_ahead_in_batches_and_handed_out_oldest_first(one_worker, config):
    first = ready(one_worker)
    assert len(first) == config.ready_episodes > 1
    for used in range(1, config.ready_episodes + 1):
        with one_worker.session(TRACES + f"\n# environment {used}\n") as session:  # (none is loaded ahead)
            assert session.call("mark", {"text": "one"}).ok
        (status,) = one_worker.episode_status()
        assert status["running"] is None
        if used < config.ready_episodes:
            assert status["ready"] == first[used:]  # no fork until the last of the batch is taken
    second = ready(one_worker)  # forked together once the last was taken
    assert len(second) == config.ready_episodes and not set(second) & set(first)


def test_blank_episodes_do_not_use_up_the_code_s_process_limit(config):
    """Code may start max_processes - 1 other processes whatever waits in the ready queue (RLIMIT_NPROC
    counts all processes of the code's user). With two users, blank episodes wait as the supervisor's user;
    with one, they and the supervisor are counted out of the code's limit."""
    with SessionPool(size=1, config=config) as pool:
        assert len(ready(pool)) == config.ready_episodes
        if not config.one_user:
            assert {os.stat(f"/proc/{pid}").st_uid for pid in prepared_processes(pool).values()} == {0}
        with pool.session(FORKS) as session:
            assert session.call("fork_until_refused").output == str(config.max_processes - 1)


def test_an_episode_handed_out_is_blank(one_worker):
    namespaces = set()
    for text in ("one", "two", "three"):
        with one_worker.session(TRACES) as session:
            seen = look(session)
            assert {key: seen[key] for key in BLANK} == BLANK, seen
            namespaces.add(seen["namespace"])
            assert session.call("mark", {"text": text}).output == "marked"
            assert look(session)["tmp"] == ["mark"]
    assert len(namespaces) == 3  # three episodes, three pid namespaces


@pytest.mark.parametrize("ending", ["die", "spin"])
def test_a_crashed_or_timed_out_episode_is_never_reused(one_worker, ending):
    with one_worker.session(TRACES) as session:
        assert session.call("mark", {"text": "doomed"}).ok
        doomed = look(session)["namespace"]
        result = session.call(ending)
        assert result.kind == ("exception" if ending == "die" else "timeout")
    (status,) = one_worker.episode_status()
    assert status["running"] is None
    with one_worker.session(TRACES) as session:
        seen = look(session)
        assert seen["namespace"] != doomed
        assert {key: seen[key] for key in BLANK} == BLANK


def test_a_prepared_episode_that_died_is_not_handed_out(one_worker, config):
    next_up = ready(one_worker)[0]  # the oldest blank episode: the next one handed out
    waiting = prepared_processes(one_worker)[next_up]
    os.kill(waiting, signal.SIGKILL)  # the prepared episode's process, from the host
    deadline = time.monotonic() + 5
    while _running(waiting) and time.monotonic() < deadline:  # a zombie until the supervisor reaps it
        time.sleep(0.01)
    with one_worker.session(TRACES) as session:
        assert session.alive, session.load_error
        assert {key: value for key, value in look(session).items() if key in BLANK} == BLANK


def test_closing_the_pool_stops_its_prepared_episodes(config):
    pool = SessionPool(size=2, config=config)
    try:
        with pool.session(TRACES) as session:  # one worker used once, the other never
            assert session.call("look").ok
        prepared = settled_snapshot(pool, None, wait_s=10)
        # blank episodes waiting on each worker: a batch on the one never used, one fewer on the other
        assert sorted(len(status["ready"]) for status in pool.episode_status()) == [config.ready_episodes - 1,
                                                                                     config.ready_episodes]
        pids = [pid for group in prepared.values() for pid in group]  # (and the closed one, if not gone yet)
        assert len(prepared) >= 2 * config.ready_episodes - 1
        jails = pool.worker_pids()
    finally:
        pool.close()
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in pids + jails) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in pids + jails if os.path.exists(f"/proc/{pid}")] == []


def test_fresh_episodes_back_to_back_leave_nothing(one_worker, config):
    before = settled_snapshot(one_worker, config.uid)
    for _ in range(20):
        with one_worker.session(TRACES) as session:
            assert session.call("mark", {"text": "x"}).ok  # each leaves a sleeping child behind
    assert leftover_processes(one_worker, config.uid, before) == []
    assert 1 <= len(ready(one_worker)) <= config.ready_episodes


OTHER = "NAME = 'other'\ndef which():\n    return NAME\n"
SAME_NAME = "NAME = 'traces'\ndef which():\n    return NAME\n"


def test_an_environment_opened_again_is_loaded_ahead_and_still_blank(one_worker, config):
    for _ in range(2):  # the second open of the same code loads it ahead for the third
        with one_worker.session(TRACES) as session:
            assert session.call("mark", {"text": "earlier"}).ok
    (status,) = one_worker.episode_status()
    assert len(status["loaded"]) == 1 and len(status["ready"]) <= config.ready_episodes
    with one_worker.session(TRACES) as session:
        seen = look(session)
        assert {key: seen[key] for key in BLANK} == BLANK  # loaded fresh, nothing of the earlier episodes
    with one_worker.session(OTHER) as session:  # other code: the episode loaded ahead is not used
        assert session.tools == ["which"]
        assert session.call("which").output == "other"
    (status,) = one_worker.episode_status()
    assert status["loaded"] == []  # it was stopped, not kept
    with one_worker.session(SAME_NAME) as session:
        assert session.call("which").output == "traces"


def test_a_crash_while_loaded_ahead_is_reported_at_open(one_worker, config):
    code = "import os, threading, time\nthreading.Timer(0.3, os._exit, (5,)).start()\ndef ok():\n    return 1\n"
    for _ in range(2):
        with one_worker.session(code) as session:
            assert session.call("ok").ok
    time.sleep(1)  # the episode loaded ahead has exited by now
    with one_worker.session(code) as session:  # it is not handed out: a fresh load
        assert session.call("ok").ok
