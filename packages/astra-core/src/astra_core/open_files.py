"""Room for a connection per request in flight under the process's open-file limit (`ulimit -n`).

Many machines start processes with a soft limit of 1,024 open files (a hard limit far above). A stage at
--concurrency 1024 would run out of descriptors, and every connection after that fails as if the endpoint were
down. Like vLLM and Ray, the client raises its soft limit up to the hard one when it needs to; above the hard limit
it says so before the first request.
"""

from __future__ import annotations

import errno
import resource

# Descriptors besides the connections: inputs, outputs, rejects, the event loop, the libraries' own files.
HEADROOM = 64

OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


class TooFewOpenFiles(RuntimeError):
    """The hard open-file limit is below what the asked concurrency needs."""


def limits() -> tuple[int, int]:
    """(soft, hard) open-file limits of this process."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def make_room(connections: int) -> None:
    """Raise the soft open-file limit to fit `connections` sockets plus HEADROOM, or raise TooFewOpenFiles."""
    soft, hard = limits()
    needed = connections + HEADROOM
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise TooFewOpenFiles(
            f"concurrency {connections} needs up to {needed} open files (a connection per request in flight), and "
            f"this process may open at most {hard} (ulimit -Hn): lower the concurrency to {max(1, hard - HEADROOM)} "
            f"or less, or raise the hard limit")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def out_of_descriptors(exc: BaseException) -> bool:
    """Whether `exc` (or the OSError it wraps, as aiohttp's connection errors do) is EMFILE or ENFILE."""
    cause = getattr(exc, "os_error", None) or exc
    return isinstance(cause, OSError) and cause.errno in OUT_OF_DESCRIPTORS
