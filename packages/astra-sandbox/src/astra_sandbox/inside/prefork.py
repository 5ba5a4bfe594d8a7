"""Keep the zygote's heap shared with the episodes it forks. Standard library only.

A forked episode shares the zygote's memory copy-on-write, but CPython writes to every object it
touches (its reference count) and the cyclic GC writes to every container it scans: each such
write copies a whole page, in the episode and in the zygote alike (after a fork, both sides fault
on the shared pages). What the zygote holds when it starts serving is made immortal (PEP 683: the
interpreter then never writes its count) and frozen out of the GC's reach. That memory is never
freed, which the zygote's long-lived modules never are anyway.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import types

# What an immortal object's reference count reads as (PEP 683, CPython >= 3.12 on 64 bits).
IMMORTAL = 0xFFFFFFFF


def immortal_objects_supported() -> bool:
    return sys.implementation.name == "cpython" and sys.maxsize > 2**32 and sys.getrefcount(None) == IMMORTAL


def share_heap() -> None:
    """Make every object the zygote holds now immortal and freeze it (call once, before forking)."""
    gc.collect()
    if immortal_objects_supported():
        set_count = ctypes.c_ssize_t.from_address  # ob_refcnt is an object's first field

        def immortalize(item) -> None:
            set_count(id(item)).value = IMMORTAL
            if isinstance(item, types.CodeType):  # not tracked by the GC: its constants are found only here
                for constant in item.co_consts:
                    immortalize(constant)
            elif isinstance(item, tuple | frozenset) and not gc.is_tracked(item):
                for member in item:
                    immortalize(member)

        for container in gc.get_objects():
            set_count(id(container)).value = IMMORTAL
            for item in gc.get_referents(container):  # strings, numbers, code: not tracked by the GC
                immortalize(item)
    gc.freeze()
    # the heap's free pages go back to the kernel: fewer page table entries to copy at each fork
    # and to tear down at each episode's exit, and what an episode allocates there is not a copy
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc's
    if trim is not None:
        trim(0)
