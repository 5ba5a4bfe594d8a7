"""Stage commands as declarations: a documented config dataclass and one per-record function.

    @dataclass
    class F1Config:
        variant: str = knob("f1", "f1 | recall | precision.", choices=VARIANTS)

    @stage_command(main, "f1", reads=SCORABLE, config=F1Config)
    def score_f1(record: dict, config: F1Config) -> dict:
        '''F1 trajectory reward of records carrying `messages` and `job`.'''
        ...

    @stage_command(main, "judge-task", reads="task", writes="task", config=JudgeConfig, llm=True)
    async def judge_task_record(record: dict, config: JudgeConfig, llm: LLMClient) -> dict:
        ...

The decorator registers the command on the click group and returns the function unchanged, so what
the command does to a record is the library API too. The command gets the stage options (inputs or
stdin, -o, --rejects, --shard, --skip-bad, --resume, --progress, --fail-fast, --debug), `--config
FILE` and one flag per config field (astra_core.config), and with `llm=True` the LLM endpoint flags
(env ASTRA_LLM_*). It validates every input record against `reads` (a record kind or a JSON schema:
a wrong type is a reject naming file, line and field, never a score), opens the LLM client and the
resources in `uses`, runs the function over the records (async ones concurrently), records token
usage, and exits with:

    0  every record was processed (some may be rejected for what they are)
    1  input error: a malformed line without --skip-bad, a bad config, an unreachable endpoint
    2  usage error (click)
    3  some records failed internally (rejected as `error: ...`; --debug shows tracebacks)

The function's parameters are bound by name: `record` (first), `config`, `llm`, `stage` and every
name in `uses`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from astra_core.config import ConfigError, config_options, load_config, pop_values
from astra_core.options import llm_config_from, llm_options, stage_options, stage_options_from
from astra_core.schema import RecordError
from astra_core.stage import Stage, StageError

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3

Opener = Callable[[Any], contextlib.AbstractContextManager]  # config -> context manager of a resource


@dataclass(frozen=True)
class StageSpec:
    """What a stage command reads and writes (for docs/cli.md and the contract tests)."""

    name: str
    reads: str | dict | None
    writes: str | None
    config: type | None
    llm: bool

    @property
    def reads_name(self) -> str | None:
        if isinstance(self.reads, dict):
            return self.reads.get("title", "record")
        return self.reads


def stage_command(group: click.Group, name: str, *, reads: str | dict | None = None, writes: str | None = None,
                  config: type | None = None, llm: bool = False, uses: dict[str, Opener] | None = None,
                  derive_ids: bool = False, concurrency: int | None = None) -> Callable:
    """Register `fn` as the stage command `name` of `group` (see the module docstring); returns `fn`."""
    uses = dict(uses or {})

    def decorate(fn: Callable) -> Callable:
        spec = StageSpec(name, reads, writes, config, llm)
        parameters = list(inspect.signature(fn).parameters)[1:]

        def command(**kwargs: Any) -> None:
            ctx = click.get_current_context()
            title = command_path(ctx)
            debug = kwargs.pop("debug")
            config_file = kwargs.pop("config_file", None)
            options = stage_options_from(kwargs)
            options.debug = debug
            try:
                values = pop_values(config, kwargs) if config else {}
                settings = load_config(config, config_file, values) if config else None
                llm_config = llm_config_from(kwargs) if llm else None
                stage = _run(fn, title, options, spec, settings, llm_config, uses, parameters, derive_ids,
                             concurrency)
            except (RecordError, StageError, ConfigError, FileNotFoundError, OSError) as exc:
                if debug:
                    raise
                click.echo(f"{title}: {exc}", err=True)
                sys.exit(EXIT_INPUT)
            if stage.counts.errors:
                sys.exit(EXIT_FAILED)

        command.__doc__ = _help(fn, spec)
        decorated = click.option("--debug", is_flag=True, help="Show tracebacks of errors.")(command)
        if llm:
            decorated = llm_options(decorated)
        if config is not None:
            decorated = config_options(config)(decorated)
            decorated = click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
                                     help="YAML file of config fields (flags override it).")(decorated)
        decorated = stage_options(decorated)
        registered = group.command(name)(decorated)
        registered.stage_spec = spec
        return fn

    return decorate


def _run(fn, title, options, spec, settings, llm_config, uses, parameters, derive_ids, concurrency) -> Stage:
    from astra_core.llm import LLMClient, LLMError

    with contextlib.ExitStack() as stack:
        resources = {key: stack.enter_context(opener(settings)) for key, opener in uses.items()}
        stage = stack.enter_context(Stage(title, options, in_kind=spec.reads, out_kind=spec.writes,
                                          derive_ids=derive_ids))
        bound = {"config": settings, "stage": stage, **resources}
        if not inspect.iscoroutinefunction(fn):
            stage.run(lambda record: fn(record, **{p: bound[p] for p in parameters}))
            return stage

        async def go() -> None:
            async with contextlib.AsyncExitStack() as clients:
                if llm_config is not None:
                    try:
                        bound["llm"] = await clients.enter_async_context(LLMClient(llm_config))
                        stage.provenance(model=await bound["llm"].model(), seed=llm_config.seed)
                    except LLMError as exc:
                        raise StageError(str(exc)) from exc
                width = concurrency or (llm_config.concurrency if llm_config else 8)
                await stage.arun(lambda record: fn(record, **{p: bound[p] for p in parameters}), concurrency=width)
                if "llm" in bound:
                    stage.stats["llm"] = str(bound["llm"].usage)

        asyncio.run(go())
        return stage


def side_records(field: str, kind: str) -> Opener:
    """A resource: the records of the JSONL file a config field names, by id ({} when the field is unset);
    e.g. `uses={"samples": side_records("samples", "rl_sample")}` for a `--samples FILE` join."""

    @contextlib.contextmanager
    def open_records(config: Any):
        from astra_core.jsonl import read_jsonl

        path = getattr(config, field)
        yield {record["id"]: record for record in read_jsonl(path, kind=kind)} if path else {}

    return open_records


def command_path(ctx: click.Context) -> str:
    """`astra-reward f1`: the command as a user types it (provenance and messages name it so)."""
    names = []
    while ctx is not None:
        names.append(ctx.info_name or ctx.command.name)
        ctx = ctx.parent
    return " ".join(reversed([n for n in names if n]))


def _help(fn: Callable, spec: StageSpec) -> str:
    text = inspect.getdoc(fn) or ""
    io = f"Reads {spec.reads_name or 'records'}" + (f", writes {spec.writes}." if spec.writes else ".")
    return f"{text}\n\n{io}" if text else io


def stage_specs(group: click.Group, prefix: str = "") -> dict[str, StageSpec]:
    """Every stage command under `group` (subgroups included), by command path."""
    found = {}
    for name, command in sorted(group.commands.items()):
        path = f"{prefix} {name}".strip()
        if isinstance(command, click.Group):
            found.update(stage_specs(command, path))
        elif getattr(command, "stage_spec", None) is not None:
            found[path] = command.stage_spec
    return found
