"""One-shot program execution in the SandboxFusion `run_code` shape.

Request: {"code", "language": "python", "stdin"?, "run_timeout"?, "memory_limit_MB"?, "files"?,
          "fetch_files"?, "id"?}
Result:  {"status": "Success"|"Failed"|"SandboxError", "message", "compile_result": None,
          "run_result": {"status": "Finished"|"TimeLimitExceeded"|"MemoryLimitExceeded"|"Error",
                         "stdout", "stderr", "return_code", "execution_time"}, "files", "id"?}

`files` ({path: base64 content}, paths relative to the program's directory) are written before the program
runs; `fetch_files` (paths) come back in the result's `files` ({path: base64}) if they exist afterwards and
fit in the output cap (`max_output_kb`). (`compile_timeout` is accepted: Python has no compile step.)

`status` is Success when the program finished with return code 0, Failed when it ran but did
not (non-zero exit, time or memory limit), SandboxError when the sandbox could not run it.
A request's `run_timeout` and `memory_limit_MB` may lower the configured limits, never raise them.
"""

from __future__ import annotations

from astra_sandbox.config import SandboxConfig
from astra_sandbox.errors import SandboxError, SandboxUnavailable, WorkerLost
from astra_sandbox.jail import warn_if_unsafe
from astra_sandbox.worker import Worker

LANGUAGES = ("python", "python3")


class BadRequest(ValueError):
    """The request is not a run_code request (no code, wrong types)."""


def check_request(request: dict) -> None:
    if not isinstance(request, dict):
        raise BadRequest(f"a run_code request is a JSON object, got {type(request).__name__}")
    if not isinstance(request.get("code"), str):
        raise BadRequest("a run_code request needs \"code\" (a string)")
    if not isinstance(request.get("stdin", "") or "", str):
        raise BadRequest("\"stdin\" must be a string")
    for key in ("run_timeout", "memory_limit_MB", "compile_timeout"):
        value = request.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise BadRequest(f"\"{key}\" must be a number")
    files = request.get("files") or {}
    if not isinstance(files, dict):
        raise BadRequest("\"files\" must be an object of path: base64 content")
    for path, content in files.items():
        _check_path("files", path)
        if content is not None and not _is_base64(content):
            raise BadRequest(f"\"files\" {path!r}: the content must be base64 text (or null)")
    fetch = request.get("fetch_files") or []
    if not isinstance(fetch, list):
        raise BadRequest("\"fetch_files\" must be a list of paths")
    for path in fetch:
        _check_path("fetch_files", path)


def _check_path(field: str, path) -> None:
    """A path relative to the program's directory, inside it."""
    parts = path.split("/") if isinstance(path, str) else [""]
    if any(part in ("", ".", "..") or "\0" in part for part in parts):  # ("/a" starts with an empty part)
        raise BadRequest(f"\"{field}\": {path!r} is not a path inside the program's directory (relative, "
                         "no '..')")


def _is_base64(text) -> bool:
    import binascii

    try:
        binascii.a2b_base64(text, strict_mode=True)
    except (TypeError, ValueError):  # binascii.Error is a ValueError
        return False
    return True


def sandbox_error(message: str, request: dict | None = None) -> dict:
    result = {"status": "SandboxError", "message": message, "compile_result": None, "run_result": None,
              "executor_pod_name": None, "files": {}}
    return _with_id(result, request)


def _with_id(result: dict, request: dict | None) -> dict:
    if isinstance(request, dict) and "id" in request:
        return {"id": request["id"], **result}
    return result


def _limits(request: dict, config: SandboxConfig) -> dict:
    timeout = request.get("run_timeout")
    memory = request.get("memory_limit_MB")
    # SandboxFusion uses -1 for "no limit": here that means the configured limit.
    return config.limits(wall_time_s=timeout if timeout and timeout > 0 else None,
                         memory_mb=max(int(memory), 64) if memory and memory > 0 else None)


def execute(worker: Worker, request: dict, config: SandboxConfig) -> dict:
    """Run one request on a started worker."""
    try:
        check_request(request)
    except BadRequest as exc:
        return sandbox_error(str(exc), request if isinstance(request, dict) else None)
    language = str(request.get("language") or "python").lower()
    if language not in LANGUAGES:
        return sandbox_error(f"language {language!r} is not supported (only python)", request)
    limits = _limits(request, config)
    message = {"op": "run", "code": request["code"], "stdin": request.get("stdin") or "", "limits": limits,
               "files": request.get("files") or {}, "fetch_files": request.get("fetch_files") or []}
    try:
        reply = worker.request(message, limits["wall_time_s"])
    except WorkerLost as exc:
        return sandbox_error(str(exc), request)
    if not reply.get("ok"):
        return sandbox_error(reply.get("error") or "the sandbox failed", request)
    run = reply["run_result"]
    run_result = {key: run[key] for key in ("status", "execution_time", "return_code", "stdout", "stderr")}
    success = run_result["status"] == "Finished" and run_result["return_code"] == 0
    message_text = "" if success else _failure_message(run_result, limits)
    files = reply.get("files") or {}
    missing = [path for path in request.get("fetch_files") or [] if path not in files]
    if missing:
        note = f"not fetched (missing, or over the {limits['max_output_bytes']} byte cap): {', '.join(missing)}"
        message_text = f"{message_text}; {note}" if message_text else note
    result = {"status": "Success" if success else "Failed", "message": message_text, "compile_result": None,
              "run_result": run_result, "executor_pod_name": None, "files": files}
    return _with_id(result, request)


def _failure_message(run_result: dict, limits: dict) -> str:
    status = run_result["status"]
    if status == "TimeLimitExceeded":
        return f"time limit exceeded ({limits['wall_time_s']:g}s wall, {limits['cpu_time_s']}s CPU)"
    if status == "MemoryLimitExceeded":
        return f"memory limit exceeded ({limits['memory_mb']} MB)"
    if status == "Error":
        return "the sandbox could not run the program"
    return f"exited with return code {run_result['return_code']}"


def run_code(request: dict, *, config: SandboxConfig | None = None, pool=None) -> dict:
    """Run one request: on a warm `pool` if given, else on a worker started for it (nsjail per call)."""
    if pool is not None:
        return pool.run_code(request)
    config = config or SandboxConfig()
    try:
        check_request(request)
    except BadRequest as exc:  # answered without starting a jail
        return sandbox_error(str(exc), request if isinstance(request, dict) else None)
    warn_if_unsafe(config)
    worker = Worker(config)
    try:
        worker.start()
        return execute(worker, request, config)
    except SandboxUnavailable:
        raise
    except SandboxError as exc:
        return sandbox_error(str(exc), request if isinstance(request, dict) else None)
    finally:
        worker.stop()
