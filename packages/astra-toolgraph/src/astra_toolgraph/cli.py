"""The astra-toolgraph command: one subcommand per stage of the SFT data pipeline (paper §2.1), and the
self-evolving engine (AReaL-SEA §4) under `astra-toolgraph evolve`.

    normalize -> filter -> synthesize-chains -> graph -> walk -> verify-chains -> tasks -> augment
    -> (astra-reward judge-task) -> rollout -> (astra-reward judge-trajectory); stats for a dataset.

Each stage is a declaration; what it does to a record is in `astra_toolgraph.stages`.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from astra_core.command import side_records, stage_command
from astra_core.options import report_errors, stage_options, stage_options_from
from astra_core.stage import Stage

from astra_toolgraph import data, stages
from astra_toolgraph.chains import SynthesisConfig
from astra_toolgraph.configs import WalkConfig
from astra_toolgraph.filtering import FilterConfig, filter_server
from astra_toolgraph.tasks import AugmentConfig


@click.group("astra-toolgraph")
@click.version_option(package_name="astra-toolgraph")
def main() -> None:
    """Tool documents -> tool-chain graph -> walks -> tasks -> multi-turn trajectories (ASTRA §2.1).

    Every stage reads JSONL records (files or stdin) and writes JSONL to stdout (or -o).
    """


@main.command()
@click.option("--what", type=click.Choice(["sources", "tasks"]), default="sources", show_default=True,
              help="sources: tool documents for `normalize`; tasks: hand-written tasks for the bundled calendar "
                   "and an mcp-server-sqlite server (for `rollout` when no synthesized task is accepted).")
def samples(what: str) -> None:
    """Print bundled example records: tool sources (absolute paths) for `normalize`, or tasks."""
    if what == "tasks":
        click.echo((data.data_dir() / "sample_tasks.jsonl").read_text(encoding="utf-8"), nl=False)
        return
    for source in data.sample_sources():
        click.echo(json.dumps(source, ensure_ascii=False))


SERVERS = side_records("servers", "tool_server", required=True)

stage_command(main, "normalize", reads=stages.TOOL_SOURCE, writes="tool_server", config=stages.McpConfig, concurrency=4,
              uses={"errlog": stages.server_errlog})(stages.normalize)
stage_command(main, "filter", reads="tool_server", writes="tool_server", config=FilterConfig)(filter_server)
stage_command(main, "synthesize-chains", reads="tool_server", writes="tool_chain", config=SynthesisConfig,
              llm=True)(stages.synthesize_server_chains)
stage_command(main, "graph", reads="tool_server", writes="tool_graph", config=stages.GraphCommandConfig,
              uses={"chains": stages.chains_by_server})(stages.graph_of)
stage_command(main, "walk", reads="tool_graph", writes="tool_chain", config=WalkConfig, batch=2048)(stages.walk_batch)
stage_command(main, "verify-chains", reads="tool_chain", writes="tool_chain", config=stages.VerifyChainsConfig,
              llm=lambda config: config.coherence, uses={"servers": SERVERS})(stages.verify)
stage_command(main, "tasks", reads=stages.TASK_SOURCE, writes="task", config=stages.TasksConfig, llm=True,
              uses={"servers": side_records("servers", "tool_server")})(stages.tasks_of)
stage_command(main, "augment", reads="task", writes="task", config=AugmentConfig, llm=True)(stages.augment)
stage_command(main, "rollout", reads="task", writes="trajectory", config=stages.RolloutCommandConfig, llm=True,
              uses={"servers": SERVERS, "pool": stages.server_pool})(stages.roll_out)


# -- stats -------------------------------------------------------------------------------------
@main.command()
@stage_options
@click.option("--plots", "plot_dir", type=click.Path(file_okay=False), help="Write the PNG figures into this directory (matplotlib: the `plots` extra).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object instead of a table.")
@report_errors
def stats(plot_dir: str | None, as_json: bool, **kwargs) -> None:
    """trajectory records -> a statistics table (or JSON) and PNG plots (paper Figures 9-10)."""
    options = stage_options_from(kwargs)
    output, options.output = options.output, "-"
    from astra_toolgraph.stats import collect, plot, pyplot, table

    if plot_dir:
        pyplot()  # a missing `plots` extra fails before the inputs are read
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
    from astra_toolgraph.evolve.commands import evolve

    main.add_command(evolve)


_register_evolve()
