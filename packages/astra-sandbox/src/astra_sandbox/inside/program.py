"""The code process of a `run_code` request: run the program as a fresh `__main__`."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import traceback
import types

from .environment import REPLY_FD
from .framing import write_frame

PROGRAM_FILE = "main.py"


def add_site_builtins() -> None:
    """`exit`, `quit`, `help`, `copyright`, `credits` and `license`: the builtins `python` gets from the site
    module, which the supervisor's -S skips (generated code often ends with `exit()`). Importing site under -S
    adds no path and runs nothing else."""
    import site

    site.setquit()
    site.setcopyright()
    site.sethelper()


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def run_program(code: str, stdin: bytes, workdir: str, files: dict | None = None, fetch: list | None = None,
                fetch_limit: int = 0) -> int:
    """Run `code` as a fresh `__main__`, as `python main.py` would; returns the exit code. `files` (path
    relative to the program's directory: base64 content, or None for none) are written there first; the
    `fetch` paths are sent back afterwards (base64, up to `fetch_limit` bytes of it in all), as SandboxFusion
    does."""
    try:
        _write_files(workdir, files or {})
    except (OSError, ValueError) as exc:
        with contextlib.suppress(OSError):
            write_frame(REPLY_FD, {"error": str(exc)})
        return 1
    stdin_fd = os.memfd_create("stdin")
    os.write(stdin_fd, stdin)
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    os.dup2(stdin_fd, 0)
    os.close(stdin_fd)
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False,  # noqa: SIM115
                                       buffering=1)
    path = os.path.join(workdir, PROGRAM_FILE)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(code)
    main = types.ModuleType("__main__")
    main.__file__ = path
    sys.modules["__main__"] = main
    sys.argv = [path]
    sys.path.insert(0, workdir)  # as for a script: its directory first
    exit_code = 0
    try:
        # as Python runs a file: no future feature but the program's own (not this module's `annotations`)
        exec(compile(code, path, "exec", dont_inherit=True), main.__dict__)  # noqa: S102 - the sandboxed code
    except SystemExit as exc:
        exit_code = _exit_code(exc)
    except MemoryError as exc:
        with contextlib.suppress(Exception):
            write_frame(REPLY_FD, {"memory_error": True})
        _print_user_traceback(exc)
        exit_code = 1
    except BaseException as exc:  # noqa: BLE001 - an uncaught exception: traceback and exit 1, like python
        _print_user_traceback(exc)
        exit_code = 1
    _finish_interpreter()
    if fetch:
        with contextlib.suppress(Exception):  # the program may have closed the channel, or broken the modules used
            write_frame(REPLY_FD, {"files": _fetched(workdir, fetch, fetch_limit)})
    return exit_code


def _write_files(workdir: str, files: dict) -> None:
    import binascii

    for path, content in files.items():
        if content is None:
            continue
        target = os.path.join(workdir, path)
        try:
            data = binascii.a2b_base64(content, strict_mode=True)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as handle:
                handle.write(data)
        except (OSError, binascii.Error) as exc:
            raise ValueError(f"cannot write the input file {path!r}: {exc}") from None


def _fetched(workdir: str, paths: list, limit: int) -> dict:
    """{path: base64} of the files asked for that exist, while their base64 fits in `limit` bytes."""
    import binascii

    fetched, room = {}, limit
    for path in paths:
        with contextlib.suppress(OSError):
            with open(os.path.join(workdir, path), "rb") as handle:
                text = binascii.b2a_base64(handle.read(room + 1), newline=False).decode()
            if len(text) > room:
                break
            fetched[path], room = text, room - len(text)
    return fetched


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback python would print: the program's frames only, not the supervisor's."""
    with contextlib.suppress(BaseException):
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)


def _finish_interpreter() -> None:
    """What interpreter shutdown does before exit: join threads, run atexit handlers, flush."""
    if "threading" in sys.modules:
        threading = sys.modules["threading"]
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                with contextlib.suppress(Exception):
                    thread.join()
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
