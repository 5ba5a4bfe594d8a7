"""Hostile code in the real jail. Each case asserts containment with evidence from inside the
sandbox and from the host (a loopback listener, host files, left-over processes, the pool).
The count tried/contained is printed at the end of the run (see conftest)."""

import json
import os

import pytest
from astra_sandbox import SessionPool
from astra_sandbox.jail import code_host_uid
from astra_sandbox.selftest import CASES, SECRET_ENV, Probe, leftover_processes, run_case, settled_snapshot

pytestmark = pytest.mark.nsjail


@pytest.fixture(scope="module")
def probe():
    with Probe() as probe:
        yield probe


@pytest.fixture(scope="module")
def hostile_pool(config, probe):
    """Started while the fake secret is in the host's environment. A jail of two users as root (this suite's
    run in test_rootless.py is without root: a jail of one user)."""
    assert os.environ[SECRET_ENV] == probe.secret
    with SessionPool(size=1, config=config) as pool:  # one worker: leftovers are told apart by namespace
        yield pool


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_program_is_contained(case, hostile_pool, probe, security_tally):
    outcome = run_case(case, hostile_pool, probe)
    security_tally(case.name, outcome.contained)
    assert outcome.contained, outcome.evidence


def test_the_catalog_covers_every_threat_of_the_issue():
    names = {case.name for case in CASES}
    assert {"network-loopback", "network-public", "read-host-files", "write-outside-tmp", "fork-bomb", "memory-bomb",
            "infinite-loop", "huge-output", "kill-parent", "kill-everything", "proc-escape", "ctypes-privileges",
            "environment-secrets"} <= names


TOOL_ATTACKS = r'''
import ctypes, os, signal, socket, subprocess, sys

def probe():
    seen = {}
    try:
        seen["secret_file"] = open("SECRET_FILE").read()
    except OSError as exc:
        seen["secret_file"] = f"denied: {exc.strerror}"
    seen["env"] = os.environ.get("SECRET_ENV", "absent")
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=1)
        seen["loopback"] = "connected"
    except OSError as exc:
        seen["loopback"] = f"blocked: {exc.strerror}"
    try:
        open("FORBIDDEN_WRITE", "w").write("pwned")
        seen["host_write"] = "wrote"
    except OSError as exc:
        seen["host_write"] = f"denied: {exc.strerror}"
    if os.getppid() == 0:
        seen["kill_parent"] = "out of view: the parent is outside this pid namespace"
    else:
        try:
            os.kill(os.getppid(), signal.SIGKILL)
            seen["kill_parent"] = "killed"
        except OSError as exc:
            seen["kill_parent"] = f"denied: {exc.strerror}"
    capabilities = lambda: [line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")][0]
    already = os.getuid() == 0 and capabilities() == "0" * 16  # a jail of one user: uid 0 of it, no capability
    if ctypes.CDLL(None).setuid(0) != 0:
        seen["setuid0"] = "refused"
    else:
        seen["setuid0"] = "no gain" if already and capabilities() == "0" * 16 else "became root"
    return seen

def fork_until_refused():
    children = 0
    try:
        while children < 10000:
            if os.fork() == 0:
                import time
                time.sleep(60)
                os._exit(0)
            children += 1
    except OSError:
        pass
    return children

def hoard():
    return len([bytearray(32 << (20 + doubling)) for doubling in range(12)])

def kill_everything():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    subprocess.run(["/bin/sh", "-c", "kill -9 -1"])
    return f"survived; own child {child.wait()}"

def flood_reply():
    # a reply frame announcing 200 MB: the supervisor must refuse it, not relay it to the host
    import struct
    os.write(4, struct.pack(">I", 200 << 20) + b"{" * 65536)
    import time
    time.sleep(5)
    return "unreachable"

def forge_reply():
    # write a fake reply frame on the channel to the supervisor, then a bogus huge frame header
    import json, struct
    body = json.dumps({"ok": True, "kind": "ok", "output": "FORGED"}).encode()
    os.write(4, struct.pack(">I", len(body)) + body)
    os.write(4, struct.pack(">I", 2**31))
    return "real"
'''


def attack_code(probe: Probe) -> str:
    return probe.fill(TOOL_ATTACKS)


def test_tool_code_cannot_reach_the_host(hostile_pool, probe, security_tally):
    with hostile_pool.session(attack_code(probe)) as session:
        seen = json.loads(session.call("probe").output)
    contained = (seen["secret_file"].startswith("denied") and seen["env"] == "absent"
                 and seen["loopback"].startswith("blocked") and seen["host_write"].startswith("denied")
                 and seen["kill_parent"].startswith(("denied", "out of view")) and seen["setuid0"] in ("refused", "no gain")
                 and probe.connections == 0 and not os.path.exists(probe.forbidden_write))
    security_tally("session-tool-reaches-host", contained)
    assert contained, seen


def test_tool_fork_bomb_is_bounded_and_cleaned_up(hostile_pool, config, probe, security_tally):
    uid = code_host_uid(hostile_pool.config)
    before = settled_snapshot(hostile_pool, uid)
    with hostile_pool.session(attack_code(probe)) as session:
        children = int(session.call("fork_until_refused").output)
        still_serving = session.call("probe").ok
    leftovers = leftover_processes(hostile_pool, uid, before)
    contained = children < config.max_processes and still_serving and leftovers == []
    security_tally("session-fork-bomb", contained)
    assert contained, (children, leftovers)


def test_tool_memory_bomb_is_an_exception(hostile_pool, probe, security_tally):
    with hostile_pool.session(attack_code(probe)) as session:
        result = session.call("hoard")
        contained = result.kind == "exception" and "MemoryError" in result.error and session.call("probe").ok
    security_tally("session-memory-bomb", contained)
    assert contained, result


def test_tool_killing_everything_reaches_only_its_episode(hostile_pool, probe, security_tally):
    with hostile_pool.session(attack_code(probe)) as session:
        result = session.call("kill_everything")
        # its own child is killed; the code, pid 1 of the episode's namespace, is spared and keeps serving
        only_its_own = result.output == "survived; own child -9" and session.call("probe").ok
    with hostile_pool.session(attack_code(probe)) as fresh:
        serving = fresh.call("probe").ok
    contained = only_its_own and serving and hostile_pool.workers_alive == hostile_pool.size
    security_tally("session-kill-everything", contained)
    assert contained, result


def test_forged_replies_only_confuse_their_own_episode(hostile_pool, probe, security_tally):
    with hostile_pool.session(attack_code(probe)) as session:
        first = session.call("forge_reply")
        second = session.call("probe")  # the channel is garbage now: this episode is stopped
    with hostile_pool.session(attack_code(probe)) as fresh:
        clean = fresh.call("probe").ok
    contained = (first.output == "FORGED" and not second.ok and not session.alive and clean
                 and hostile_pool.workers_alive == hostile_pool.size)
    security_tally("session-forged-replies", contained)
    assert contained, (first, second)


def test_oversized_replies_are_refused(hostile_pool, probe, security_tally):
    with hostile_pool.session(attack_code(probe)) as session:
        result = session.call("flood_reply")
        refused = result.kind == "exception" and "exceeds" in result.error and not session.alive
    contained = refused and hostile_pool.workers_alive == hostile_pool.size
    security_tally("session-oversized-reply", contained)
    assert contained, result
