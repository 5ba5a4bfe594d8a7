"""The code process of an environment session: load the code, serve tool calls, snapshot state."""

from __future__ import annotations

import functools
import io
import json
import marshal
import math
import sys
import traceback
import types
import warnings

from .binding import check_arguments
from .framing import FrameReader, write_frame

REQUEST_FD, REPLY_FD = 3, 4  # the code process's side of its channel to the supervisor
BYTECODE_CACHE = 16  # distinct environments whose bytecode a supervisor keeps
MAX_COMPILED_SOURCE = 256 << 10  # larger code is compiled in its episode, under the episode's limits


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [truncated {len(text) - limit} characters]"


def to_jsonable(value, depth: int = 0):
    """A JSON-able copy of `value`: containers recursed, dict keys as str, NaN and infinities as str
    (JSON has none), anything else str()."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if depth > 40:
        return _shown(value)
    if isinstance(value, dict):
        return {str(key): to_jsonable(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(item, depth + 1) for item in value]
    if isinstance(value, set | frozenset):
        return sorted((to_jsonable(item, depth + 1) for item in value), key=repr)
    return _shown(value)


def _shown(value) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - the object's own __str__ failed
        return f"<{type(value).__name__} object>"


def observation(value) -> str:
    """A tool's return value as the text the model sees."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # e.g. circular references
        return str(value)


def failure(kind: str, error: str) -> dict:
    return {"ok": False, "kind": kind, "error": error, "output": f"Error: {error}"}


class _captured:  # noqa: N801 - used like contextlib's redirect_stdout, with less work in a fresh episode
    """Capture stdout and stderr (both) into one StringIO."""

    def __enter__(self) -> io.StringIO:
        self.saved = sys.stdout, sys.stderr
        buffer = io.StringIO()
        sys.stdout = sys.stderr = buffer
        return buffer

    def __exit__(self, *exc_info) -> None:
        sys.stdout, sys.stderr = self.saved


def environment_tools(module: types.ModuleType) -> dict:
    """The environment's tools: public functions defined by its own code (not imported ones)."""
    return {name: value for name, value in vars(module).items()
            if isinstance(value, types.FunctionType) and not name.startswith("_")
            and value.__module__ == module.__name__}


def compile_environment(code: str) -> types.CodeType:
    """An environment's code compiled as its episode runs it: as Python runs a file, with no future feature but
    its own (not this module's `annotations`, which would leave its annotations unevaluated)."""
    return compile(code, "environment.py", "exec", dont_inherit=True)


@functools.lru_cache(maxsize=BYTECODE_CACHE)
def environment_bytecode(code: str) -> str | None:
    """For the supervisor: `code` compiled once, marshalled as text (latin-1) for an episode's job, or None (too
    big, or it does not compile: the episode compiles it and reports why). An episode is a fresh process, so
    compiling in each one repeats the compiler's work and its first-use page faults on every start (about a
    tenth of a one-call episode's CPU). Compiling only parses: nothing of the code runs here."""
    if len(code) > MAX_COMPILED_SOURCE:
        return None
    try:
        with warnings.catch_warnings():  # an episode's compile warnings go nowhere either
            warnings.simplefilter("ignore")
            return marshal.dumps(compile_environment(code)).decode("latin-1")
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError
        return None


def load_environment(code: str | None, limit: int, bytecode: str | None = None) -> tuple[types.ModuleType | None, dict]:
    """Run an environment's code (or the bytecode `environment_bytecode` made of it) as a new module."""
    module = types.ModuleType("environment")
    module.__file__ = "/tmp/environment.py"
    sys.modules["environment"] = module
    try:
        compiled = compile_environment(code) if bytecode is None else marshal.loads(bytecode.encode("latin-1"))
        with _captured() as printed:
            exec(compiled, module.__dict__)  # noqa: S102 - this is the sandboxed code
    except BaseException as exc:  # noqa: BLE001 - any failure to load is a load_error
        return None, failure("load_error", _exception_text(exc, limit))
    tools = sorted(environment_tools(module))
    return module, {"ok": True, "kind": "ok", "tools": tools, "stdout": truncate(printed.getvalue(), limit)}


def _exception_text(exc: BaseException, limit: int) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return truncate(text, limit)


def call_tool(module: types.ModuleType, message: dict, limit: int) -> dict:
    tools = environment_tools(module)
    name, arguments = message.get("name"), message.get("arguments")
    if not isinstance(name, str) or name not in tools:
        available = ", ".join(sorted(tools)) or "none"
        return failure("unknown_tool", f"unknown tool {name!r}; available tools: {available}")
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return failure("bad_arguments", f"arguments of {name} are not valid JSON: {exc}")
    if not isinstance(arguments, dict):
        return failure("bad_arguments", f"arguments of {name} must be a JSON object, got {type(arguments).__name__}")
    function = tools[name]
    try:
        check_arguments(function, arguments)
    except TypeError as exc:
        return failure("bad_arguments", f"{name}: {exc}")
    with _captured() as printed:
        try:
            value = finished(function(**arguments))
        except BaseException as exc:  # noqa: BLE001 - the tool's failure is the observation
            reply = failure("exception", _exception_text(exc, limit))
        else:
            try:
                reply = {"ok": True, "kind": "ok", "error": None, "output": truncate(observation(value), limit)}
            except Exception as exc:  # noqa: BLE001 - e.g. nesting past the recursion limit, a __str__ that raises
                reply = failure("exception", f"the return value cannot be shown: {_exception_text(exc, limit)}")
    reply["stdout"] = truncate(printed.getvalue(), limit)
    return reply


def finished(value):
    """What a tool's call amounts to: an `async def` tool's coroutine run to its end, a generator's items."""
    if isinstance(value, types.CoroutineType):
        import asyncio  # only in an episode that has an async tool: it takes milliseconds to import

        return asyncio.run(value)
    if isinstance(value, types.GeneratorType):
        return list(value)
    return value


def snapshot_state(module: types.ModuleType, limit: int) -> dict:
    get_state = vars(module).get("get_state")
    try:
        with _captured():
            if callable(get_state):
                value = get_state()
            else:
                value = {name: item for name, item in vars(module).items()
                         if not name.startswith("_") and not callable(item) and not isinstance(item, types.ModuleType)}
        return {"ok": True, "state": to_jsonable(value)}
    except BaseException as exc:  # noqa: BLE001
        return failure("exception", _exception_text(exc, limit))


def serve_environment(job: dict) -> None:
    """Load the job's environment (its bytecode, else its code) and answer tool calls until the requests end."""
    limit = job["limits"]["max_output_bytes"]
    module, reply = load_environment(job.get("code"), limit, job.get("bytecode"))
    write_frame(REPLY_FD, reply)
    if module is None:
        return
    requests = FrameReader(REQUEST_FD)
    while True:
        message = requests.read()
        if message is None:
            return
        if message.get("op") == "state":
            reply = snapshot_state(module, limit)
        else:
            reply = call_tool(module, message, limit)
        write_frame(REPLY_FD, reply)


WARM_UP = "import json\nSTATE = {'n': 1}\ndef tool(item, count: int = 1, *, note=None):\n    return {'item': item}\n"


def warm_up() -> None:
    """Run a trusted environment once, so that what Python creates lazily on first use (caches,
    interned names, grown heaps) exists before episodes are forked from this process."""
    module, _ = load_environment(None, 1024, environment_bytecode(WARM_UP))
    call_tool(module, {"name": "tool", "arguments": {"item": "x", "count": 2}}, 1024)
    call_tool(module, {"name": "tool", "arguments": {"wrong": 1}}, 1024)
    snapshot_state(module, 1024)
    sys.modules.pop("environment", None)
