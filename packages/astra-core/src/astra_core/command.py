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

The function's parameters are bound by name: `record` (first), `config`, `llm`, `user` (with
`user_llm=True`: the user simulator's client, --user-base-url/--user-model, env ASTRA_USER_LLM_*,
defaulting to the main endpoint), `stage` and every name in `uses`. With `batch=N` (or a function of the
config giving N) the function gets a list of up to N records and returns one result per record (outputs,
or an exception to reject it). `flags=` names the config fields that become flags; the rest are set with
--config FILE (one YAML file can then configure every command of a pipeline); `bundled_configs=DIR` lets
--config also name a file of DIR. An opener in `uses` is called with the config, and also the stage
options and the LLM config (None without `llm=`) when it takes two or three arguments; an opener marked
`side_output` yields a binary file (or None) the function writes records of its own to.

What one invocation runs is a `StageJob`: the declaration with this run's settings. Here it runs in this process
(`run_here`); `astra-core ray COMMAND ...` runs the same job on Ray Data (astra_core.ray_stage), the function and
its resources on Ray actors.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from astra_core import collector
from astra_core.config import ConfigError, config_options, find_config, load_config, pop_values
from astra_core.options import llm_config_from, llm_options, stage_options, stage_options_from
from astra_core.schema import RecordError
from astra_core.stage import Stage, StageError, StageOptions

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3

Opener = Callable[..., contextlib.AbstractContextManager]  # (config[, stage options]) -> a resource


@dataclass(frozen=True)
class StageSpec:
    """What a stage command reads and writes (for docs/cli.md and the contract tests)."""

    name: str
    reads: str | dict | None
    writes: str | None
    config: type | None
    llm: bool
    user_llm: bool = False
    requires: tuple[tuple[str, str | None], ...] = ()
    """(flag, record kind) of each file the command cannot run without (an opener's `requires`: [(field, kind)])."""
    ordered: bool = False
    """The function numbers records in input order (`astra-core to-verl`'s index): it runs in one process only."""

    @property
    def reads_name(self) -> str | None:
        if isinstance(self.reads, dict):
            return self.reads.get("title", "record")
        return self.reads


def stage_command(group: click.Group, name: str, *, reads: str | dict | None = None, writes: str | None = None,
                  config: type | None = None, flags: tuple[str, ...] | None = None,
                  llm: bool | Callable[[Any], bool] = False,
                  user_llm: bool = False, uses: dict[str, Opener] | None = None, derive_ids: bool = False,
                  concurrency: int | None = None, batch: int | Callable[[Any], int] | None = None,
                  bundled_configs: Path | None = None, ordered: bool = False) -> Callable:
    """Register `fn` as the stage command `name` of `group` (see the module docstring); returns `fn`."""
    uses = dict(uses or {})

    def decorate(fn: Callable) -> Callable:
        requires = tuple((_flag(config, field), kind) for opener in uses.values()
                         for field, kind in getattr(opener, "requires", ()))
        spec = StageSpec(name, reads, writes, config, bool(llm) or user_llm, user_llm, requires, ordered)

        def command(**kwargs: Any) -> None:
            ctx = click.get_current_context()
            title = command_path(ctx)
            debug = kwargs.pop("debug")
            config_file = kwargs.pop("config_file", None)
            options = stage_options_from(kwargs)
            options.debug = debug
            try:
                values = pop_values(config, kwargs) if config else {}
                if config_file is not None and bundled_configs is not None:
                    config_file = find_config(config_file, bundled_configs)
                settings = load_config(config, config_file, values) if config else None
                llm_config = llm_config_from(kwargs) if spec.llm else None
                if callable(llm) and not llm(settings):  # e.g. verify-chains --no-coherence asks no LLM
                    llm_config = None
                user_config = _user_config(kwargs, llm_config) if user_llm else None
                job = StageJob(fn, title, options, spec, settings, llm_config, user_config, uses, derive_ids,
                               concurrency, batch(settings) if callable(batch) else batch)
                stage = (stage_runner.get() or run_here)(job)
            except (RecordError, StageError, ConfigError, FileNotFoundError, OSError) as exc:
                if debug:
                    raise
                click.echo(f"{title}: {exc}", err=True)
                sys.exit(EXIT_INPUT)
            if stage.counts.errors:
                sys.exit(EXIT_FAILED)

        command.__doc__ = _help(fn, spec)
        decorated = click.option("--debug", is_flag=True, help="Show tracebacks of errors.")(command)
        if user_llm:
            decorated = _user_llm_options(decorated)
        if spec.llm:
            decorated = llm_options(decorated)
        if config is not None:
            decorated = config_options(config, only=flags)(decorated)
            config_help = "YAML file of config fields (flags override it)" + (
                f"; or a bundled one's name ({', '.join(sorted(p.name for p in bundled_configs.glob('*.yaml')))})"
                if bundled_configs is not None else "") + "."
            config_type = click.Path(exists=bundled_configs is None, dir_okay=False)
            decorated = click.option("--config", "config_file", type=config_type, help=config_help)(decorated)
        decorated = stage_options(decorated)
        registered = group.command(name)(decorated)
        registered.stage_spec = spec
        return fn

    return decorate


@dataclass
class StageJob:
    """One invocation of a declared stage: its function and declaration with this run's options and settings. It
    pickles: a Ray actor gets it whole and runs each of its batches as `run_here` runs the whole input."""

    fn: Callable
    title: str  # the command as typed (`astra-reward f1`): provenance and messages name it
    options: StageOptions
    spec: StageSpec
    settings: Any  # the config dataclass instance
    llm_config: Any  # astra_core.llm.LLMConfig, or None: asks no LLM
    user_config: Any  # the user simulator's LLMConfig, or None
    uses: dict[str, Opener]
    derive_ids: bool
    concurrency: int | None  # records in flight of an async function (default: the LLM's concurrency, else 8)
    batch: int | None  # the function takes lists of this many records

    @property
    def is_async(self) -> bool:
        return not self.batch and inspect.iscoroutinefunction(self.fn)

    def new_stage(self, **kwargs: Any) -> Stage:
        return Stage(self.title, self.options, in_kind=self.spec.reads, out_kind=self.spec.writes,
                     derive_ids=self.derive_ids, **kwargs)

    def open_resources(self, stack: contextlib.ExitStack) -> tuple[dict[str, Any], dict[str, Any]]:
        """The resources of `uses`, entered on `stack`, and those to enter on the run's event loop (an async
        resource such as MCP server connections), unentered."""
        opened = {key: _open(opener, self.settings, self.options, self.llm_config) for key, opener in self.uses.items()}
        later = {key: cm for key, cm in opened.items() if hasattr(cm, "__aenter__")}
        return {key: stack.enter_context(cm) for key, cm in opened.items() if key not in later}, later

    @contextlib.asynccontextmanager
    async def clients(self, later: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The async resources entered on the running loop, and the LLM clients (`llm`, `user`), each endpoint
        checked up front: a typo fails once, not once per record."""
        from astra_core.llm import LLMClient, LLMError

        async with contextlib.AsyncExitStack() as stack:
            bound = {key: await stack.enter_async_context(resource) for key, resource in later.items()}
            for key, client_config in (("llm", self.llm_config), ("user", self.user_config)):
                if client_config is None:
                    continue
                client = bound[key] = await stack.enter_async_context(LLMClient(client_config))
                if client_config.base_url:
                    try:
                        await client.model()
                    except LLMError as exc:
                        raise StageError(str(exc)) from exc
            bound.setdefault("llm", None)
            yield bound

    def caller(self, bound: dict[str, Any]) -> Callable:
        """The function of one record (or one list of records), its other parameters bound by name."""
        parameters = list(inspect.signature(self.fn).parameters)[1:]
        fn = self.fn

        def call(record):
            return fn(record, **{p: bound[p] for p in parameters})

        return call

    def process(self, stage: Stage, bound: dict[str, Any]) -> None:
        """Run a synchronous function over the stage's records."""
        bound.setdefault("llm", None)
        if self.batch:
            stage.run_batched(self.caller(bound), self.batch)
        else:
            stage.run(self.caller(bound))

    @property
    def width(self) -> int:
        """Records of an async function in flight: `concurrency=`, else the LLM's --concurrency, else 8."""
        return self.concurrency or (self.llm_config.concurrency if self.llm_config else 8)

    async def aprocess(self, stage: Stage, bound: dict[str, Any], slots: asyncio.Semaphore | None = None) -> None:
        """Run the async function over the stage's records, `width` in flight, on the loop that opened `bound`'s
        clients; `slots`: a limit shared with other runs on the loop (batches of one Ray actor)."""
        if bound.get("llm") is not None and self.llm_config is not None:
            # (the embedded model starts on the first request: a stage asking nothing starts none)
            client = bound["llm"]
            stage.provenance(model=lambda: client.model_name, seed=self.llm_config.seed)
        call = self.caller(bound)
        if slots is not None:
            unlimited = call

            async def call(record):
                async with slots:
                    return await unlimited(record)

        await stage.arun(call, concurrency=self.width)


# How a stage command runs its job: in this process, unless a runner is set (`astra-core ray` sets its own).
stage_runner: ContextVar[Callable[[StageJob], Stage] | None] = ContextVar("stage_runner", default=None)


def run_here(job: StageJob) -> Stage:
    """Run the job in this process: its resources opened once, its function over every input record."""
    with contextlib.ExitStack() as stack:
        resources, later = job.open_resources(stack)
        stage = stack.enter_context(job.new_stage())
        bound = {"config": job.settings, "stage": stage, **resources}
        stack.enter_context(collector.set_for_records_in_flight())
        if job.is_async:
            asyncio.run(_arun(job, stage, bound, later))
        else:
            job.process(stage, bound)
        return stage


async def _arun(job: StageJob, stage: Stage, bound: dict[str, Any], later: dict[str, Any]) -> None:
    async with job.clients(later) as clients:
        bound.update(clients)
        try:
            await job.aprocess(stage, bound)
        finally:
            stage.stats.update(usage_stats(bound))


def usage_stats(bound: dict[str, Any]) -> dict[str, str]:
    """The token usage lines of a run's LLM clients (none for a client that asked nothing)."""
    return {label: str(bound[key].usage) for key, label in (("llm", "llm"), ("user", "user_llm"))
            if bound.get(key) is not None and bound[key].usage.requests}


def side_output(opener: Opener) -> Opener:
    """Mark an opener whose resource is a binary file (or None) the stage function writes records of its own to
    (`astra-qaenv export --gold-trajectories`). In one process nothing changes; on Ray (astra_core.ray_stage) the
    process that writes the stage's output opens it, and each batch's lines go to it from there."""
    opener.side_output = True
    return opener


def _open(opener: Callable, settings: Any, options: Any, llm_config: Any):
    """An opener takes the config, then the stage options (e.g. --resume) and the LLM config if it asks for them."""
    try:
        wanted = len([p for p in inspect.signature(opener).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
    except (TypeError, ValueError):
        wanted = 1
    return opener(*(settings, options, llm_config)[:max(1, min(wanted, 3))])


def _user_llm_options(f: Callable) -> Callable:
    f = click.option("--user-model", envvar="ASTRA_USER_LLM_MODEL",
                     help="The user simulator's model [env ASTRA_USER_LLM_MODEL; default: --model]")(f)
    return click.option("--user-base-url", envvar="ASTRA_USER_LLM_BASE_URL",
                        help="The user simulator's endpoint [env ASTRA_USER_LLM_BASE_URL; default: --base-url]")(f)


def _user_config(kwargs: dict, llm_config):
    import dataclasses

    base_url, model = kwargs.pop("user_base_url", None), kwargs.pop("user_model", None)
    return dataclasses.replace(llm_config, base_url=base_url or llm_config.base_url,
                               model=model or (None if base_url else llm_config.model))


def side_records(field: str, kind: str | dict | None, *, required: bool = False,
                 documents: str | None = None) -> Opener:
    """A resource: the records of the JSONL file(s) a config field names, by id ({} when the field is unset);
    e.g. `uses={"samples": side_records("samples", "rl_sample")}` for a `--samples FILE` join. `kind` is a record
    kind or a precise shape of one (astra_core.jsonl.read_jsonl's `kind`); `documents` names the record kind a
    required file's docs show when `kind` is a shape."""

    @contextlib.contextmanager
    def open_records(config: Any, options: Any = None):
        from astra_core.jsonl import read_jsonl

        value = getattr(config, field)
        paths = [value] if isinstance(value, str) else list(value or [])
        if required and not paths:
            raise click.UsageError(f"--{_flag(config, field)} FILE is required (or `{field}:` in --config)")
        yield {record["id"]: record for path in paths for record in read_jsonl(path, kind=kind)}

    if required:
        open_records.requires = [(field, documents or kind)]

    return open_records


def _flag(config: Any, field: str) -> str:
    """The flag of a config field (`config` a dataclass or its instance)."""
    import dataclasses

    spec = next((f for f in dataclasses.fields(config) if f.name == field), None)
    return (spec.metadata.get("flag") if spec else None) or field.replace("_", "-")


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
