"""The astra-eval command: `run BENCH` writes eval_result records; `summary` and `compare` report on them.

The commands are declarations: each run's config and how it plays its items are in `astra_eval.runs`,
the figures in `astra_eval.report`."""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path

import click
from astra_core.config import ConfigError, config_options, load_config, pop_values
from astra_core.jsonl import dumps
from astra_core.options import llm_config_from, llm_options, report_errors, stage_options, stage_options_from

from astra_eval import benchenv, report, runs


@click.group("astra-eval")
@click.version_option(package_name="astra-eval")
def main() -> None:
    """Benchmarks scored by their own checkers: BFCL v3 multi-turn, tau2-bench, ACEBench, AIME.

    \b
      astra-eval run bfcl --category base --limit 5 -o bfcl.jsonl
      astra-eval summary bfcl.jsonl tau2.jsonl
      astra-eval compare base/ sft/ rl/ --png compare.png
    """


@main.group()
def run() -> None:
    """Run a benchmark against an OpenAI-compatible endpoint; one eval_result per item and trial.

    Items come from the benchmark's own data, selected with the options below, or from item
    records given as INPUTS ('-' for stdin). --resume skips item ids already in -o FILE.
    """


def run_command(name: str, config: type, play: Callable, *, own_environment: bool = False) -> None:
    """`astra-eval run NAME`: the stage I/O and endpoint flags, a flag per `config` field (and --config FILE);
    `play(run, config)` runs it (in the benchmark's own environment if `own_environment`)."""

    def command(config_file: str | None, **kwargs) -> None:
        inputs_given = bool(kwargs.get("inputs"))
        options, llm = stage_options_from(kwargs), llm_config_from(kwargs)
        try:
            settings = load_config(config, config_file, pop_values(config, kwargs))
            if own_environment:  # (an oracle replay queries no model)
                benchenv.hand_over(name, None if getattr(settings, "oracle", False) else llm)
            play(runs.Run(f"astra-eval run {name}", options, inputs_given, llm), settings)
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from None

    command.__doc__ = inspect.getdoc(play)
    for option in reversed([stage_options, llm_options, CONFIG_FILE, config_options(config), report_errors]):
        command = option(command)
    run.command(name)(command)


CONFIG_FILE = click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
                           help="YAML file of config fields (flags override it).")

run_command("bfcl", runs.BfclConfig, runs.run_bfcl, own_environment=True)
run_command("tau2", runs.Tau2Config, runs.run_tau2, own_environment=True)
run_command("acebench", runs.AceBenchConfig, runs.run_acebench)
run_command("aime", runs.AimeConfig, runs.run_aime)


def report_rejects(loads: list[report.Loaded], rejects_path: str | None, command: str) -> int:
    """Counts on stderr (always, as every stage does), and which lines counted in no figure and why (all of them,
    with their record or line, in `rejects_path`); returns how many were rejected."""
    rejected = [reject for loaded in loads for reject in loaded.rejects]
    if rejects_path:
        Path(rejects_path).write_bytes(b"".join(dumps({**r, "stage": command}) for r in rejected))
    read = sum(loaded.read for loaded in loads)
    click.echo(f"{command}: read {read} · counted {read - len(rejected)} · rejected {len(rejected)}"
               + (" (they count in no figure):" if rejected else ""), err=True)
    for reject in rejected[:10]:
        click.echo(f"  {reject['source']}: {reject['reason']}", err=True)
    if len(rejected) > 10:
        click.echo(f"  ... {len(rejected) - 10} more", err=True)
    if rejected and not rejects_path:
        click.echo("  (pass --rejects FILE to keep the rejected records)", err=True)
    return len(rejected)


def exit_on_rejects(rejected: int) -> None:
    """Figures are printed from the good records, then exit 1 (an input error, as for every stage), so
    that `set -o pipefail` pipelines notice the lines that counted in no figure."""
    if rejected:
        sys.exit(1)


REJECTS = click.option("--rejects", type=click.Path(dir_okay=False),
                       help="Write every line that counts in no figure here (not an eval_result, or a trial already "
                            "read), with the reason and the line (JSONL).")


@main.command()
@click.argument("results", nargs=-1, type=click.Path(allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON instead of tables.")
@REJECTS
@report_errors
def summary(results: tuple[str, ...], as_json: bool, rejects: str | None) -> None:
    """Tables shaped like the paper's (Tables 1-3) from eval_result files or directories ('-' or none: stdin),
    one row per model."""
    loaded = report.load(results or ("-",))
    rejected = report_rejects([loaded], rejects, "astra-eval summary")
    records = loaded.records
    rows = report.by_model(records)
    if as_json:
        click.echo(json.dumps({model: {f"{g}: {c}": v for (g, c), v in figs.items()} for model, figs in rows.items()},
                              indent=2))
    else:
        click.echo(report.render(rows))
        click.echo("\n" + report.render_errors(report.errors(records)))
    exit_on_rejects(rejected)


@main.command()
@click.argument("runs_", metavar="RUNS...", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option("--label", "labels", multiple=True, help="A name per RUN, in order [default: file or directory name].")
@click.option("--png", type=click.Path(dir_okay=False), help="Write a grouped bar chart here (matplotlib: the `plots` extra).")
@REJECTS
@report_errors
def compare(runs_: tuple[str, ...], labels: tuple[str, ...], png: str | None, rejects: str | None) -> None:
    """Runs side by side (e.g. base vs SFT vs RL): a table per benchmark and, with --png, a bar chart.

    A RUN is an eval_result file or a directory of them ('-': stdin); all its records count as one model.
    """
    if labels and len(labels) != len(runs_):
        raise click.BadParameter(f"{len(labels)} labels for {len(runs_)} runs", param_hint="--label")
    if png:
        report.pyplot()  # a missing `plots` extra fails before the runs are read
    names = list(labels) or [Path(path).stem if Path(path).is_file() else Path(path).name for path in runs_]
    loads = [report.load([path], by_model=False) for path in runs_]
    rejected = report_rejects(loads, rejects, "astra-eval compare")
    table = {name: report.figures(loaded.records) for name, loaded in zip(names, loads, strict=True)}
    click.echo(report.render(table, label="Run"))
    if png:
        report.bar_chart(table, png)
        click.echo(f"\nbar chart: {png}", err=True)
    exit_on_rejects(rejected)


if __name__ == "__main__":
    main()
