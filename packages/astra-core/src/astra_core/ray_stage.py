"""Any declared stage on a Ray cluster, with Ray Data: `astra-core ray [OPTIONS] COMMAND [ARGS]...`.

The stage runs as its command declares it (astra_core.command.StageJob): the same per-record function, resources,
validation, reject reasons and counts. Only where changes:

1. Read (Ray tasks, astra_core.ray_inputs): every input file, directory or URI is read into Ray's object store
   (JSONL or Parquet) and split into blocks of at most --batch-size lines.
2. Check (Ray tasks, astra_core.ray_inputs): every line is parsed and validated as the stage does. A malformed line or a duplicate id
   without --skip-bad stops the run here, naming file, line and field, before any record is processed (in one
   process the lines before it would have been); with --skip-bad, duplicates are known across all batches.
3. Process (Ray Data map_batches over a pool of actors, `StageWorker`): each actor opens the stage's resources
   once (LLM clients, MCP sessions, the sandbox pool, embeddings) and closes them when it ends; each batch runs as
   a Stage in memory (Stage.in_memory): async stages keep `--concurrency` records in flight in each actor, over
   two batches at a time (`AsyncStageWorker`).
4. Write (this process): each batch's outputs, rejects, counts and side outputs come back here and are written by
   the stage's own code (Stage.absorb): one -o file as in one process (JSONL, .gz, .parquet), --resume, the
   summary and exit status. Output order is the order batches finish in.

A batch whose worker dies (a node lost, an out-of-memory kill) is retried by Ray on a restarted actor. Ray counts
no such deaths for us: `_Deaths` does. After --worker-deaths deaths during one batch, its records run one at a
time, and a record during which its worker died --worker-deaths times more is rejected with the reason, never
lost (`WorkerLost`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import inspect
import io
import itertools
import logging
import os
import pickle
import sys
import threading
import traceback
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from astra_core import collector
from astra_core.command import StageJob
from astra_core.jsonl import UnreadableInput
from astra_core.ray_inputs import check_rows, checked, input_files, read_lines
from astra_core.schema import RecordError
from astra_core.stage import Part, Stage, StageError

EXTRA = "astra-agent-core[ray]"
BATCHES_BY_NODE = "ray batches by node"  # a figure of each part, said on the `ray:` line of the summary


@dataclass(frozen=True)
class RayOptions:
    """How `astra-core ray` spreads a stage (the flags of the command; defaults documented there and in docs/ray.md)."""

    address: str | None = None  # None: RAY_ADDRESS, else a local Ray of this run on 127.0.0.1
    actors: int | None = None  # None: the cluster's CPUs / cpus_per_actor (at most one per batch)
    cpus_per_actor: float = 1.0
    batch_size: int | None = None  # None: the stage's own batch, else 8 x concurrency (async) or 64 records
    worker_deaths: int = 3  # deaths of a batch's worker before its records run one at a time; of a record's, rejected


class WorkerLost(Exception):
    """A record whose Ray worker died every time it ran it alone (see the module docstring)."""


# -- the actors ----------------------------------------------------------------------------------------------------

class _Deaths:
    """Runs of a batch (or a record) that started and never finished: deaths of the worker running it. A Ray
    actor of the run (Ray retries a batch whose worker died without counting for us)."""

    def __init__(self) -> None:
        self._running: collections.Counter = collections.Counter()

    def start(self, key: tuple) -> int:
        died = self._running[key]
        self._running[key] += 1
        return died

    def finish(self, key: tuple) -> None:
        self._running[key] -= 1


@dataclass(frozen=True)
class _Plan:
    """What every batch of the run shares, put in Ray's object store once."""

    job: StageJob
    names: list[str]
    done: set[str]  # ids --resume skips
    seen: dict[str, str]  # duplicated ids -> their first line
    side: dict[str, bool]  # side outputs: key -> written (the driver opened a file for it)
    worker_deaths: int


class StageWorker:
    """A Ray actor that runs batches of one stage (Ray Data's callable class): the stage's resources open once, when
    it starts, and close when it ends; async resources and LLM clients live on the actor's own event loop."""

    def __init__(self, plan_ref: list, deaths: Any):
        import ray

        # Ray forwards what an actor prints on stdout to the driver's stdout, where the records go: to stderr with it.
        sys.stdout.flush()
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        self._plan: _Plan = ray.get(plan_ref[0])
        self._job = self._plan.job
        self._node = ray.get_runtime_context().get_node_id()[:8]
        self._deaths = deaths
        self._stack = contextlib.ExitStack()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: dict[str, Any] = {}
        self._failure: str | None = None  # a resource that could not open: every batch stops the run with it
        self._slots: asyncio.Semaphore | None = None  # an async stage's records in flight in this actor
        self._told: dict[str, dict[str, int]] = {}  # token usage already told to the driver, per client
        try:
            self._resources, later = self._job.open_resources(self._stack)
            self._stack.enter_context(collector.set_for_records_in_flight())
            if self._job.is_async:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="astra-stage-loop", daemon=True).start()
                self._opened = self._job.clients(later)
                self._clients = self._on_loop(self._opened.__aenter__())
        except Exception as exc:  # noqa: BLE001 - said by the driver, once, as the stage says it in one process
            self._failure = _stop_message(exc, self._job.options.debug)

    def _on_loop(self, coroutine: Any, timeout: float | None = None) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def __call__(self, batch: dict) -> dict[str, list]:
        return self._call(batch)

    def _call(self, batch: dict) -> dict[str, list]:
        rows = list(zip(batch["file"].tolist(), batch["line"].tolist(), list(batch["raw"]), batch["broken"].tolist(),
                        strict=True))
        if self._failure is not None:
            part = Part(stop=self._failure)
        else:
            part = self._guarded(("batch", rows[0][:2], rows[-1][:2], len(rows)), rows)
        part.stats[BATCHES_BY_NODE] = {self._node: 1}
        return {"part": [pickle.dumps(part)]}

    def _guarded(self, key: tuple, rows: list[tuple]) -> Part:
        """The batch run whole; after worker_deaths deaths during it, record by record."""
        import ray

        died = ray.get(self._deaths.start.remote(key))
        if died < self._plan.worker_deaths:
            part = self._run(rows)
        else:
            part = Part()
            for row in rows:
                part.add(self._alone(row))
        ray.get(self._deaths.finish.remote(key))
        return part

    def _alone(self, row: tuple) -> Part:
        import ray

        key = ("line", row[0], row[1])
        died = ray.get(self._deaths.start.remote(key))
        if died < self._plan.worker_deaths:
            part = self._run([row])
        else:
            part = self._run([row], lost=died)
        ray.get(self._deaths.finish.remote(key))
        return part

    def _run(self, rows: list[tuple], lost: int = 0) -> Part:
        """The rows as one Stage in memory; `lost`: the worker died that many times running this one record alone,
        so it is rejected (through the stage, which still checks it, skips it on --resume, ...) rather than run."""
        job, plan = self._job, self._plan
        stage = job.new_stage()
        side = {key: io.BytesIO() if written else None for key, written in plan.side.items()}
        stop = None
        with stage.in_memory(_by_file(rows, plan.names), done=plan.done, seen=plan.seen):
            bound = {"config": job.settings, "stage": stage, **self._resources, **side}
            try:
                if lost:
                    stage.run(_lost(lost))
                elif job.is_async:
                    self._on_loop(self._arun(stage, bound))
                else:
                    job.process(stage, bound)
            except Exception as exc:  # noqa: BLE001 - a stop (or --fail-fast): the driver stops the run with it
                stop = _stop_message(exc, job.options.debug)
        part = stage.part(stop)
        part.side = {key: buffer.getvalue() for key, buffer in side.items() if buffer is not None}
        return part

    async def _arun(self, stage: Stage, bound: dict[str, Any]) -> None:
        bound.update(self._clients)
        if self._slots is None:  # (made on the loop: one limit for every batch of the actor)
            self._slots = asyncio.Semaphore(self._job.width)
        try:
            await self._job.aprocess(stage, bound, slots=self._slots)
        finally:  # the token usage not yet told: the driver adds up every batch's
            for key, label in (("llm", "llm"), ("user", "user_llm")):
                client = self._clients.get(key)
                if client is not None:
                    now = dataclasses.asdict(client.usage)
                    told = self._told.setdefault(key, dict.fromkeys(now, 0))
                    delta = {name: value - told[name] for name, value in now.items()}
                    self._told[key] = now
                    if delta["requests"]:
                        stage.stats[label] = delta

    def __del__(self) -> None:
        """Ray Data ends the actor gracefully when the stage is done: its resources close then."""
        try:
            if self._loop is not None and hasattr(self, "_opened"):
                self._on_loop(self._opened.__aexit__(None, None, None), timeout=60)
                self._loop.call_soon_threadsafe(self._loop.stop)
        finally:
            self._stack.close()


class AsyncStageWorker(StageWorker):
    """The actor of an async stage: Ray Data gives it two batches at a time, so that while one waits for its last
    records the next one runs (a batch does not wait for the slowest record of the one before); the stage's
    --concurrency holds for the actor as a whole, one limit its batches share."""

    async def __call__(self, batch: dict) -> dict[str, list]:
        return await asyncio.to_thread(self._call, batch)


BATCHES_PER_ACTOR = 2  # in flight in an actor of an async stage


def _by_file(rows: list[tuple], names: list[str]) -> Iterator[Iterator[tuple[str, int, bytes]]]:
    """The rows as Stage.in_memory takes them: per run of lines of one file, their (source, line, bytes)."""
    for file, group in itertools.groupby(rows, key=lambda row: row[0]):
        yield _lines(names[file], group)


def _lines(name: str, group: Iterable[tuple]) -> Iterator[tuple[str, int, bytes]]:
    for _, line, raw, broken in group:
        if broken:
            raise UnreadableInput(broken, source=name, lineno=line)
        yield name, line, bytes(raw)


def _lost(deaths: int):
    def lose(record: dict) -> None:
        raise WorkerLost(f"its Ray worker died each of the {deaths} times it ran this record alone (an "
                         "out-of-memory kill or a crash in native code: see the Ray logs)")

    return lose


def _stop_message(exc: BaseException, debug: bool) -> str:
    """What stops the run, said as the stage command says it (its RecordError or StageError as it is)."""
    if isinstance(exc, (RecordError, StageError)):
        return str(exc)
    message = f"{type(exc).__name__}: {exc}"
    return message + "\n" + "".join(traceback.format_exception(exc)) if debug else message


# -- the command ---------------------------------------------------------------------------------------------------

def find_stage(words: list[str]) -> tuple[Any, str, list[str]]:
    """The astra-* command that `words` name and its arguments: (its click group, its name, the arguments), for
    a stage command (declared with astra_core.command.stage_command) that may run on Ray."""
    import click

    from astra_core.command import stage_specs

    program, *args = words
    scripts = {ep.name: ep for ep in entry_points_of("console_scripts") if ep.name.startswith("astra-")}
    if program not in scripts:
        raise click.UsageError(f"{program} is not an astra command (one of: {', '.join(sorted(scripts))})")
    group = scripts[program].load()
    command, depth = group, 0
    while isinstance(command, click.Group) and depth < len(args) and command.get_command(None, args[depth]):
        command, depth = command.get_command(None, args[depth]), depth + 1
    spec = getattr(command, "stage_spec", None)
    named = " ".join([program, *args[:depth]])
    if spec is None:
        stages = ", ".join(sorted(stage_specs(group)))
        raise click.UsageError(f"{named} is not a stage command (a function of each record); the stages of {program}: "
                               f"{stages or 'none'}")
    if spec.ordered:
        raise click.UsageError(f"{named} numbers its records in input order: run it in one process")
    return group, program, args


def entry_points_of(group: str) -> list[Any]:
    from importlib.metadata import entry_points

    return list(entry_points(group=group))


def runner(settings: RayOptions):
    """The stage runner (astra_core.command.stage_runner) of `astra-core ray`."""

    def run(job: StageJob) -> Stage:
        from astra_core.extras import MissingExtra, require

        try:
            require("ray.data", extra=EXTRA, needed_by="astra-core ray")
        except MissingExtra as exc:
            raise StageError(str(exc)) from None
        return run_on_ray(job, settings)

    return run


# -- the driver ----------------------------------------------------------------------------------------------------

def connect(address: str | None) -> Any:
    """Ray, connected: to `address` (else RAY_ADDRESS), or to a local Ray started for this run on 127.0.0.1."""
    import ray

    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        ray.init(address=address, logging_level=logging.WARNING)
        return ray
    # Ray binds a local instance to the machine's network address unless told it is a one-machine Ray (the
    # setting's name says Windows and OSX; it means that). Only while it starts: its processes keep it, and a
    # process started from here later (`ray start` of a cluster of several nodes) must not inherit it.
    loopback = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
    before = os.environ.get(loopback)
    os.environ[loopback] = "0"
    try:
        ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING)
    finally:
        if before is None:
            del os.environ[loopback]
        else:
            os.environ[loopback] = before
    return ray


def _quiet(ray: Any) -> None:
    """Our progress and counts, not Ray Data's: its bars and per-run log lines off; no run is stopped for going
    without output for a while (one batch of long rollouts can take longer than Ray Data's 30 minutes)."""
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    for name, value in (("print_on_execution_start", False), ("enable_auto_log_stats", False),
                        ("execution_no_progress_timeout_s", -1)):
        if hasattr(context, name):
            setattr(context, name, value)
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*minimum number of concurrent actors.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="ray")


def default_batch_size(job: StageJob) -> int:
    if job.batch:
        return job.batch
    if job.is_async:
        return 8 * job.width
    return 64


def run_on_ray(job: StageJob, settings: RayOptions) -> Stage:
    """Run the job on Ray (see the module docstring); the Stage that wrote its outputs, as `run_here` returns."""
    if "-" in job.options.inputs:
        raise StageError("astra-core ray reads files, directories or URIs, not stdin (workers on other machines "
                         "cannot read it): write it to a file first")
    files = input_files(job.options.inputs)
    names = [file.name for file in files]
    job = dataclasses.replace(job, options=dataclasses.replace(job.options, inputs=tuple(names)))
    ray = connect(settings.address)
    _quiet(ray)
    size = settings.batch_size or default_batch_size(job)
    lines = read_lines(ray, files, size)
    check = checked(check_rows(lines, names, job.spec.reads) if lines is not None else [], names)
    if check.first_bad is not None and not job.options.skip_bad:
        raise check.first_bad
    with contextlib.ExitStack() as stack:
        stage = stack.enter_context(job.new_stage(total=check.lines))
        side = _open_side_outputs(job, stack)
        actor_job = dataclasses.replace(job, uses={k: v for k, v in job.uses.items() if k not in side})
        plan = _Plan(actor_job, names, stage.done_ids, check.seen, {k: v is not None for k, v in side.items()},
                     settings.worker_deaths)
        if lines is not None:
            actors = _actor_count(ray, settings, lines.num_blocks())
            stage.stats["ray"] = _describe_run(ray, actors, settings, size, job)
            _process(ray, stage, lines, plan, side, actors, settings, check.lines)
        return stage


def _open_side_outputs(job: StageJob, stack: contextlib.ExitStack) -> dict[str, Any]:
    """The side outputs (command.side_output) opened here, where the stage's output is written: key -> file or None."""
    from astra_core.command import _open

    return {key: stack.enter_context(_open(opener, job.settings, job.options, job.llm_config))
            for key, opener in job.uses.items() if getattr(opener, "side_output", False)}


def _actor_count(ray: Any, settings: RayOptions, batches: int) -> int:
    if settings.actors is not None:
        return max(1, min(settings.actors, batches))
    cpus = ray.cluster_resources().get("CPU", 1)
    return max(1, min(int(cpus // settings.cpus_per_actor), batches))


def _describe_run(ray: Any, actors: int, settings: RayOptions, size: int, job: StageJob) -> str:
    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    width = f", {job.width} in flight each, {BATCHES_PER_ACTOR} batches at a time" if job.is_async else ""
    return (f"{actors} actor{'s' if actors != 1 else ''} ({settings.cpus_per_actor:g} CPU each{width}) on {nodes} "
            f"node{'s' if nodes != 1 else ''}, batches of {size}")


def _process(ray: Any, stage: Stage, lines: Any, plan: _Plan, side: dict[str, Any], actors: int,
             settings: RayOptions, total: int) -> None:
    # The deaths are counted on the head node (Ray's resource of it), which the run cannot outlive anyway.
    head = {"node:__internal_head__": 0.001} if "node:__internal_head__" in ray.cluster_resources() else {}
    deaths = ray.remote(num_cpus=0)(_Deaths).options(resources=head, max_restarts=-1, max_task_retries=-1).remote()
    plan_ref = ray.put(plan)
    worker, pool, remote = StageWorker, {"size": actors}, {}
    if plan.job.is_async:
        worker = AsyncStageWorker
        if "max_concurrent_calls_per_actor" in inspect.signature(ray.data.ActorPoolStrategy).parameters:
            pool["max_concurrent_calls_per_actor"] = BATCHES_PER_ACTOR
        else:  # (Ray before 2.60)
            remote["max_concurrency"] = BATCHES_PER_ACTOR
    processed = lines.map_batches(
        worker, fn_constructor_args=([plan_ref], deaths), batch_size=None,
        compute=ray.data.ActorPoolStrategy(**pool), num_cpus=settings.cpus_per_actor, **remote)
    absorbed = 0
    try:
        for batch in processed.iter_batches(batch_size=None, batch_format="numpy"):
            for blob in batch["part"]:
                part: Part = pickle.loads(blob)
                stage.absorb(part)
                absorbed += part.counts.read
                for key, lines_written in part.side.items():
                    side[key].write(lines_written)
                if part.stop is not None:
                    raise StageError(part.stop)
    except BaseException:
        stage.counts.read += total - absorbed  # read, not finished: said so in the summary, done by --resume
        raise
    finally:
        for label in ("llm", "user_llm"):
            if isinstance(stage.stats.get(label), dict):
                stage.stats[label] = _usage_line(stage.stats[label])
        by_node = stage.stats.pop(BATCHES_BY_NODE, {})
        stage.stats["ray"] += "; batches by node: " + (", ".join(f"{node} {n}" for node, n in sorted(by_node.items()))
                                                      or "none")


def _usage_line(counts: dict[str, int]) -> str:
    from astra_core.llm.client import Usage

    return str(Usage(**counts))


