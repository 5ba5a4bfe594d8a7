"""The astra-toolgraph command: one subcommand per stage of the SFT data pipeline (paper §2.1).

    normalize -> filter -> synthesize-chains -> graph -> walk -> verify-chains -> tasks -> augment
    -> (astra-reward judge-task) -> rollout -> (astra-reward judge-trajectory); stats for a dataset.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict
from pathlib import Path

import click
from astra_core.jsonl import read_jsonl
from astra_core.llm import LLMClient
from astra_core.options import llm_config_from, llm_options, report_errors, stage_options, stage_options_from
from astra_core.schema import RecordError, validate
from astra_core.stage import Rejected, Stage, StageError

from astra_toolgraph import data
from astra_toolgraph.chains import SynthesisConfig, chain_record, synthesize_chains
from astra_toolgraph.emulator import EmulatorConfig
from astra_toolgraph.filtering import FilterConfig, filter_server
from astra_toolgraph.graph import GraphConfig, build_graph
from astra_toolgraph.mcp_client import ServerPool, default_errlog
from astra_toolgraph.normalize import SourceError, normalize_source
from astra_toolgraph.rollout import TOOL_CHOICES, RolloutConfig, rollout
from astra_toolgraph.stats import collect, plot, table
from astra_toolgraph.tasks import AXES, AugmentConfig, TaskConfig, augment_task, chain_tasks, server_tasks
from astra_toolgraph.verify import VerifyConfig, verify_chain
from astra_toolgraph.walks import CSRGraph, WalkConfig, as_lists, walk_graphs


@click.group()
@click.version_option(package_name="astra-toolgraph")
def main() -> None:
    """Tool documents -> tool-chain graph -> walks -> tasks -> multi-turn trajectories (ASTRA §2.1).

    Every stage reads JSONL records (files or stdin) and writes JSONL to stdout (or -o).
    """


def load_servers(paths: tuple[str, ...]) -> dict[str, dict]:
    if not paths:
        raise StageError("--servers FILE is required: the tool_server records the inputs refer to")
    return {record["id"]: record for path in paths for record in read_jsonl(path, kind="tool_server")}


def server_of(record: dict, servers: dict[str, dict]) -> dict:
    server = servers.get(record["server_id"])
    if server is None:
        raise Rejected(f"server {record['server_id']!r} is not in --servers")
    return server


@contextlib.contextmanager
def stderr_sink(path: str | None):
    """Where started MCP servers write their stderr: a file, or ours."""
    if path is None:
        yield default_errlog()
    else:
        with open(path, "a", encoding="utf-8") as handle:
            yield handle


def run_llm_stage(stage: Stage, config, make_fn) -> None:
    """Run `make_fn(llm)` over the stage's inputs with one LLM client; token usage goes to the counts."""

    async def go() -> None:
        async with LLMClient(config) as llm:
            try:
                await stage.arun(make_fn(llm), concurrency=config.concurrency)
            finally:
                stage.stats["llm"] = str(llm.usage)

    asyncio.run(go())


# -- normalize ---------------------------------------------------------------------------------
@main.command()
@stage_options
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds for a live server's tools/list.")
@click.option("--server-log", type=click.Path(dir_okay=False), help="Append started MCP servers' stderr here.")
@report_errors
def normalize(timeout: float, server_log: str | None, **kwargs) -> None:
    """Tool documents -> tool_server records (OpenAI tool schemas + how to call the server).

    Each input line is a source: a live MCP server (stdio command or streamable-HTTP URL; asked
    tools/list), a line of ASTRA's mcp_servers.jsonl, an OpenAI function list, BFCL function docs,
    or an OpenAPI spec. `astra-toolgraph samples` prints the bundled example sources.
    """
    options = stage_options_from(kwargs)
    with stderr_sink(server_log) as errlog, Stage("astra-toolgraph normalize", options,
                                                     out_kind="tool_server") as stage:
        async def one(source: dict) -> list[dict]:
            try:
                return await normalize_source(source, timeout_s=timeout, errlog=errlog)
            except SourceError as exc:
                raise Rejected(f"source: {exc}") from None

        asyncio.run(stage.arun(one, concurrency=4))


@main.command()
def samples() -> None:
    """Print the bundled example sources (JSONL, absolute paths) for `normalize`."""
    for source in data.sample_sources():
        click.echo(json.dumps(source, ensure_ascii=False))


# -- filter ------------------------------------------------------------------------------------
@main.command("filter")
@stage_options
@click.option("--min-tools", type=int, default=3, show_default=True, help="Reject servers with fewer usable tools.")
@click.option("--min-description-words", type=int, default=3, show_default=True,
              help="Drop tools whose description is shorter (a vague description).")
@report_errors
def filter_command(min_tools: int, min_description_words: int, **kwargs) -> None:
    """Drop vague/unmappable tools; reject servers left with too few tools (reasons in --rejects)."""
    options = stage_options_from(kwargs)
    config = FilterConfig(min_tools=min_tools, min_description_words=min_description_words)
    with Stage("astra-toolgraph filter", options, in_kind="tool_server", out_kind="tool_server") as stage:
        stage.run(lambda server: filter_server(server, config))


# -- synthesize-chains -------------------------------------------------------------------------
@main.command("synthesize-chains")
@stage_options
@llm_options
@click.option("--chains-per-request", type=int, default=4, show_default=True)
@click.option("--requests", type=int, default=1, show_default=True, help="Requests per server (distinct seeds).")
@click.option("--max-chain-length", type=int, default=8, show_default=True)
@report_errors
def synthesize_chains_command(chains_per_request: int, requests: int, max_chain_length: int, **kwargs) -> None:
    """tool_server -> tool_chain records: LLM joint synthesis of (task, chain) pairs per server."""
    options, config = stage_options_from(kwargs), llm_config_from(kwargs)
    synthesis = SynthesisConfig(chains_per_request=chains_per_request, requests=requests,
                                max_chain_length=max_chain_length)
    with Stage("astra-toolgraph synthesize-chains", options, in_kind="tool_server", out_kind="tool_chain",
               model=config.model, seed=config.seed) as stage:
        run_llm_stage(stage, config, lambda llm: lambda server: synthesize_chains(llm, server, synthesis, config.seed))


# -- graph -------------------------------------------------------------------------------------
@main.command()
@stage_options
@click.option("--chains", "chain_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="tool_chain records (synthesize-chains output) whose consecutive pairs weight the edges.")
@click.option("--schema-edges/--no-schema-edges", default=True, show_default=True,
              help="Add LLM-free edges where an output field feeds a required parameter.")
@click.option("--schema-weight", type=float, default=1.0, show_default=True)
@click.option("--match-threshold", type=float, default=0.5, show_default=True)
@report_errors
def graph(chain_files: tuple[str, ...], schema_edges: bool, schema_weight: float, match_threshold: float,
          **kwargs) -> None:
    """tool_server -> tool_graph: transition graph weighted by chain pair counts, plus schema edges."""
    options = stage_options_from(kwargs)
    config = GraphConfig(schema_edges=schema_edges, schema_weight=schema_weight, match_threshold=match_threshold)
    chains_by_server: dict[str, list[list[str]]] = defaultdict(list)
    for path in chain_files:
        for chain in read_jsonl(path, kind="tool_chain"):
            chains_by_server[chain["server_id"]].append(chain["tools"])

    def one(server: dict) -> dict:
        record = build_graph(server, chains_by_server.get(server["id"], []), config)
        if not record["edges"]:
            raise Rejected("no edges: no chain pairs and no schema dependencies between its tools")
        return record

    with Stage("astra-toolgraph graph", options, in_kind="tool_server", out_kind="tool_graph") as stage:
        stage.run(one)


# -- walk --------------------------------------------------------------------------------------
@main.command()
@stage_options
@click.option("--walks", type=int, default=32, show_default=True, help="Walks started per graph.")
@click.option("--min-length", type=int, default=2, show_default=True)
@click.option("--max-length", type=int, default=5, show_default=True)
@click.option("--acyclic", is_flag=True, help="Never revisit a tool within a walk.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--start", type=click.Choice(["uniform", "weighted"]), default="uniform", show_default=True)
@click.option("--dedup/--no-dedup", default=True, show_default=True)
@click.option("--batch-size", type=int, default=2048, show_default=True, help="Graphs walked together.")
@report_errors
def walk(walks: int, min_length: int, max_length: int, acyclic: bool, seed: int, start: str, dedup: bool,
         batch_size: int, **kwargs) -> None:
    """tool_graph -> tool_chain records: length-bounded weighted random walks (seeded, vectorized)."""
    options = stage_options_from(kwargs)
    try:
        config = WalkConfig(walks=walks, min_length=min_length, max_length=max_length, acyclic=acyclic, seed=seed,
                            start=start, dedup=dedup)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    with Stage("astra-toolgraph walk", options, in_kind="tool_graph", out_kind="tool_chain", seed=seed) as stage:
        batch: list[dict] = []
        for record in stage.inputs():
            batch.append(record)
            if len(batch) >= batch_size:
                _walk_batch(stage, batch, config)
                batch = []
        _walk_batch(stage, batch, config)


def _walk_batch(stage: Stage, graphs: list[dict], config: WalkConfig) -> None:
    if not graphs:
        return
    results = walk_graphs([CSRGraph.from_record(g) for g in graphs], [g["server_id"] for g in graphs], config)
    for graph, walked in zip(graphs, map(as_lists, results), strict=True):
        if not walked:
            stage.reject(graph, f"no walk of at least {config.min_length} tools (too few edges)")
            continue
        stage.emit([chain_record(graph["server_id"], [graph["nodes"][n] for n in nodes], origin="walk", task=None,
                                 parent=graph, count=count) for nodes, count in walked], graph)


# -- verify-chains -----------------------------------------------------------------------------
@main.command("verify-chains")
@stage_options
@llm_options
@click.option("--servers", "server_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="tool_server records of the chains' servers.")
@click.option("--dependency/--no-dependency", default=True, show_default=True, help="LLM-free dependency check.")
@click.option("--coherence/--no-coherence", default=True, show_default=True, help="LLM task-chain coherence check.")
@click.option("--match-threshold", type=float, default=0.5, show_default=True)
@click.option("--attempts", type=int, default=3, show_default=True,
              help="Judge replies tried per chain before an unparseable verdict rejects it.")
@report_errors
def verify_chains(server_files: tuple[str, ...], dependency: bool, coherence: bool, match_threshold: float,
                  attempts: int, **kwargs) -> None:
    """tool_chain -> tool_chain: dependency and coherence checks; failures go to --rejects."""
    options, config = stage_options_from(kwargs), llm_config_from(kwargs)
    servers = load_servers(server_files)
    verify = VerifyConfig(dependency=dependency, coherence=coherence, match_threshold=match_threshold,
                          attempts=attempts)
    with Stage("astra-toolgraph verify-chains", options, in_kind="tool_chain", out_kind="tool_chain",
               model=config.model if coherence else None) as stage:
        if coherence:
            run_llm_stage(stage, config, lambda llm: lambda chain: verify_chain(llm, chain, server_of(chain, servers),
                                                                                verify))
        else:
            asyncio.run(stage.arun(lambda chain: verify_chain(None, chain, server_of(chain, servers), verify)))


# -- tasks and augment -------------------------------------------------------------------------
def record_kind(record: dict) -> str:
    for kind in ("tool_chain", "tool_server"):
        try:
            validate(record, kind)
            return kind
        except RecordError:
            continue
    raise Rejected("neither a tool_chain nor a tool_server record")


@main.command()
@stage_options
@llm_options
@click.option("--servers", "server_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="tool_server records of the input chains' servers.")
@click.option("--per-chain", type=int, default=1, show_default=True, help="Chain-conditioned tasks per chain.")
@click.option("--per-server", type=int, default=2, show_default=True, help="Server-only tasks per server.")
@report_errors
def tasks(server_files: tuple[str, ...], per_chain: int, per_server: int, **kwargs) -> None:
    """tool_chain -> chain-conditioned tasks; tool_server -> server-only tasks (inputs may mix both)."""
    options, config = stage_options_from(kwargs), llm_config_from(kwargs)
    servers = load_servers(server_files) if server_files else {}
    task_config = TaskConfig(per_chain=per_chain, per_server=per_server)

    def make(llm):
        async def one(record: dict) -> list[dict]:
            if record_kind(record) == "tool_server":
                return await server_tasks(llm, record, task_config)
            return await chain_tasks(llm, record, server_of(record, servers), task_config)
        return one

    with Stage("astra-toolgraph tasks", options, out_kind="task", model=config.model, seed=config.seed) as stage:
        run_llm_stage(stage, config, make)


@main.command()
@stage_options
@llm_options
@click.option("--axes", default=",".join(AXES), show_default=True, help="Comma-separated: diversity,complexity,persona.")
@click.option("--keep-original/--no-keep-original", default=True, show_default=True)
@click.option("--language-check/--no-language-check", default=True, show_default=True)
@click.option("--intent-check/--no-intent-check", default=True, show_default=True)
@click.option("--attempts", type=int, default=3, show_default=True,
              help="Intent-check replies tried before an unparseable verdict drops the rewrite.")
@report_errors
def augment(axes: str, keep_original: bool, language_check: bool, intent_check: bool, attempts: int,
            **kwargs) -> None:
    """task -> task: the originals plus rewrites along diversity, complexity and persona."""
    options, config = stage_options_from(kwargs), llm_config_from(kwargs)
    chosen = tuple(a.strip() for a in axes.split(",") if a.strip())
    unknown = [a for a in chosen if a not in AXES]
    if unknown:
        raise click.BadParameter(f"unknown axes {unknown}; choose from {', '.join(AXES)}")
    augment_config = AugmentConfig(axes=chosen, keep_original=keep_original, check_language=language_check,
                                   check_intent=intent_check, seed=config.seed or 0, attempts=attempts)
    with Stage("astra-toolgraph augment", options, in_kind="task", out_kind="task", model=config.model,
               seed=config.seed) as stage:
        run_llm_stage(stage, config, lambda llm: lambda task: augment_task(llm, task, augment_config))


# -- rollout -----------------------------------------------------------------------------------
@main.command("rollout")
@stage_options
@llm_options
@click.option("--servers", "server_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="tool_server records of the tasks' servers.")
@click.option("--max-turns", type=int, default=8, show_default=True, help="Assistant turns per trajectory.")
@click.option("--tool-choice", type=click.Choice(TOOL_CHOICES), default="auto", show_default=True,
              help="OpenAI tool_choice; first-required obliges a call on the first turn only.")
@click.option("--parallel-calls/--sequential-calls", default=True, show_default=True)
@click.option("--samples", "samples_per_task", type=int, default=1, show_default=True, help="Trajectories per task.")
@click.option("--failure-rate", type=float, default=0.2, show_default=True,
              help="Emulated calls that fail (timeout/unreachable); the paper uses 20%.")
@click.option("--emulator-seed", type=int, default=0, show_default=True)
@click.option("--emulator-max-tokens", type=int, default=None, help="Cap on an emulated output's tokens.")
@click.option("--emulate-live", is_flag=True, help="Emulate deployed servers too (no real calls).")
@click.option("--mcp-call-timeout-s", "call_timeout", type=float, default=60.0, show_default=True,
              help="Seconds per call to a real MCP server.")
@click.option("--server-log", type=click.Path(dir_okay=False), help="Append started MCP servers' stderr here.")
@click.option("--system-prompt", default=None, help="The agent's system message.")
@report_errors
def rollout_command(server_files: tuple[str, ...], max_turns: int, tool_choice: str, parallel_calls: bool,
                    samples_per_task: int, failure_rate: float, emulator_seed: int, emulator_max_tokens: int | None,
                    emulate_live: bool, call_timeout: float, server_log: str | None, system_prompt: str | None,
                    **kwargs) -> None:
    """task -> trajectory: multi-turn tool use on real MCP servers and the stateful emulator."""
    options, config = stage_options_from(kwargs), llm_config_from(kwargs)
    servers = load_servers(server_files)
    rollout_config = RolloutConfig(
        max_turns=max_turns, tool_choice=tool_choice, parallel_calls=parallel_calls, samples=samples_per_task,
        emulate_live=emulate_live, **({"system_prompt": system_prompt} if system_prompt else {}),
        emulator=EmulatorConfig(failure_rate=failure_rate, seed=emulator_seed, max_tokens=emulator_max_tokens))

    with stderr_sink(server_log) as errlog, Stage("astra-toolgraph rollout", options, in_kind="task",
                                                     out_kind="trajectory", model=config.model,
                                                     seed=config.seed) as stage:
        async def go() -> None:
            pool = ServerPool(timeout_s=call_timeout, errlog=errlog)
            async with LLMClient(config) as llm:
                async def one(task: dict) -> list[dict]:
                    server = server_of(task, servers)
                    return [await rollout(llm, task, server, pool, rollout_config, sample)
                            for sample in range(rollout_config.samples)]
                try:
                    await stage.arun(one, concurrency=config.concurrency)
                finally:
                    stage.stats["llm"] = str(llm.usage)
                    await pool.aclose()

        asyncio.run(go())


# -- stats -------------------------------------------------------------------------------------
@main.command()
@stage_options
@click.option("--plots", "plot_dir", type=click.Path(file_okay=False), help="Write the PNG figures into this directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object instead of a table.")
@report_errors
def stats(plot_dir: str | None, as_json: bool, **kwargs) -> None:
    """trajectory records -> a statistics table (or JSON) and PNG plots (paper Figures 9-10)."""
    options = stage_options_from(kwargs)
    output, options.output = options.output, "-"
    with Stage("astra-toolgraph stats", options, in_kind="trajectory") as stage:
        dataset = collect(stage.inputs())
        stage.counts.produced = dataset.samples
    text = json.dumps(dataset.summary()) + "\n" if as_json else table(dataset)
    if output == "-":
        click.echo(text, nl=False)
    else:
        Path(output).write_text(text)
    if plot_dir:
        for path in plot(dataset, plot_dir):
            click.echo(f"wrote {path}", err=True)


def _register_evolve() -> None:
    from astra_toolgraph.evolve.commands import COMMANDS

    for command in COMMANDS:
        main.add_command(command)


_register_evolve()
