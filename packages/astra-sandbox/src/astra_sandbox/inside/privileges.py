"""Giving up every capability for good without changing user (a jail of one user). Standard library only.

With two users the code's process switches to the unprivileged uid, and the kernel drops its capabilities.
With one there is no other user to switch to: the code keeps the supervisor's uid (root of the jail's user
namespace only) and must not be able to get any capability back, from that uid or through an execve.
"""

from __future__ import annotations

import ctypes
import errno as errnos
import os

# prctl(2) options
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
PR_SET_NO_NEW_PRIVS = 38

# securebits(7): uid 0 gains no capabilities on execve, nor keeps or regains them on uid changes, and
# no ambient capability can be raised; each bit locked
SECBIT_NOROOT, SECBIT_NOROOT_LOCKED = 1 << 0, 1 << 1
SECBIT_NO_SETUID_FIXUP, SECBIT_NO_SETUID_FIXUP_LOCKED = 1 << 2, 1 << 3
SECBIT_KEEP_CAPS_LOCKED = 1 << 5
SECBIT_NO_CAP_AMBIENT_RAISE, SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED = 1 << 6, 1 << 7
LOCKED_SECUREBITS = (SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED
                     | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_all_capabilities() -> None:
    """Lock the securebits, empty the bounding and ambient sets, then the effective, permitted and
    inheritable ones, and set no_new_privs. In this order: the first two need CAP_SETPCAP."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

    def prctl(option: int, arg: int = 0, arg3: int = 0) -> int:
        result = libc.prctl(option, arg, arg3, 0, 0)
        return 0 if result == 0 else ctypes.get_errno()

    _checked(prctl(PR_SET_SECUREBITS, LOCKED_SECUREBITS), "lock the securebits")
    for capability in range(64):  # up to the kernel's last capability: then EINVAL
        failed = prctl(PR_CAPBSET_DROP, capability)
        if failed == errnos.EINVAL:
            break
        _checked(failed, f"drop capability {capability} from the bounding set")
    _checked(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL), "clear the ambient capabilities")
    header, data = _CapHeader(CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _checked(0 if libc.capset(ctypes.byref(header), data) == 0 else ctypes.get_errno(), "clear the capabilities")
    _checked(prctl(PR_SET_NO_NEW_PRIVS, 1), "set no_new_privs")


def _checked(error: int, what: str) -> None:
    if error:
        raise OSError(error, f"cannot {what}: {os.strerror(error)}")
