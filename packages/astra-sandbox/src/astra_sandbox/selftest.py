"""Hostile snippets and the evidence that each one is contained (`astra-sandbox selftest`, tests).

Every case is real code run in the real sandbox; its check looks at what the code reported *and*
at the host (a loopback listener that must see no connection, host files that must stay unread
and unwritten, no sandbox process left behind, the pool still serving). Nothing here sends
traffic off the machine: the "public IP" probe only asks the kernel for a route (UDP connect).
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from astra_sandbox.jail import code_host_uid, code_jail_uid
from astra_sandbox.pool import SessionPool

SECRET_ENV = "ASTRA_SELFTEST_SECRET"


@dataclass
class Probe:
    """Host-side bait and witnesses for one selftest run."""

    secret: str = field(default_factory=lambda: "s3cr3t-" + os.urandom(8).hex())
    listener: socket.socket | None = None
    connections: int = 0
    secret_file: str = ""
    host_file: str = os.path.abspath(__file__)
    forbidden_write: str = ""
    code_uid: int = 65534  # the uid the code should have inside the jail (set by run_case)

    def __enter__(self) -> Probe:
        os.environ[SECRET_ENV] = self.secret
        handle, self.secret_file = tempfile.mkstemp(prefix="astra-selftest-secret-")
        os.write(handle, self.secret.encode())
        os.close(handle)
        # outside /tmp: inside the jail, /tmp is the program's own tmpfs
        self.forbidden_write = os.path.expanduser(f"~/.astra-selftest-escape-{os.urandom(4).hex()}")
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while self.listener is not None:
            try:
                connection, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            connection.close()

    def __exit__(self, *exc_info) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.close()
        os.environ.pop(SECRET_ENV, None)
        for path in (self.secret_file, self.forbidden_write):
            if path and os.path.exists(path):
                os.unlink(path)

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def fill(self, code: str) -> str:
        return (code.replace("PORT", str(self.port)).replace("SECRET_FILE", self.secret_file)
                .replace("HOST_FILE", self.host_file).replace("FORBIDDEN_WRITE", self.forbidden_write)
                .replace("SECRET_ENV", SECRET_ENV))


def episode_processes(pool: SessionPool, uid: int | None) -> dict[str, list[int]]:
    """The pool's episode processes (running as host user `uid` under its workers, or as anyone: None), by
    episode (pid namespace and its pid 1). A worker's blank prepared episodes are single idle processes, which
    wait as the supervisor's user until given code (with two users, not as `uid`). The workers and their
    supervisors are not episodes (in a jail of one user they run as `uid` too)."""
    parents: dict[int, int] = {}
    owned: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            if uid is None or os.stat(f"/proc/{entry}").st_uid == uid:
                owned.append(int(entry))
        except (OSError, IndexError):
            continue
    roots = set(pool.worker_pids())

    def under_pool(pid: int) -> bool:
        if pid in roots or parents.get(pid) in roots:
            return False
        for _ in range(64):
            if pid in roots:
                return True
            if pid <= 1:
                return False
            pid = parents.get(pid, 0)
        return False

    def episode_key(pid: int) -> str:
        """The pid namespace and the host pid of its pid 1: the kernel reuses a freed namespace's
        inode number, so the inode alone can make a new episode look like an old one."""
        namespace = os.readlink(f"/proc/{pid}/ns/pid")
        for _ in range(64):
            parent = parents.get(pid, 0)
            if parent <= 1 or os.readlink(f"/proc/{parent}/ns/pid") != namespace:
                return f"{namespace}@{pid}"
            pid = parent
        return namespace

    namespaces: dict[str, list[int]] = {}
    for pid in owned:
        if under_pool(pid):
            try:
                namespaces.setdefault(episode_key(pid), []).append(pid)
            except OSError:
                continue
    return namespaces


def leftover_processes(pool: SessionPool, uid: int, before: dict[str, list[int]], wait_s: float = 15.0) -> list[int]:
    """Processes that outlived their episode, on a pool of one worker: anything of an episode that
    existed `before` and is no longer one the worker holds prepared (so it was used and is over), or
    more than the one idle process of a prepared episode. Closed episodes exit within milliseconds (a
    fork bomb's teardown can take seconds on a loaded machine); this polls up to `wait_s` for them."""
    if pool.size != 1:
        raise ValueError("leftover_processes needs a pool of one worker (it tells episodes apart by namespace)")
    deadline = time.monotonic() + wait_s
    while True:
        now = episode_processes(pool, uid)
        prepared = prepared_episodes(pool)
        extra = [pid for episode, pids in now.items()
                 if (episode in before and _jail_pid(episode) not in prepared) or len(pids) > 1 for pid in pids]
        if not extra or time.monotonic() >= deadline:
            return extra
        time.sleep(0.05)


def prepared_episodes(pool: SessionPool) -> set[int]:
    """Pids (in their jail) of the episodes the idle workers hold prepared, blank or loaded ahead."""
    return {pid for status in pool.episode_status() for pid in status.get("ready", []) + status.get("loaded", [])}


def _jail_pid(episode: str) -> int | None:
    """The pid in its jail of an episode's pid 1, from its key (see `episode_processes`)."""
    try:
        with open(f"/proc/{episode.rsplit('@', 1)[1]}/status") as handle:
            for line in handle:
                if line.startswith("NSpid:"):
                    return int(line.split()[2])  # host, jail, episode
    except (OSError, IndexError, ValueError):
        pass
    return None


def settled_snapshot(pool: SessionPool, uid: int | None, wait_s: float = 2.0) -> dict[str, list[int]]:
    """The pool's episode processes (see `episode_processes`) once every worker has blank episodes ready."""
    deadline = time.monotonic() + wait_s
    while not all(status.get("ready") for status in pool.episode_status()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return episode_processes(pool, uid)


def prepared_processes(pool: SessionPool) -> dict[int, int]:
    """{pid in its jail: host pid} of the blank episodes and those loaded ahead (see `prepared_episodes`) of a
    pool of one worker."""
    prepared = prepared_episodes(pool)
    return {jail_pid: int(episode.rsplit("@", 1)[1]) for episode in episode_processes(pool, None)
            if (jail_pid := _jail_pid(episode)) in prepared}


@dataclass(frozen=True)
class Hostile:
    name: str
    threat: str
    code: str
    check: Callable[[dict, Probe], tuple[bool, str]]
    """(run_code result, probe) -> (contained, evidence)."""
    then: str = ""
    """A second program, run next on the same worker; its result reaches the check as result["then"]."""


def _out(result: dict) -> str:
    run = result.get("run_result") or {}
    return (run.get("stdout") or "") + (run.get("stderr") or "")


def _lines(result: dict, prefix: str) -> list[str]:
    return [line for line in _out(result).splitlines() if line.startswith(prefix)]


def _no_lines(prefix: str, what: str) -> Callable[[dict, Probe], tuple[bool, str]]:
    def check(result: dict, probe: Probe) -> tuple[bool, str]:
        hits = _lines(result, prefix)
        finished = (result.get("run_result") or {}).get("status") == "Finished"
        evidence = "; ".join(hits[:3]) if hits else f"every {what} failed"
        return finished and not hits, evidence if finished else f"did not finish: {result.get('message')}"
    return check


def _check_network_loopback(result: dict, probe: Probe) -> tuple[bool, str]:
    blocked = _lines(result, "BLOCKED")
    return (bool(blocked) and probe.connections == 0,
            f"{blocked[0] if blocked else 'connected'}; host listener saw {probe.connections} connections")


def _check_network_public(result: dict, probe: Probe) -> tuple[bool, str]:
    routes = _lines(result, "ROUTE ")
    interfaces = _lines(result, "IFACES")
    only_lo = interfaces == ["IFACES ['lo']"]
    return not routes and only_lo, f"{interfaces[0] if interfaces else 'no interface list'}; routes: {routes or 'none'}"


def _check_read(result: dict, probe: Probe) -> tuple[bool, str]:
    hits = _lines(result, "READ ")
    leaked = probe.secret in _out(result)
    contained = not hits and not leaked and bool(_lines(result, "DENIED "))
    return contained, "; ".join(hits[:3]) if hits else ("secret leaked" if leaked else "every host path unreadable")


def _check_write(result: dict, probe: Probe) -> tuple[bool, str]:
    hits = _lines(result, "WROTE ")
    inside_ok = bool(_lines(result, "TMP OK"))
    escaped = os.path.exists(probe.forbidden_write)
    contained = not hits and not escaped and inside_ok
    return contained, "; ".join(hits[:3]) if hits else ("host file created" if escaped else
                                                        "only the private /tmp is writable")


def _check_status(expected: str, *, limit_s: float | None = None):
    def check(result: dict, probe: Probe) -> tuple[bool, str]:
        run = result.get("run_result") or {}
        ok = run.get("status") == expected
        return ok, f"{run.get('status')} after {run.get('execution_time')}s ({result.get('message')})"
    return check


def _check_fork_bomb(result: dict, probe: Probe) -> tuple[bool, str]:
    hits = _lines(result, "FORK LIMIT")
    return bool(hits), hits[0] if hits else f"no process limit hit: {_out(result)[-200:]}"


def _check_output(result: dict, probe: Probe) -> tuple[bool, str]:
    run = result.get("run_result") or {}
    size = len(run.get("stdout") or "")
    return "truncated" in (run.get("stdout") or "") and size < 2_000_000, f"stdout capped at {size} characters"


def _check_kill(result: dict, probe: Probe) -> tuple[bool, str]:
    hits = _lines(result, "KILLED")
    refused = _lines(result, "DENIED") + _lines(result, "OUT OF VIEW")
    return not hits and len(refused) == 2, "; ".join(hits or refused)


def _check_kill_all(result: dict, probe: Probe) -> tuple[bool, str]:
    run = result.get("run_result") or {}
    # `kill -9 -1` may only reach the program's own processes: its child dies; the program, pid 1 of its
    # namespace, is spared (the pool serving afterwards shows nothing outside was reached)
    own_child_killed = _lines(result, "CHILD -9") != []
    return own_child_killed or run.get("return_code") == -9, f"{'; '.join(_lines(result, 'CHILD'))}, program ended: " \
                                                               f"{run.get('return_code')}"


def _check_proc(result: dict, probe: Probe) -> tuple[bool, str]:
    hits = _lines(result, "ESCAPED ")
    visible = _lines(result, "PIDS ")
    few = bool(visible) and len(visible[0].split()) <= 4
    return not hits and few, "; ".join(hits[:3]) if hits else f"/proc shows only the program: {visible[:1]}"


def _check_ctypes(result: dict, probe: Probe) -> tuple[bool, str]:
    hits = _lines(result, "ALLOWED ")
    ident = _lines(result, "IDENTITY ")
    return (not hits and ident == [f"IDENTITY {probe.code_uid} 0000000000000000"],
            "; ".join(hits) or f"{ident}: every call refused or gained nothing")


def _check_segfault(result: dict, probe: Probe) -> tuple[bool, str]:
    run = result.get("run_result") or {}
    return run.get("return_code") == -11, f"return code {run.get('return_code')} (SIGSEGV stays in the sandbox)"


def _check_secret(result: dict, probe: Probe) -> tuple[bool, str]:
    leaked = probe.secret in _out(result) or SECRET_ENV in _out(result)
    seen = _lines(result, "ENV ")
    return not leaked and bool(seen), "secret leaked" if leaked else f"{seen[0][:120]}"


def _check_ipc(result: dict, probe: Probe) -> tuple[bool, str]:
    made, found = _lines(result, "MADE "), _lines(result.get("then") or {}, "FOUND ")
    contained = found == ["FOUND []"]
    return contained, f"{made[0] if made else 'no report'} in one program; the next: {found[0] if found else 'no report'}"


def _check_fill(result: dict, probe: Probe) -> tuple[bool, str]:
    hits = _lines(result, "STOPPED")
    return bool(hits), hits[0] if hits else _out(result)[-200:]


# The IPC objects of a fixed key that a program can reach (made first if `create`).
IPC_OBJECTS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
KEY = 0x4A58

def reach(create):
    flags = 0o1666 if create else 0  # IPC_CREAT, readable and writable by all
    reached = [name for name, args in (("shmget", (KEY, 4096, flags)), ("msgget", (KEY, flags)),
                                       ("semget", (KEY, 1, flags))) if getattr(libc, name)(*args) >= 0]
    if libc.mq_open(b"/astra-selftest", os.O_RDWR | (os.O_CREAT if create else 0), 0o666, None) >= 0:
        reached.append("mq_open")
    return reached
"""

CASES: list[Hostile] = [
    Hostile("network-loopback", "connect to a host service on 127.0.0.1", """
import socket
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=2)
    print("CONNECTED")
except OSError as exc:
    print("BLOCKED", exc)
""", _check_network_loopback),
    Hostile("network-public", "reach a public IP (route lookup only: nothing is sent)", """
import socket
print("IFACES", [name for _, name in socket.if_nameindex()])
for host in ("1.1.1.1", "8.8.8.8"):
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((host, 53))  # UDP connect: a route lookup, no packet
        print("ROUTE", host)
    except OSError as exc:
        print("NOROUTE", host, exc.errno)
""", _check_network_public),
    Hostile("read-host-files", "read host files outside the jail (secrets, /root, ~/.ssh, the repo)", """
import os
for path in ("SECRET_FILE", "HOST_FILE", "/etc/shadow", "/etc/passwd", "/root/.bashrc", "/root/.ssh/id_rsa",
             "/root/.ssh/authorized_keys", "/work", "/home", "/astra/site/0", "/var/log/syslog"):
    try:
        if os.path.isdir(path):
            entries = os.listdir(path)
            print(("READ " if entries else "DENIED ") + path, entries[:3])
        else:
            with open(path, "rb") as handle:
                print("READ", path, handle.read(40))
    except OSError as exc:
        print("DENIED", path, exc.strerror)
""", _check_read),
    Hostile("write-outside-tmp", "write outside the private /tmp", """
import os
for path in ("FORBIDDEN_WRITE", "/x", "/usr/x", "/usr/lib/x", "/etc/x", "/root/x", "/astra/x", "/bin/x", "/dev/x",
             "/proc/x", "HOST_FILE"):
    try:
        with open(path, "a") as handle:
            handle.write("pwned")
        print("WROTE", path)
    except OSError as exc:
        print("DENIED", path, exc.strerror)
with open("/tmp/inside", "w") as handle:
    handle.write("fine")
print("TMP OK")
""", _check_write),
    Hostile("fork-bomb", "exhaust the process table", """
import os, time
children = 0
try:
    for _ in range(100000):
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        children += 1
except OSError as exc:
    print("FORK LIMIT after", children, "children:", exc.strerror)
""", _check_fork_bomb),
    Hostile("memory-bomb", "allocate until the host runs out of memory", """
hoard, size = [], 32 << 20
while True:  # doubling, like a runaway list: 32 MB, 64 MB, 128 MB, ... 64 GB
    hoard.append(bytearray(size))
    size *= 2
""", _check_status("MemoryLimitExceeded")),
    Hostile("infinite-loop", "never return", """
while True:
    pass
""", _check_status("TimeLimitExceeded")),
    Hostile("huge-output", "flood stdout (200 MB)", """
import sys
chunk = "x" * (1 << 20)
for _ in range(200):
    sys.stdout.write(chunk)
""", _check_output),
    Hostile("kill-parent", "kill the supervising processes (parent, pid 1)", """
import os, signal
for target in (os.getppid(), 1):
    if target == 0:
        print("OUT OF VIEW parent: outside this pid namespace")
    elif target == os.getpid():
        print("OUT OF VIEW pid 1: the program itself")
    else:
        try:
            os.kill(target, signal.SIGKILL)
            print("KILLED", target)
        except OSError as exc:
            print("DENIED", target, exc.strerror)
""", _check_kill),
    Hostile("kill-everything", "kill -9 -1 (every process it can signal)", """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
subprocess.run(["/bin/sh", "-c", "kill -9 -1"])
print("CHILD", child.wait())
print("SURVIVED")
""", _check_kill_all),
    Hostile("proc-escape", "escape or peek through /proc (other processes' root, environ, mem; sysrq, sysctl)", """
import os
# every pid but the program's own (it is pid 1 of its namespace): a supervisor in view would be one of them
others = [pid for pid in range(1, 65) if pid != os.getpid()]
attempts = [(how, f"/proc/{pid}/{entry}") for pid in others
            for how, entry in (("list", "root"), ("list", "cwd"), ("read", "environ"), ("read", "mem"), ("read", "maps"))]
attempts += [("read", "/proc/kcore"), ("write", "/proc/sysrq-trigger"), ("write", "/proc/sys/kernel/hostname"),
             ("write", "/proc/self/oom_score_adj")]
denied = 0
for how, path in attempts:
    try:
        if how == "list":
            print("ESCAPED", path, os.listdir(path)[:5])
        elif how == "read":
            with open(path, "rb") as handle:
                data = handle.read(64)
            print("ESCAPED" if data else "EMPTY", path)
        else:
            with open(path, "w") as handle:
                handle.write("-1000" if "oom" in path else "pwned")
            print("ESCAPED", path)
    except OSError as exc:
        denied += 1
        if not path.split("/")[2].isdigit():
            print("DENIED", path, exc.strerror)
print("DENIED", denied, "of", len(attempts), "attempts")
print("PIDS", " ".join(sorted(entry for entry in os.listdir("/proc") if entry.isdigit())))
""", _check_proc),
    Hostile("ctypes-privileges", "use ctypes to regain privileges (setuid 0, mount, ptrace, new namespaces)", """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def capabilities():
    return [line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")][0]
def become_root():  # in a jail of one user the code is uid 0 already: then it must gain no capability
    already = os.getuid() == 0 and capabilities() == "0" * 16
    result = libc.setuid(0)
    return "no gain" if result == 0 and already and capabilities() == "0" * 16 else result
calls = {
    "setuid(0)": become_root,
    "mount tmpfs": lambda: libc.mount(b"none", b"/usr", b"tmpfs", 0, None),
    "ptrace(ATTACH, 1)": lambda: libc.ptrace(16, 1, None, None),
    "unshare(NEWNS)": lambda: libc.unshare(0x00020000),
    "unshare(NEWUSER)": lambda: libc.unshare(0x10000000),
    "chroot": lambda: libc.chroot(b"/tmp"),
}
for name, call in calls.items():
    result = call()
    if result == "no gain":
        print("NO GAIN", name)
    else:
        print("ALLOWED" if result == 0 else "REFUSED", name, os.strerror(ctypes.get_errno()))
print("IDENTITY", os.getuid(), capabilities())
""", _check_ctypes),
    Hostile("ctypes-segfault", "crash the interpreter through ctypes", """
import ctypes
ctypes.string_at(0)
""", _check_segfault),
    Hostile("environment-secrets", "read host secrets from environment variables", """
import os
print("ENV", sorted(os.environ))
print(dict(os.environ))
for path in ("/proc/self/environ", "/proc/1/environ"):
    try:
        print(open(path, "rb").read())
    except OSError as exc:
        print("DENIED", path, exc.strerror)
""", _check_secret),
    Hostile("disk-fill", "fill the disk through /tmp", """
import errno
written, files = 0, 0
try:
    while written < 4 << 30:  # one file until the size limit, then the next, until /tmp is full
        files += 1
        with open(f"/tmp/fill{files}", "wb", buffering=0) as handle:
            try:
                while True:
                    handle.write(b"\\0" * (1 << 20))
                    written += 1 << 20
            except OSError as exc:
                if exc.errno != errno.EFBIG:
                    raise
    print("WROTE", written)
except OSError as exc:
    print("STOPPED after", written >> 20, "MB in", files, "files:", exc.strerror)
""", _check_fill),
    Hostile("ipc-carry-over", "leave IPC objects (System V, POSIX message queues) for the next program",
            IPC_OBJECTS + 'print("MADE", reach(create=True))\n', _check_ipc,
            then=IPC_OBJECTS + 'print("FOUND", reach(create=False))\n'),
    Hostile("fd-exhaustion", "open files without limit", """
import os
handles = []
try:
    while len(handles) < 100000:
        handles.append(open("/dev/null"))
except OSError as exc:
    print("STOPPED after", len(handles), "files:", exc.strerror)
""", _check_fill),
]


@dataclass(frozen=True)
class Outcome:
    name: str
    threat: str
    contained: bool
    evidence: str


def run_case(case: Hostile, pool: SessionPool, probe: Probe) -> Outcome:
    """Run one hostile program on `pool` (one worker) and judge it with evidence from both sides."""
    uid = code_host_uid(pool.config)
    probe.code_uid = code_jail_uid(pool.config)
    before = settled_snapshot(pool, uid)
    result = pool.run_code({"code": probe.fill(case.code), "language": "python"})
    if case.then:
        result["then"] = pool.run_code({"code": probe.fill(case.then), "language": "python"})
    contained, evidence = case.check(result, probe)
    leftovers = leftover_processes(pool, uid, before)
    alive = pool.run_code({"code": "print('ok')"}).get("status") == "Success"
    if leftovers:
        contained, evidence = False, f"{evidence}; {len(leftovers)} sandbox processes left behind"
    if not alive:
        contained, evidence = False, f"{evidence}; the pool stopped serving"
    return Outcome(case.name, case.threat, contained, " ".join(evidence.split())[:160])


def run_selftest(pool: SessionPool, probe: Probe, cases: list[Hostile] | None = None) -> list[Outcome]:
    return [run_case(case, pool, probe) for case in (cases or CASES)]


def format_table(outcomes: list[Outcome]) -> str:
    width = max(len(outcome.name) for outcome in outcomes)
    lines = [f"{'snippet':<{width}}  contained  evidence", f"{'-' * width}  ---------  --------"]
    for outcome in outcomes:
        mark = "yes" if outcome.contained else "NO"
        lines.append(f"{outcome.name:<{width}}  {mark:<9}  {outcome.evidence}")
    contained = sum(outcome.contained for outcome in outcomes)
    lines.append(f"\n{contained}/{len(outcomes)} hostile snippets tried, {contained} contained")
    return "\n".join(lines)
