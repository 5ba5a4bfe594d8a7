"""The astra-sandbox command: run, serve, session, selftest, check."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import json
import sys
import time
from dataclasses import dataclass

import click
from astra_core.command import stage_command
from astra_core.config import ConfigError, config_options, knob, load_config, pop_values
from astra_core.options import port_file_option
from astra_core.stage import Rejected

from astra_sandbox.config import SandboxConfig
from astra_sandbox.errors import SandboxError, SandboxUnavailable

SAMPLE_ENVIRONMENT = importlib.resources.files("astra_sandbox") / "data" / "shop_environment.jsonl"


@dataclass(frozen=True)
class PoolConfig(SandboxConfig):
    pool_size: int = knob(2, "Warm jailed workers (programs run in parallel).", flag="sandbox-pool-size",
                          minimum=1)


# Every SandboxConfig field is a --sandbox-... flag; the jail binary and the sandbox user stay config-file only.
sandbox_options = config_options(PoolConfig, exclude=("nsjail_path", "uid", "pool_size"))
pool_options = config_options(PoolConfig, exclude=("nsjail_path", "uid"))


def config_from(kwargs: dict, cls: type = SandboxConfig, **defaults) -> SandboxConfig:
    values = {name: value for name, value in pop_values(PoolConfig, kwargs).items() if value is not None}
    try:
        return load_config(cls, None, {**defaults, **values})
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def open_pool(config: SandboxConfig, workers: int):
    from astra_sandbox.pool import SessionPool

    try:
        return SessionPool(size=workers, config=config)
    except SandboxUnavailable as exc:
        raise click.ClickException(f"the sandbox cannot run here: {exc}") from None


@click.group("astra-sandbox")
@click.version_option(package_name="astra-sandbox")
def main() -> None:
    """Run untrusted generated code in nsjail: programs (SandboxFusion run_code) and environment sessions."""



RUN_REQUEST = {
    "title": "run_code request",
    "description": "A SandboxFusion run_code request.",
    "type": "object",
    "required": ["code"],
    "properties": {"code": {"type": "string"}, "language": {"type": "string"}, "stdin": {"type": "string"},
                   "run_timeout": {"type": "number", "exclusiveMinimum": 0},
                   "memory_limit_MB": {"type": "integer", "minimum": 1}, "id": {"type": "string"},
                   "compile_timeout": {"type": "number"},
                   "files": {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
                   "fetch_files": {"type": "array", "items": {"type": "string"}}},
}


@contextlib.contextmanager
def _pool_of(config: PoolConfig, options=None):
    with open_pool(config, config.pool_size) as pool:
        yield pool


async def run_request(request: dict, pool, stage) -> dict:
    """Run code requests: JSONL {"code", "language", "stdin"?, "run_timeout"?, "memory_limit_MB"?, "files"?,
    "fetch_files"?, "id"?} in, SandboxFusion run_code results out, in input order (ids passed through)."""
    from astra_sandbox.run_code import BadRequest, check_request

    try:
        check_request(request)
    except BadRequest as exc:
        raise Rejected(f"bad request: {exc}") from None
    result = await asyncio.to_thread(pool.run_code, request)
    run_status = (result.get("run_result") or {}).get("status")
    outcome = result["status"] + (f"/{run_status}" if run_status else "")
    stage.stats[f"result {outcome}"] = stage.stats.get(f"result {outcome}", 0) + 1
    return result


stage_command(main, "run", reads=RUN_REQUEST, config=PoolConfig, uses={"pool": _pool_of})(run_request)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address (loopback by default).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="0 picks a free port.")
@port_file_option
@pool_options
def serve(host: str, port: int, port_file: str | None, **kwargs) -> None:
    """Serve POST /run_code (SandboxFusion shape) and GET /health over HTTP."""
    from astra_core.http_server import CannotListen, announce_port, base_url, listen, serve_until_stopped

    from astra_sandbox.server import make_handler

    config = config_from(kwargs, PoolConfig)
    workers = config.pool_size
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(f"astra-sandbox serve: listening on {host}: anyone who can reach it can run code here", err=True)
    try:
        server = listen(host, port)  # before the pool starts: a port in use is said at once
    except CannotListen as exc:
        raise click.ClickException(str(exc)) from None
    with server, open_pool(config, workers) as pool:
        server.RequestHandlerClass = make_handler(pool)
        bound = server.server_address[1]
        click.echo(f"astra-sandbox serve: POST {base_url(host, bound)}/run_code ({workers} workers)", err=True)
        if port_file:
            announce_port(port_file, bound)
        serve_until_stopped(server)  # Ctrl-C or `kill`: the pool is closed either way


@main.command()
@click.argument("environment", type=click.Path(exists=True, dir_okay=False), required=False)
@click.option("--calls", "calls_path", type=click.Path(exists=True, allow_dash=True, dir_okay=False), default="-",
              show_default="stdin", help='JSONL of {"name", "arguments"} tool calls, or {"state": true}.')
@click.option("--episodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Replay the calls in this many fresh episodes, one after the other.")
@sandbox_options
def session(environment: str, calls_path: str, episodes: int, **kwargs) -> None:
    """Replay tool calls against an environment (an `environment` record file, or a .py file; default:
    the bundled sample shop). Writes one JSON line per call: the ToolResult with its episode and call number."""
    from astra_core.jsonl import iter_raw_lines, parse_line
    from astra_core.schema import RecordError

    config = config_from(kwargs)
    code, requirements = _load_environment(environment or str(SAMPLE_ENVIRONMENT))
    try:  # the replay is a script: a line it cannot read stops it before any call runs
        calls = [parse_line(source, lineno, raw, REPLAY_CALL).record
                 for source, lineno, raw in iter_raw_lines([calls_path])]
    except RecordError as exc:
        raise click.ClickException(str(exc)) from None
    with open_pool(config, 1) as pool:
        for episode in range(episodes):
            with pool.session(code, requirements) as active:
                if active.load_error:
                    raise click.ClickException(f"the environment failed to load: {active.load_error}")
                for number, call in enumerate(calls):
                    if call.get("state"):
                        try:
                            line = {"episode": episode, "call": number, "state": active.state()}
                        except SandboxError as exc:  # the environment died, or its get_state() raised
                            line = {"episode": episode, "call": number, "state": None, "error": str(exc)}
                    else:
                        result = active.call(call.get("name"), call.get("arguments"))
                        line = {"episode": episode, "call": number, "name": call.get("name"), **result.to_dict()}
                    click.echo(json.dumps(line, ensure_ascii=False))


# One line of `astra-sandbox session --calls`: a tool call as a model would make it (its arguments are checked by
# the environment, as a model's are), or a state snapshot.
REPLAY_CALL = {"title": "tool call", "type": "object", "anyOf": [
    {"required": ["state"], "properties": {"state": {"const": True}}},
    {"required": ["name"], "properties": {"name": {"type": "string"}}}]}


def _load_environment(path: str) -> tuple[str, list[str]]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"{path}: cannot read the environment: {exc}") from None
    if path.endswith(".py"):
        return text, []
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        record = json.loads(first) if first.lstrip().startswith("{") and first.rstrip().endswith("}") else json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{path}: not an environment record (JSON/JSONL) or a .py file: {exc}") from None
    if not isinstance(record, dict):
        raise click.ClickException(f"{path}: not an environment record: a JSON {type(record).__name__}, not an object")
    if not isinstance(record.get("code"), str):
        raise click.ClickException(f"{path}: field code: the record has no \"code\" string")
    requirements = record.get("requirements") or []
    if not (isinstance(requirements, list) and all(isinstance(r, str) for r in requirements)):
        raise click.ClickException(f"{path}: field requirements: must be a list of module names")
    return record["code"], list(requirements)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the outcomes as JSONL instead of a table.")
@click.option("--only", multiple=True, metavar="NAME", help="Run only these snippets (repeatable).")
@sandbox_options
def selftest(as_json: bool, only: tuple[str, ...], **kwargs) -> None:
    """Run every hostile snippet (network, host files, bombs, /proc, ctypes, secrets ...) in the sandbox and
    print whether each was contained. Exit status 1 if any was not.

    Uses short limits unless given (--sandbox-wall-time-s 2 --sandbox-cpu-time-s 2 --sandbox-memory-mb 256
    --sandbox-max-output-kb 64)."""
    from astra_sandbox.selftest import CASES, Probe, format_table, run_selftest

    unknown = set(only) - {case.name for case in CASES}
    if unknown:
        raise click.BadParameter(f"no such snippet: {', '.join(sorted(unknown))} "
                                 f"(known: {', '.join(case.name for case in CASES)})", param_hint="--only")
    cases = [case for case in CASES if not only or case.name in only]

    config = config_from(kwargs, wall_time_s=2.0, cpu_time_s=2, memory_mb=256, max_output_kb=64)
    started = time.monotonic()
    # one worker: the snippets run one at a time, and leftovers are told apart by namespace
    with Probe() as probe, open_pool(config, 1) as pool:
        outcomes = run_selftest(pool, probe, cases)
    if as_json:
        for outcome in outcomes:
            click.echo(json.dumps(outcome.__dict__))
    else:
        click.echo(format_table(outcomes))
    users = "" if not config.jail else f" in a jail of {'one user' if config.one_user else 'two users'}"
    click.echo(f"selftest: {len(outcomes)} snippets{users} in {time.monotonic() - started:.1f}s", err=True)
    if not all(outcome.contained for outcome in outcomes):
        sys.exit(1)


@main.command()
@sandbox_options
def check(**kwargs) -> None:
    """Start one jailed worker and report how (or the error that names the fix)."""
    from astra_sandbox.jail import code_host_uid, find_nsjail
    from astra_sandbox.worker import Worker

    config = config_from(kwargs)
    started = time.monotonic()
    try:
        worker = Worker(config).start()
    except SandboxUnavailable as exc:
        raise click.ClickException(f"the sandbox cannot run here: {exc}") from None
    elapsed = time.monotonic() - started
    try:
        reply = worker.request({"op": "run", "code": "print('ok')", "stdin": "", "limits": config.limits()},
                               config.wall_time_s)
    finally:
        worker.stop()
    jail = find_nsjail(config) if config.jail else "none (--no-sandbox-jail)"
    users = {"users": "one" if config.one_user else "two", "code_uid": code_host_uid(config)} if config.jail else {}
    click.echo(json.dumps({"jail": jail, **users, "python": worker.info.get("python"),
                           "startup_s": round(elapsed, 3), "program_status": reply.get("run_result", {}).get("status")}))
