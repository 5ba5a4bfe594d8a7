"""The astra-sandbox command: run, serve, session, selftest, check."""

from __future__ import annotations

import asyncio
import importlib.resources
import json
import sys
import time
from collections import Counter
from collections.abc import Callable

import click
from astra_core.options import report_errors, stage_options, stage_options_from
from astra_core.stage import Rejected, Stage

from astra_sandbox.config import SandboxConfig
from astra_sandbox.errors import SandboxUnavailable

SAMPLE_ENVIRONMENT = importlib.resources.files("astra_sandbox") / "data" / "shop_environment.jsonl"


def sandbox_options(f: Callable) -> Callable:
    """Limit flags shared by every command that runs code; they build a SandboxConfig."""
    defaults = SandboxConfig()
    options = [
        click.option("--wall-time", "wall_time_s", type=float, default=defaults.wall_time_s, show_default=True,
                     help="Seconds of wall time per program (requests may lower it)."),
        click.option("--cpu-time", "cpu_time_s", type=int, default=defaults.cpu_time_s, show_default=True,
                     help="CPU seconds per program or episode."),
        click.option("--memory-mb", type=int, default=defaults.memory_mb, show_default=True,
                     help="Address space per process (requests may lower it)."),
        click.option("--call-timeout", "call_timeout_s", type=float, default=defaults.call_timeout_s,
                     show_default=True, help="Seconds per tool call (and per environment load)."),
        click.option("--max-processes", type=int, default=defaults.max_processes, show_default=True),
        click.option("--tmpfs-mb", type=int, default=defaults.tmpfs_mb, show_default=True,
                     help="Private /tmp per program or episode."),
        click.option("--max-output-kb", type=int, default=defaults.max_output_kb, show_default=True),
        click.option("--unsafe-no-jail", is_flag=True,
                     help="DEVELOPMENT ONLY: no jail (host filesystem and network reachable); warns loudly."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


workers_option = click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
                              help="Warm jailed workers (programs run in parallel).")


def config_from(kwargs: dict) -> SandboxConfig:
    names = ("wall_time_s", "cpu_time_s", "memory_mb", "call_timeout_s", "max_processes", "tmpfs_mb",
             "max_output_kb")
    values = {name: kwargs.pop(name) for name in names}
    jail = not kwargs.pop("unsafe_no_jail")
    try:
        return SandboxConfig(jail=jail, **values)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def open_pool(config: SandboxConfig, workers: int):
    from astra_sandbox.pool import SessionPool

    try:
        return SessionPool(size=workers, config=config)
    except SandboxUnavailable as exc:
        raise click.ClickException(f"the sandbox cannot run here: {exc}") from None


@click.group()
@click.version_option(package_name="astra-sandbox")
def main() -> None:
    """Run untrusted generated code in nsjail: programs (SandboxFusion run_code) and environment sessions."""


@main.command()
@stage_options
@workers_option
@sandbox_options
@report_errors
def run(workers: int, **kwargs) -> None:
    """Run code requests: JSONL {"code", "language", "stdin"?, "run_timeout"?, "memory_limit_MB"?, "id"?}
    in, SandboxFusion run_code results out, in input order (ids passed through)."""
    from astra_sandbox.run_code import BadRequest, check_request

    options = stage_options_from(kwargs)
    config = config_from(kwargs)
    statuses: Counter = Counter()
    with open_pool(config, workers) as pool:

        async def run_one(request: dict) -> dict:
            try:
                check_request(request)
            except BadRequest as exc:
                raise Rejected(f"bad request: {exc}") from None
            result = await asyncio.to_thread(pool.run_code, request)
            run_status = (result.get("run_result") or {}).get("status")
            statuses[result["status"] + (f"/{run_status}" if run_status else "")] += 1
            return result

        with Stage("astra-sandbox run", options) as stage:
            asyncio.run(stage.arun(run_one, concurrency=workers))
            stage.stats["results"] = ", ".join(f"{name} ×{count}" for name, count in statuses.most_common()) or "none"


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address (loopback by default).")
@click.option("--port", type=int, default=8080, show_default=True, help="0 picks a free port.")
@click.option("--port-file", type=click.Path(dir_okay=False), help="Write the bound port here once serving.")
@workers_option
@sandbox_options
def serve(host: str, port: int, port_file: str | None, workers: int, **kwargs) -> None:
    """Serve POST /run_code (SandboxFusion shape) and GET /health over HTTP."""
    from astra_sandbox.server import make_server

    config = config_from(kwargs)
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(f"astra-sandbox serve: listening on {host}: anyone who can reach it can run code here", err=True)
    with open_pool(config, workers) as pool:
        server = make_server(pool, host, port)
        bound = server.server_address[1]
        click.echo(f"astra-sandbox serve: POST http://{host}:{bound}/run_code ({workers} workers)", err=True)
        if port_file:
            with open(port_file, "w") as handle:
                handle.write(str(bound))
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()


@main.command()
@click.argument("environment", type=click.Path(exists=True, dir_okay=False), required=False)
@click.option("--calls", "calls_path", type=click.Path(allow_dash=True, dir_okay=False), default="-",
              show_default="stdin", help='JSONL of {"name", "arguments"} tool calls, or {"state": true}.')
@click.option("--episodes", type=int, default=1, show_default=True,
              help="Replay the calls in this many fresh episodes, one after the other.")
@sandbox_options
def session(environment: str, calls_path: str, episodes: int, **kwargs) -> None:
    """Replay tool calls against an environment (an `environment` record file, or a .py file; default:
    the bundled sample shop). Writes one JSON line per call: the ToolResult with its episode and call number."""
    config = config_from(kwargs)
    code, requirements = _load_environment(environment or str(SAMPLE_ENVIRONMENT))
    handle = sys.stdin if calls_path == "-" else open(calls_path)  # noqa: SIM115
    with handle:
        calls = [json.loads(line) for line in handle if line.strip()]
    with open_pool(config, 1) as pool:
        for episode in range(episodes):
            with pool.session(code, requirements) as active:
                if active.load_error:
                    raise click.ClickException(f"the environment failed to load: {active.load_error}")
                for number, call in enumerate(calls):
                    if call.get("state"):
                        line = {"episode": episode, "call": number, "state": active.state()}
                    else:
                        result = active.call(call.get("name"), call.get("arguments"))
                        line = {"episode": episode, "call": number, "name": call.get("name"), **result.to_dict()}
                    click.echo(json.dumps(line, ensure_ascii=False))


def _load_environment(path: str) -> tuple[str, list[str]]:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if path.endswith(".py"):
        return text, []
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        record = json.loads(first) if first.lstrip().startswith("{") and first.rstrip().endswith("}") else json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{path}: not an environment record (JSON/JSONL) or a .py file: {exc}") from None
    if not isinstance(record.get("code"), str):
        raise click.ClickException(f"{path}: the record has no \"code\"")
    return record["code"], list(record.get("requirements") or [])


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the outcomes as JSONL instead of a table.")
@click.option("--only", multiple=True, metavar="NAME", help="Run only these snippets (repeatable).")
@sandbox_options
def selftest(as_json: bool, only: tuple[str, ...], **kwargs) -> None:
    """Run every hostile snippet (network, host files, bombs, /proc, ctypes, secrets ...) in the sandbox and
    print whether each was contained. Exit status 1 if any was not.

    Uses short limits unless given (--wall-time 2 --cpu-time 2 --memory-mb 256 --max-output-kb 64)."""
    from astra_sandbox.selftest import CASES, Probe, format_table, run_selftest

    unknown = set(only) - {case.name for case in CASES}
    if unknown:
        raise click.BadParameter(f"no such snippet: {', '.join(sorted(unknown))} "
                                 f"(known: {', '.join(case.name for case in CASES)})", param_hint="--only")
    cases = [case for case in CASES if not only or case.name in only]

    ctx = click.get_current_context()
    quick = {"wall_time_s": 2.0, "cpu_time_s": 2, "memory_mb": 256, "max_output_kb": 64}
    for name, value in quick.items():
        if ctx.get_parameter_source(name) == click.core.ParameterSource.DEFAULT:
            kwargs[name] = value
    config = config_from(kwargs)
    started = time.monotonic()
    # one worker: the snippets run one at a time, and leftovers are told apart by namespace
    with Probe() as probe, open_pool(config, 1) as pool:
        outcomes = run_selftest(pool, probe, cases)
    if as_json:
        for outcome in outcomes:
            click.echo(json.dumps(outcome.__dict__))
    else:
        click.echo(format_table(outcomes))
    click.echo(f"selftest: {len(outcomes)} snippets in {time.monotonic() - started:.1f}s", err=True)
    if not all(outcome.contained for outcome in outcomes):
        sys.exit(1)


@main.command()
@sandbox_options
def check(**kwargs) -> None:
    """Start one jailed worker and report how (or the error that names the fix)."""
    from astra_sandbox.jail import find_nsjail
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
    jail = find_nsjail(config) if config.jail else "none (--unsafe-no-jail)"
    click.echo(json.dumps({"jail": jail, "python": worker.info.get("python"), "startup_s": round(elapsed, 3),
                           "program_status": reply.get("run_result", {}).get("status")}))
