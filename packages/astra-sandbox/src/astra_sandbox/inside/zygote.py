"""The in-jail supervisor ("zygote") of one sandbox worker. Standard library only.

It runs inside nsjail as `python -I -S -c "...from inside.zygote import main..."` and talks to
the host over stdin/stdout in length-prefixed JSON frames (`framing`). It never runs untrusted
code itself: it only compiles an environment's code, once, so that its episodes start from bytecode
(`environment_bytecode`). For every episode (an environment session) or program (a `run_code` request) it
forks one fresh process:

    zygote    uid 0 of the jail's user namespace only; keeps CAP_SYS_ADMIN, SETUID, SETGID, KILL,
     │        SYS_RESOURCE there (namespaces and mounts per episode, the user switch, kills)
     └ code   pid 1 of a new pid + mount + uts namespace and a session of its own (in a jail
              closed to IPC objects, else in a new ipc namespace too): mounts
              /proc (hidepid) and a private /tmp, binds the declared requirements, hides the rest,
              waits for its job on fd 3, then drops to uid 65534 (no capabilities, rlimits) and
              serves an environment's tool calls (`environment`) or runs a program (`program`)

In a jail of one user (`--one-user`, e.g. started without root) there is no uid 65534 to drop to:
the code keeps the zygote's uid and gives up every capability for good instead (`privileges`). Its
pid namespace is what keeps it from signalling or tracing the zygote, which it can no longer see.

There is no separate init: the zygote is the code's parent (it reads its status and CPU time with
wait4), and a process of its own per episode would double the fork and copy-on-write work that
dominates an episode's cost. As pid 1, the code outlives `kill -9 -1` of its own children and
cannot see its parent. Ending an episode ends its pid namespace: every process in it dies, and
its mount namespace, with its /tmp, is gone. Nothing carries over to the next episode. Blank episodes
are always prepared ahead, in batches (an environment opened twice in a row is even loaded ahead into
one), and closed episodes are reaped while the host is quiet (see `Zygote`).

With `--unsafe` (development only) there are no namespaces and no user switch: episodes run as
the invoking user with a fresh temporary directory, a new session (process group) and the
rlimits, nothing more (RLIMIT_NPROC does not bind root).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import resource
import select
import signal
import stat
import sys
import time

from .environment import REPLY_FD, REQUEST_FD, environment_bytecode, failure, serve_environment, warm_up
from .framing import FrameReader, decode, frames_in, read_frame, write_body, write_frame
from .prefork import share_heap
from .privileges import drop_all_capabilities
from .program import add_site_builtins, run_program

SITE_ROOT = "/astra/site"  # host site-packages dirs, read-only, visible to the zygote only
REQ_ROOT = "/astra/req"  # per episode: exactly the declared requirements
UNSAFE_REQ_DIR = ".requirements"

# mount(2) flags
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2

REPLY_BASE_BYTES = 16 << 20
MAX_ENDING = 4  # closed episodes awaiting their exit before the zygote waits for them
QUIET_S = 0.003  # host silence after which the zygote does background work (a reply is often followed at once)
# The call of an episode at which the next blank episodes are forked (or its close, if it has fewer
# calls). Not at its first: then the fork would pile up with the previous episode's exit and the
# load ahead, which both start at the open.
REFILL_AT_CALL = 4


class Mounts:
    """mount(2) through libc: Python has no binding, and only an episode's process uses it, before it drops
    its privileges."""

    def __init__(self) -> None:
        import ctypes

        self._ctypes = ctypes
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._mount = self._libc.mount
        text = ctypes.c_char_p
        self._mount.argtypes = [text, text, text, ctypes.c_ulong, text]

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        def encode(text: str | None) -> bytes | None:
            return text.encode() if text is not None else None

        result = self._mount(encode(source), target.encode(), encode(fstype), flags, encode(data))
        if result != 0:
            errno = self._ctypes.get_errno()
            raise OSError(errno, f"mount {target}: {os.strerror(errno)}")

    def unmount(self, target: str) -> None:
        if self._libc.umount2(target.encode(), MNT_DETACH) != 0:
            errno = self._ctypes.get_errno()
            raise OSError(errno, f"umount {target}: {os.strerror(errno)}")

    def restrict_jail(self) -> bool:
        """Settings of the jail's own namespaces, for everything sandboxed code will ever run there:
        user.max_user_namespaces = 0 (no nested user namespaces, and with them no capabilities over
        new namespaces of its own), and room for no System V IPC object and no POSIX message queue
        (nothing an episode could leave in the jail's IPC namespace for the next one; code without
        capabilities cannot raise these limits). Returns whether IPC was closed this way: older
        kernels let only the host's root change IPC limits, and then every episode gets an IPC
        namespace of its own instead (a few percent of a one-call episode's CPU)."""
        proc = "/tmp/.astra-proc"
        os.mkdir(proc, 0o700)
        self.mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        try:
            _write(f"{proc}/sys/user/max_user_namespaces", "0")
            try:
                _close_ipc(f"{proc}/sys")
            except OSError:
                return False
            return True
        finally:
            self.unmount(proc)
            os.rmdir(proc)


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _close_ipc(sysctl: str) -> None:
    """No room for IPC objects in the caller's IPC namespace (see `Mounts.restrict_jail`)."""
    for name in ("kernel/shmmni", "kernel/msgmni", "fs/mqueue/queues_max"):
        _write(f"{sysctl}/{name}", "0")
    with open(f"{sysctl}/kernel/sem") as handle:  # SEMMSL SEMMNS SEMOPM SEMMNI
        semaphores = handle.read().split()
    _write(f"{sysctl}/kernel/sem", " ".join([*semaphores[:3], "0"]))


class Episode:
    """The zygote's handle on one episode (pid = its code process, in the zygote's namespace)."""

    def __init__(self, pid: int, fds: dict, workdir: str | None, limits: dict, site: list):
        self.pid, self.workdir, self.limits, self.site = pid, workdir, limits, site
        self.requests: int | None = fds["request"]
        self.replies = fds["reply"]
        self.reader = FrameReader(self.replies)
        self.outputs: tuple[int, int] | None = (fds["out"], fds["err"])
        self.pidfd = os.pidfd_open(pid)
        self.exit: dict | None = None  # {"status", "cpu"} of the code process, if it ended on its own
        self.timeout, self.deadline = 0.0, 0.0  # of the reply to the request in flight, if any

    def ended(self) -> bool:
        """Whether its code process is gone (and with it, as pid 1, its whole namespace)."""
        return bool(select.select([self.pidfd], [], [], 0)[0])

    def close_outputs(self) -> None:
        for fd in self.outputs or ():
            os.close(fd)
        self.outputs = None

    def fds(self) -> list[int]:
        return [fd for fd in (self.requests, self.replies, self.pidfd, *(self.outputs or ()))
                if fd is not None]


class Zygote:
    """Serves the host. Keeps blank episodes prepared (isolated, waiting for their code; forked in
    batches while the zygote waits for a reply anyway) so that opening an episode never waits for
    process start-up, and finishes closed episodes after replying, so the host never waits for a
    namespace to be torn down. Each prepared episode is handed out once, oldest first.

    An open starts work on the cores besides the episode's own: the previous episode exits, and an
    environment opened again is loaded ahead. The next batch of blank episodes (a fork and an
    isolation, about a millisecond of a core, each) is forked at a later call, so it does not pile
    up with them."""

    def __init__(self, jailed: bool, one_user: bool = False):
        self.jailed, self.one_user = jailed, jailed and one_user
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sys.path[:] = [path for path in sys.path if path != package_parent]  # for the code: the standard library only
        self.mounts = Mounts() if jailed else None
        self.episode_namespaces = os.CLONE_NEWNS | os.CLONE_NEWUTS  # besides its pid namespace
        self.pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY) if jailed else None
        if jailed:
            if not self.mounts.restrict_jail():  # the jail's IPC stays open: each episode gets its own
                self.episode_namespaces |= os.CLONE_NEWIPC
            set_code_environment("/tmp")  # inherited by every episode: cheaper than setting it in each
        self.base_limits: dict | None = None  # what spares are prepared with; jobs may only lower them
        self.ready_size = 1  # blank episodes forked together when the last one is taken (see `refill`)
        self.episode: Episode | None = None  # the running environment or program
        self.ready: collections.deque[Episode] = collections.deque()  # blank episodes, oldest first
        # an environment opened twice in a row is loaded ahead into a blank episode for its next open
        self.preloaded: tuple[tuple, Episode] | None = None
        self.last_open: tuple | None = None
        self.calls = 0  # of the running episode
        self.after_reply = None  # work that waits until the host has its reply
        self.ending: list[Episode] = []  # told to exit; reaped after the reply is sent
        self.host = FrameReader(0)
        add_site_builtins()  # inherited by every episode, as `python` has them
        warm_up()
        share_heap()

    # -- the host channel --------------------------------------------------------------------
    def serve(self) -> None:
        try:
            # the host may stop reading first (it closes without waiting for a close's reply)
            with contextlib.suppress(BrokenPipeError):
                self.serve_host()
        finally:  # every episode ends with the zygote, and (unsafe mode) its work directory goes
            preloaded = self.preloaded[1] if self.preloaded else None
            for episode in [self.episode, *self.ready, preloaded, *self.ending]:
                if episode is not None:
                    self.finish(episode)

    def serve_host(self) -> None:
        write_frame(1, {"ready": True, "jailed": self.jailed, "python": sys.version.split()[0]})
        while True:
            self.work_while_idle()
            body = self.host.read_body()
            if body is None:
                break
            try:
                reply = self.handle(decode(body), body)
            except Exception as exc:  # noqa: BLE001 - report, keep serving
                if self.episode is not None:
                    self.finish(self.episode)
                    self.episode = None
                reply = {**failure("sandbox_error", f"supervisor: {type(exc).__name__}: {exc}"), "dead": True}
            if isinstance(reply, bytes):
                write_body(1, reply)
            else:
                write_frame(1, reply)
            if self.after_reply is not None:
                work, self.after_reply = self.after_reply, None
                with contextlib.suppress(OSError):  # e.g. no fork possible now: the next open loads as usual
                    work()

    def handle(self, message: dict, body: bytes) -> dict | bytes:
        """The reply to one op: a message, or a reply of the episode's code passed on as it came."""
        op = message.get("op")
        if op == "ping":
            return {"ok": True}
        if op == "configure":
            self.base_limits = message["limits"]
            self.ready_size = message.get("ready", 1)
            self.after_reply = self.refill  # the first blank episodes, prepared before they are asked for
            return {"ok": True}
        if op == "open":
            return self.open(message)
        if op in ("call", "state"):  # passed on as they are: the code reads them the same
            self.calls += 1
            return self.exchange(body, self.episode.limits["call_timeout_s"] if self.episode else 0)
        if op == "status":
            return {"ok": True, "ready": [spare.pid for spare in self.ready],
                    "loaded": [self.preloaded[1].pid] if self.preloaded else [],
                    "running": self.episode.pid if self.episode else None, "ending": len(self.ending)}
        if op == "close":
            self.retire()
            self.after_reply = self.refill
            return {"ok": True}
        if op == "run":
            self.retire()
            return self.run(message)
        return failure("sandbox_error", f"unknown op {op!r}")

    def work_while_idle(self) -> None:
        """Until the host sends something: prepare blank episodes if none is left, reap closed ones (which
        exit on their own within milliseconds; stragglers are killed after a second)."""
        self.reap_exited()
        while len(self.ending) > MAX_ENDING:  # never let them pile up, even under a flood of requests
            self.finish(self.ending.pop(0), settle_s=0.5)
        while True:
            if self.ready and not self.ending:
                return
            host_waiting = self.host.pending or bool(select.select([0], [], [], QUIET_S)[0])
            if host_waiting:
                return
            if not self.ready and self.base_limits is not None:
                self.refill()
                continue
            if not self.ending:
                return
            pidfds = {episode.pidfd: episode for episode in self.ending}
            ready = select.select([0, *pidfds], [], [], 1.0)[0]
            if not ready:  # a second without the code exiting: kill it
                ready = list(pidfds)
            for fd in ready:
                if fd in pidfds:
                    self.ending.remove(pidfds[fd])
                    self.finish(pidfds[fd])

    # -- environments --------------------------------------------------------------------------
    def open(self, message: dict) -> dict | bytes:
        """Start an episode of an environment: the one loaded ahead for it if there is one, else the
        oldest blank episode given the code now (the next batch is forked at a later call, see `exchange`)."""
        self.retire()
        self.calls = 0
        key = None if message.get("site") else (message["code"], tuple(sorted(message["limits"].items())))
        preloaded, self.preloaded = self.preloaded, None
        if preloaded is not None and preloaded[0] == key and not preloaded[1].ended():
            episode = self.episode = preloaded[1]
            if episode.reader.pending or select.select([episode.replies], [], [], 0)[0]:
                # it answered while waiting for this open, which may come after the load's deadline
                episode.deadline = max(episode.deadline, time.monotonic() + 1.0)
            reply = self.receive()
        else:
            if preloaded is not None:
                self.retire_episode(preloaded[1])
            episode = self.episode = self.take(message)
            episode.close_outputs()  # an environment's prints are captured per call instead
            reply = self.exchange(self.job(message, self.other_processes()), message["limits"]["call_timeout_s"])
        if key is not None and key == self.last_open and _loaded(reply):
            self.after_reply = lambda: self.preload(key, message)
        self.last_open = key
        return reply

    @staticmethod
    def job(message: dict, others: int) -> dict:
        """What an episode's code process is given: the environment's bytecode, or its code if that does not
        compile here (the episode then reports why). `others`: see `other_processes`."""
        bytecode = environment_bytecode(message["code"])
        source = {"code": message["code"]} if bytecode is None else {"bytecode": bytecode}
        return {"mode": "environment", **source, "limits": message["limits"], "others": others}

    def other_processes(self) -> int:
        """Processes of the code's user that are not its episode's (the code's RLIMIT_NPROC counts them): with one
        user, the zygote and the blank episodes; with two, none (blank episodes wait as the zygote's user)."""
        return 1 + len(self.ready) if self.one_user else 0

    def preload(self, key: tuple, message: dict) -> None:
        """Give the oldest blank episode this environment's code now, for its next open. (The next batch is
        forked while the zygote waits for a reply, see `exchange`, or when the host is quiet.)"""
        self.refill()  # if the last blank one went to the running episode (its open found nothing loaded ahead)
        if not self.ready:
            return
        spare = self.ready.popleft()
        spare.close_outputs()
        if self.send(spare, self.job(message, self.other_processes()), message["limits"]["call_timeout_s"]):
            self.preloaded = (key, spare)
        else:
            self.ending.append(spare)

    # -- episodes ------------------------------------------------------------------------------
    def take(self, message: dict) -> Episode:
        """The oldest blank episode if it fits (no requirements to bind), else a freshly forked one. A blank
        episode is handed out once: it is never put back, whatever becomes of its episode."""
        self.base_limits = self.base_limits or message["limits"]
        while self.ready and self.ready[0].ended():  # it died waiting (it never ran code)
            self.ending.append(self.ready.popleft())
        if not self.ready or message.get("site"):
            (episode,) = self.spawn(self.base_limits, message.get("site", []), message)
            return episode
        return self.ready.popleft()

    def refill(self) -> None:
        """Once the last blank episode is taken, prepare the next `ready_size` together (the forks are the
        zygote's part; each child isolates itself). After every fork the kernel copies each page the zygote
        writes again (copy-on-write): forked back to back, with nothing written in between, the episodes
        share that cost, which serving them one at a time pays once per episode."""
        if not self.ready and self.base_limits is not None:
            self.ready.extend(self.spawn(self.base_limits, [], {}, count=self.ready_size))

    def reap_exited(self) -> None:
        """Finish closed episodes that have exited already, without waiting for any."""
        if not self.ending:
            return
        pidfds = {episode.pidfd: episode for episode in self.ending}
        for fd in select.select(list(pidfds), [], [], 0)[0]:
            self.ending.remove(pidfds[fd])
            self.finish(pidfds[fd])

    def retire(self) -> None:
        """End the running episode: an idle environment exits on the end of its requests, so its
        namespace goes down cheaply (killing a pid 1 whose children live costs ~100 ms more)."""
        episode, self.episode = self.episode, None
        if episode is not None:
            self.retire_episode(episode)

    def retire_episode(self, episode: Episode) -> None:
        if episode.requests is not None:
            os.close(episode.requests)
            episode.requests = None
        self.ending.append(episode)

    def spawn(self, limits: dict, site: list, message: dict, count: int = 1) -> list[Episode]:
        """Fork `count` blank episodes back to back: isolated, requirements bound, each waiting for its job on
        fd 3. Fewer if a fork fails after the first (if the first fails, its OSError)."""
        channels = [_channel() for _ in range(count)]  # made first: the zygote writes little between the forks
        site_dirs = message.get("site_dirs", [])
        pids: list[int] = []
        workdirs: list[str | None] = []
        try:
            for code_ends, _ in channels:
                workdirs.append(None if self.jailed else _unsafe_workdir())
                pids.append(self.fork(limits, site, site_dirs, code_ends, workdirs[-1]))
        except OSError:
            if not pids:
                raise
        finally:
            for index, (code_ends, own_ends) in enumerate(channels):
                for fd in [*code_ends.values(), *(own_ends.values() if index >= len(pids) else ())]:
                    os.close(fd)
            _remove_workdirs(workdirs[len(pids):])
        episodes = [Episode(pid, own_ends, workdir, limits, site)
                    for pid, (_, own_ends), workdir in zip(pids, channels, workdirs, strict=False)]  # (forked ones)
        for episode in episodes:
            os.set_blocking(episode.requests, False)
        return episodes

    def fork(self, limits: dict, site: list, site_dirs: list, child_fds: dict, workdir: str | None) -> int:
        """One episode's process (see `start_episode`); its pid."""
        if self.jailed:
            os.unshare(os.CLONE_NEWPID)  # the next child is pid 1 of a new pid namespace
        try:
            pid = os.fork()
        except BaseException:
            self._restore_pid_namespace()
            raise
        if pid == 0:
            try:
                self.start_episode(limits, site, site_dirs, child_fds, workdir)
            finally:
                os._exit(70)
        self._restore_pid_namespace()
        return pid

    def _restore_pid_namespace(self) -> None:
        if self.jailed:  # later children of the zygote itself stay in the zygote's namespace
            os.setns(self.pid_namespace, os.CLONE_NEWPID)

    def start_episode(self, limits: dict, site: list, site_dirs: list, fds: dict, workdir: str | None) -> None:
        """The episode's process: isolate itself, then become the code (see the module docstring)."""
        _keep_only(fds.values())  # the zygote's ends and the host channel stay with the zygote
        try:
            if self.jailed:
                self.isolate(limits, site)
            else:
                link_requirements(site, site_dirs, workdir)
            os.setsid()  # kill(0, ...) reaches the episode's own processes only (the unsafe mode's killpg too)
        except Exception as exc:  # noqa: BLE001 - tell the zygote why the episode cannot start
            with contextlib.suppress(OSError):
                write_frame(fds["reply"], failure("sandbox_error", f"episode setup failed: {exc}"))
            os._exit(71)
        self.become_code(limits, bool(site), fds, workdir)

    def isolate(self, limits: dict, site: list) -> None:
        """Fresh mount namespace: /proc for the episode's pids only, a private /tmp, the requirements."""
        mounts = self.mounts
        os.unshare(self.episode_namespaces)
        mounts.mount(None, "/", None, MS_REC | MS_PRIVATE)
        mounts.mount("proc", "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
        mounts.mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={limits['tmpfs_mb']}m,mode=1777")
        if site:
            mounts.mount("tmpfs", REQ_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
            for index, entry in site:
                source, target = f"{SITE_ROOT}/{index}/{entry}", f"{REQ_ROOT}/{entry}"
                if os.path.isdir(source):
                    os.mkdir(target)
                else:
                    open(target, "w").close()  # noqa: SIM115 - a mount point for a single-file module
                mounts.mount(source, target, None, MS_BIND | MS_REC)
                mounts.mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
            mounts.mount(None, REQ_ROOT, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        # Hide the host's packages: only the declared requirements stay reachable.
        mounts.mount("tmpfs", SITE_ROOT, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k")

    def become_code(self, limits: dict, with_requirements: bool, fds: dict, workdir: str | None) -> None:
        """Clean fds, wait for the job, drop to the sandbox user with rlimits, run the untrusted code. A blank
        episode waits as the zygote's user: with two users, idle episodes are no processes of the sandbox
        user, whose processes the code's RLIMIT_NPROC counts."""
        # fd 0 is /dev/null already (see _keep_only)
        _move_fds({0: 0, 1: fds["out"], 2: fds["err"], REQUEST_FD: fds["request"], REPLY_FD: fds["reply"]})
        os.chdir(workdir or "/tmp")
        if workdir:  # unsafe mode; in the jail, the zygote set the code's environment once at its start
            set_code_environment(workdir)
        workdir = workdir or "/tmp"
        if self.jailed and not self.one_user:  # (one user: the code keeps the uid that made them)
            _reopenable_by_the_code(1, 2)
        job = read_frame(REQUEST_FD)
        if job is None:  # closed before it was used
            os._exit(0)
        if self.jailed:  # (unsafe mode runs as the invoking user)
            self.drop_privileges(limits)
        if with_requirements:  # (the zygote left the standard library only on sys.path)
            sys.path.append(REQ_ROOT if self.jailed else os.path.join(workdir, UNSAFE_REQ_DIR))
        apply_limits(limits, job["others"])
        if job["limits"] != limits:
            apply_limits(job["limits"], job["others"])  # a request may lower the limits
        if job["mode"] == "run":
            os._exit(run_program(job["code"], job.get("stdin", "").encode(), workdir, job.get("files"),
                                 job.get("fetch_files"), job["limits"]["max_output_bytes"]))
        os.dup2(0, 1)  # an environment's prints are captured per call; the rest goes to /dev/null
        os.dup2(0, 2)
        serve_environment(job)
        os._exit(0)

    def drop_privileges(self, limits: dict) -> None:
        """Become the sandbox user (two users: from uid 0, every capability goes with the switch), or keep the
        one user and give up every capability for good. Never runs code if that fails."""
        try:
            if self.one_user:
                drop_all_capabilities()
            else:
                uid = limits["uid"]
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
        except OSError as exc:
            with contextlib.suppress(OSError):
                write_frame(REPLY_FD, failure("sandbox_error", f"episode setup failed: {exc}"))
            os._exit(71)

    def finish(self, episode: Episode, settle_s: float = 0.0) -> str:
        """Make sure the episode's whole process tree is gone; describe how its code ended.

        `settle_s`: time the code gets to end on its own before the kill."""
        if settle_s:
            select.select([episode.pidfd], [], [], settle_s)
        ended_itself = episode.ended()
        # in the jail, pid 1 of the namespace: takes everything with it; unsafe, its session's processes, and
        # itself if it has not made its session yet (a spare just forked: else the wait below never ends)
        for kill in (os.kill,) if self.jailed else (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError):
                kill(episode.pid, signal.SIGKILL)
        try:
            _, status, usage = os.wait4(episode.pid, 0)
        except ChildProcessError:
            ended_itself = False
        if ended_itself:
            episode.exit = {"status": status, "cpu": usage.ru_utime + usage.ru_stime}
        for fd in episode.fds():
            with contextlib.suppress(OSError):
                os.close(fd)
        episode.requests, episode.outputs = None, None
        _remove_workdirs([episode.workdir])
        if episode.exit is None:
            return "stopped"
        return describe_status(episode.exit["status"])

    @staticmethod
    def _out_of_cpu(episode: Episode, limits: dict) -> bool:
        exit_info = episode.exit
        if exit_info is None:
            return False
        status = exit_info["status"]
        return (os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL)
                and exit_info["cpu"] >= limits["cpu_time_s"] - 0.05)

    def _drop(self) -> Episode:
        episode, self.episode = self.episode, None
        return episode

    def exchange(self, message: dict | bytes, timeout: float) -> dict | bytes:
        """Send a request (or the job) to the episode's code and await its reply within `timeout`.
        While the code works, the next batch of blank episodes is forked if none is left, from the episode's
        REFILL_AT_CALL-th call on."""
        episode = self.episode
        if episode is None or episode.requests is None:
            return {**failure("exception", "no environment is running"), "dead": True}
        self.send(episode, message, timeout)
        if self.calls >= REFILL_AT_CALL:
            self.refill()
        return self.receive()

    @staticmethod
    def send(episode: Episode, message: dict | bytes, timeout: float) -> bool:
        """Write a request to an episode's code; its reply is due within `timeout`."""
        episode.timeout, episode.deadline = timeout, time.monotonic() + timeout
        try:
            if isinstance(message, bytes):
                write_body(episode.requests, message, episode.deadline)
            else:
                write_frame(episode.requests, message, episode.deadline)
        except (TimeoutError, OSError):
            return False  # the code is gone or stuck: receive() tells which
        return True

    def receive(self) -> dict | bytes:
        """The running episode's reply to the request in flight: checked to be a JSON object, then
        passed on as the code wrote it. The episode is stopped if it does not answer in time."""
        episode = self.episode
        timeout = episode.timeout
        # replies carry capped observations; a state snapshot may be bigger, but not unbounded
        max_reply = REPLY_BASE_BYTES + 8 * episode.limits["max_output_bytes"]
        try:
            reply = episode.reader.read_body(episode.deadline, max_reply)
            if reply is not None:
                decode(reply)
        except TimeoutError:
            self.finish(self._drop())
            return {**failure("timeout", f"no reply within {timeout:g}s; the environment was stopped"), "dead": True}
        except ValueError as exc:  # the code wrote garbage on its reply channel
            self.finish(self._drop())
            return {**failure("exception", f"the environment broke its reply channel ({exc}); it was stopped"),
                    "dead": True}
        except OSError:
            reply = None
        if reply is not None:
            return reply
        how = self.finish(self._drop(), settle_s=1.0)
        if self._out_of_cpu(episode, episode.limits):
            error = f"CPU time limit of {episode.limits['cpu_time_s']}s exceeded; the environment was stopped"
            return {**failure("timeout", error), "dead": True}
        return {**failure("exception", f"the environment process died ({how})"), "dead": True}

    # -- programs ------------------------------------------------------------------------------
    def run(self, message: dict) -> dict:
        limits = message["limits"]
        limit = limits["max_output_bytes"]
        started = time.monotonic()
        episode = self.take(message)
        deadline = started + limits["wall_time_s"]
        job = {"mode": "run", "code": message["code"], "stdin": message.get("stdin", ""), "limits": limits,
               "files": message.get("files") or {}, "fetch_files": message.get("fetch_files") or [],
               "others": self.other_processes()}
        try:
            write_frame(episode.requests, job, deadline)
        except (TimeoutError, OSError):
            pass  # the program never started: reported as an Error below
        self.refill()
        # stdout, stderr, and the notes the program's side leaves on its reply channel (fetched files among
        # them: read as they come, or a large one would fill the pipe and stall the program)
        streams = {fd: bytearray() for fd in (*episode.outputs, episode.replies)}
        caps = {**dict.fromkeys(episode.outputs, limit), episode.replies: REPLY_BASE_BYTES + 2 * limit}
        dropped = dict.fromkeys(streams, 0)
        open_fds, exited, timed_out = set(streams), False, False
        drain_until = None  # after the exit, what is still buffered in the pipes drains quickly
        while open_fds or not exited:
            now = time.monotonic()
            if not exited and now >= deadline:
                timed_out = True
                break
            if exited and drain_until is None:
                drain_until = now + 0.5
            wait = [*open_fds] + ([] if exited else [episode.pidfd])
            ready, _, _ = select.select(wait, [], [], max(0.0, (drain_until or deadline) - now))
            if not ready and exited:
                break
            for fd in ready:
                if fd == episode.pidfd:
                    exited = True
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    open_fds.discard(fd)
                    continue
                room = caps[fd] - len(streams[fd])
                streams[fd] += chunk[:max(room, 0)]
                dropped[fd] += max(len(chunk) - max(room, 0), 0)
        elapsed = time.monotonic() - started
        note = {key: value for frame in frames_in(bytes(streams[episode.replies])) for key, value in frame.items()}
        out_fd, err_fd = episode.outputs
        self.finish(episode)
        result = {
            "stdout": _decode(streams[out_fd], dropped[out_fd]),
            "stderr": _decode(streams[err_fd], dropped[err_fd]),
            "execution_time": round(elapsed, 4),
            "return_code": None,
            "truncated": bool(dropped[out_fd] or dropped[err_fd]),
        }
        exit_info = episode.exit
        if timed_out:
            result["status"] = "TimeLimitExceeded"
        elif exit_info is None or note.get("error"):  # stopped, or it could not start
            result["status"] = "Error"
            result["stderr"] += "\n[sandbox] " + str(note.get("error") or "the program was stopped before it ended")
        elif self._out_of_cpu(episode, limits) or (os.WIFSIGNALED(exit_info["status"])
                                                   and os.WTERMSIG(exit_info["status"]) == signal.SIGXCPU):
            result["status"] = "TimeLimitExceeded"
        else:
            status = exit_info["status"]
            result["return_code"] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            result["status"] = "MemoryLimitExceeded" if note.get("memory_error") else "Finished"
        fetched = note.get("files")
        files = {path: text for path, text in fetched.items() if isinstance(text, str)} \
            if isinstance(fetched, dict) else {}
        return {"ok": True, "run_result": result, "files": files}


def _remove_workdirs(workdirs: list[str | None]) -> None:
    """Unsafe mode: remove episodes' work directories (in the jail an episode has none: its /tmp goes with it)."""
    for workdir in workdirs:
        if workdir:
            import shutil  # unsafe mode only: the jail's zygote stays small, which makes forks cheaper

            shutil.rmtree(workdir, ignore_errors=True)


def _channel() -> tuple[dict, dict]:
    """The pipes between the zygote and one episode: (the code's ends, the zygote's ends). The code reads
    requests and writes replies and its output."""
    pipes = {name: os.pipe() for name in ("request", "reply", "out", "err")}
    code_ends = {name: pipe[0] if name == "request" else pipe[1] for name, pipe in pipes.items()}
    own_ends = {name: pipe[1] if name == "request" else pipe[0] for name, pipe in pipes.items()}
    return code_ends, own_ends


def _loaded(reply: dict | bytes) -> bool:
    """Whether an open's reply says the code loaded (replies passed on as bytes come from the code)."""
    return isinstance(reply, bytes) and decode(reply).get("ok") is True


def apply_limits(limits: dict, other_processes: int = 0) -> None:
    """Set the code process's rlimits; never above the current hard limits (a job may only lower them).
    `other_processes`: processes of the code's user that are not the code's (RLIMIT_NPROC counts them)."""
    mb = 1 << 20
    processes = limits["max_processes"] + other_processes
    for name, soft, hard in (
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_NPROC", processes, processes),
        ("RLIMIT_NOFILE", limits["max_open_files"], limits["max_open_files"]),
        ("RLIMIT_FSIZE", limits["max_file_size_mb"] * mb, limits["max_file_size_mb"] * mb),
        # pid 1 of its namespace ignores SIGXCPU (the soft limit's signal): the hard limit's SIGKILL is the limit
        ("RLIMIT_CPU", limits["cpu_time_s"], limits["cpu_time_s"]),
        ("RLIMIT_AS", limits["memory_mb"] * mb, limits["memory_mb"] * mb),
    ):
        kind = getattr(resource, name)
        _, current_hard = resource.getrlimit(kind)
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
        resource.setrlimit(kind, (min(soft, hard), hard))


def _unsafe_workdir() -> str:
    import tempfile  # unsafe mode only: the jail's zygote stays small, which makes forks cheaper

    return tempfile.mkdtemp(prefix="astra-episode-")


def set_code_environment(workdir: str) -> None:
    """The environment variables sandboxed code sees (nothing of the host's)."""
    os.environ.clear()
    # USER and LOGNAME: the jail has no /etc/passwd for getpass.getuser() to look the uid up in
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
                       "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "USER": "sandbox", "LOGNAME": "sandbox"})


def _keep_only(keep) -> None:
    """Close every inherited fd but `keep` (stdin/stdout, the host channel, become /dev/null)."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    start = 3
    for fd in sorted(set(keep)):
        if fd >= start:
            os.closerange(start, fd)
            start = fd + 1
    os.closerange(start, 1 << 20)


def _reopenable_by_the_code(*fds: int) -> None:
    """Let the sandbox user open these output pipes, made by the zygote's user, again through /proc (as
    /dev/stdout and /dev/stderr do). Only this episode's processes can see its /proc."""
    for fd in fds:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):  # never a device: /dev/null is the host's own node
            os.fchmod(fd, 0o666)


def _move_fds(targets: dict[int, int]) -> None:
    """Place each source fd at its target number (sources may sit on targets), close all others."""
    high = {target: fcntl.fcntl(source, fcntl.F_DUPFD, 64) for target, source in targets.items()}
    for target, source in high.items():
        os.dup2(source, target)
    os.closerange(max(targets) + 1, 1 << 20)


def link_requirements(site: list, site_dirs: list, workdir: str) -> None:
    """Unsafe mode: symlink the declared requirements into the episode's directory."""
    if not site:
        return
    target = os.path.join(workdir, UNSAFE_REQ_DIR)
    os.mkdir(target)
    for index, entry in site:
        os.symlink(os.path.join(site_dirs[index], entry), os.path.join(target, entry))


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"killed by {name}"
    return f"exited with code {os.waitstatus_to_exitcode(status)}"


def _decode(data: bytearray, dropped: int) -> str:
    text = data.decode("utf-8", errors="replace")
    return text + (f"\n... [truncated {dropped} bytes]" if dropped else "")


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    Zygote(jailed="--unsafe" not in argv, one_user="--one-user" in argv).serve()


