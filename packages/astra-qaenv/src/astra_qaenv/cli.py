"""The astra-qaenv command: knowledge -> decomposed Q–A -> verified environments -> RL samples.

Each stage is a declaration; what it does to a record is in `astra_qaenv.stages`."""

from __future__ import annotations

import json
import sys
from importlib.resources import files

import click
from astra_core.command import EXIT_FAILED, EXIT_INPUT, stage_command
from astra_core.config import ConfigError, config_options, load_config, pop_values
from astra_core.jsonl import read_jsonl
from astra_core.llm import LLMError
from astra_core.options import llm_config_from, llm_options, report_errors, stage_options, stage_options_from
from astra_core.schema import RecordError
from astra_core.stage import StageError

from astra_qaenv import stages
from astra_qaenv.build import build_environment
from astra_qaenv.merge import merge_environment
from astra_qaenv.synthesize import SynthesisConfig
from astra_qaenv.validate import ValidationConfig, validate_instance
from astra_qaenv.verify import Verifier

SAMPLE_DATA = {"entities": "kb/entities.jsonl", "relations": "kb/relations.jsonl", "schema": "kb/schema.jsonl",
               "knowledge": "knowledge/domains.jsonl", "questions": "knowledge/questions.jsonl"}


@click.group()
@click.version_option(package_name="astra-qaenv")
def main() -> None:
    """Verifiable, code-executable RL environments from decomposed Q–A (ASTRA §2.2, §3.2.2).

    \b
    programmatic | synthesize -> validate -> build-env -> merge -> export -> (astra-grpo train)
    """


stage_command(main, "synthesize", reads=stages.KNOWLEDGE_ROW, writes="qa_instance", config=SynthesisConfig,
              llm=True, derive_ids=True)(stages.synthesize_record)
stage_command(main, "programmatic", reads=stages.ENTITY_ROW, writes="qa_instance", config=stages.ProgrammaticConfig,
              uses={"kb": stages.open_kb})(stages.programmatic_record)
stage_command(main, "validate", reads="qa_instance", writes="qa_instance", config=ValidationConfig,
              llm=True)(validate_instance)
stage_command(main, "build-env", reads="qa_instance", writes="environment", config=stages.BuildEnvConfig, llm=True,
              uses={"verifier": Verifier})(build_environment)
stage_command(main, "merge", reads="environment", writes="environment", config=stages.MergeEnvConfig, llm=True,
              uses={"verifier": Verifier})(merge_environment)


@main.command("export")
@stage_options
@llm_options
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="YAML file of config fields (flags override it).")
@config_options(stages.ExportCommandConfig)
def export_command(config_file: str | None, **kwargs) -> None:
    """environment -> rl_sample (tools + mixed distractors, job, prompt) [+ gold trajectories].

    Reads its inputs twice (the distractor pool is their tools, unless --tool-pool): stdin is spooled."""
    options, llm_config = stage_options_from(kwargs), llm_config_from(kwargs)
    try:
        config = load_config(stages.ExportCommandConfig, config_file, pop_values(stages.ExportCommandConfig, kwargs))
        stage = stages.export_all(options, config, llm_config)
    except (RecordError, StageError, ConfigError, LLMError, OSError) as exc:
        click.echo(f"astra-qaenv export: {exc}", err=True)
        sys.exit(EXIT_INPUT)
    if stage.counts.errors:
        sys.exit(EXIT_FAILED)


@main.command("stats")
@click.argument("inputs", nargs=-1, type=click.Path(allow_dash=True, dir_okay=False))
@click.option("-o", "--output", default="-", show_default="stdout", help="Write the summary (JSON) here.")
@click.option("--plots", type=click.Path(file_okay=False), help="Write PNG figures (paper Figures 11-13) here (matplotlib: the `plots` extra).")
@report_errors
def stats_command(inputs, output, plots):
    """Statistics of qa_instance / environment / rl_sample files (paper A.1.2), optionally with plots."""
    from astra_qaenv.stats import plot, pyplot, summarize

    if plots:
        pyplot()  # a missing `plots` extra fails before the inputs are read
    summary = summarize(list(read_jsonl(list(inputs) or ["-"])))
    text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
    if output == "-":
        sys.stdout.write(text)
    else:
        with open(output, "w") as handle:
            handle.write(text)
    if plots:
        for path in plot(summary, plots):
            click.echo(f"astra-qaenv stats: wrote {path}", err=True)


@main.command("sample-data")
@click.argument("name", type=click.Choice(list(SAMPLE_DATA)))
def sample_data(name):
    """Print a bundled sample file: the KB tables (entities, relations, schema) or ASTRA knowledge rows."""
    sys.stdout.write((files("astra_qaenv") / "data" / SAMPLE_DATA[name]).read_text())


if __name__ == "__main__":
    main()
