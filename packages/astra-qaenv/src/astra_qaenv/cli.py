"""The astra-qaenv command: knowledge -> decomposed Q–A -> verified environments -> RL samples.

Each stage is a declaration; what it does to a record is in `astra_qaenv.stages`."""

from __future__ import annotations

import json
import sys
from importlib.resources import files

import click
from astra_core.command import stage_command
from astra_core.config import config_options
from astra_core.options import port_file_option, report_errors, stage_options, stage_options_from
from astra_core.stage import Rejected, Stage

from astra_qaenv import stages
from astra_qaenv.build import BUILD_INPUT, build_environment
from astra_qaenv.merge import merge_environment
from astra_qaenv.serve_config import ServeConfig
from astra_qaenv.synthesize import SynthesisConfig
from astra_qaenv.validate import ValidationConfig, validate_instance
from astra_qaenv.verify import Verifier

SAMPLE_DATA = {"entities": "kb/entities.jsonl", "relations": "kb/relations.jsonl", "schema": "kb/schema.jsonl",
               "knowledge": "knowledge/domains.jsonl", "questions": "knowledge/questions.jsonl"}


@click.group("astra-qaenv")
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
stage_command(main, "build-env", reads=BUILD_INPUT, writes="environment", config=stages.BuildEnvConfig, llm=True,
              uses={"verifier": Verifier})(build_environment)
stage_command(main, "merge", reads=stages.MERGEABLE_ENVIRONMENT, writes="environment", config=stages.MergeEnvConfig,
              llm=True, uses={"verifier": Verifier})(merge_environment)


stage_command(main, "export", reads=stages.BUILT_ENVIRONMENT, writes="rl_sample", config=stages.ExportCommandConfig,
              llm=True, uses={"pool": stages.open_tool_pool, "gold": stages.open_gold})(stages.export_record)


@main.command("stats")
@stage_options
@click.option("--plots", type=click.Path(file_okay=False), help="Write PNG figures (paper Figures 11-13) here (matplotlib: the `plots` extra).")
@report_errors
def stats_command(plots, **kwargs):
    """Statistics of qa_instance / environment / rl_sample files (paper A.1.2), optionally with plots.

    -o FILE takes the summary (JSON). A record that is none of the three kinds, or whose decomposition is not a
    well-formed DAG, counts in no figure: it is a reject with the reason (--skip-bad, --rejects as for every stage).
    """
    from astra_qaenv.stats import STATS_INPUT, plot, profile, pyplot, summarize_profiles

    options = stage_options_from(kwargs)
    output, options.output = options.output, "-"
    if plots:
        pyplot()  # a missing `plots` extra fails before the inputs are read
    profiles = []
    with Stage("astra-qaenv stats", options, in_kind=STATS_INPUT) as stage:
        for record in stage.inputs():
            try:
                profiles.append(profile(record))
            except Rejected as exc:
                stage.reject(record, str(exc))
        stage.counts.produced = len(profiles)
        stage.stats["samples described"] = len(profiles)
    summary = summarize_profiles(profiles)
    text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
    if output == "-":
        sys.stdout.write(text)
    else:
        with open(output, "w") as handle:
            handle.write(text)
    if plots:
        for path in plot(summary, plots):
            click.echo(f"astra-qaenv stats: wrote {path}", err=True)


@main.command("serve-openenv")
@click.argument("samples", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address (loopback by default).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0 picks a free port.")
@port_file_option
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="YAML of the knobs below; flags override it.")
@click.option("--skip-bad", is_flag=True, help="Skip samples that cannot be served (to --rejects) instead of stopping.")
@click.option("--rejects", type=click.Path(dir_okay=False), help="Write skipped samples here with the reason.")
@config_options(ServeConfig, exclude=("nsjail_path", "uid"))
@report_errors
def serve_openenv(samples, host, port, port_file, config_file, skip_bad, rejects, **kwargs):
    """Serve rl_sample environments as an OpenEnv MCP environment (needs the `openenv` extra).

    Each OpenEnv session plays one sample at a time in its own sandbox episode: `reset(sample_id=...)`,
    `reset(index=...)` or `reset()` (the next in order) returns the prompt and tools in the observation's metadata;
    the sample's tools are the session's MCP tools; a step with `Action(metadata={"answer": ...})` ends the episode
    with our reward (F1 over the sub-tasks, or the state verifier) and its components in the metadata. Any OpenEnv
    client drives it (`MCPToolClient`, TRL's GRPOTrainer, astra-grpo with `environment.openenv`)."""
    from astra_core.config import ConfigError, load_config, pop_values
    from astra_core.extras import require

    values = pop_values(ServeConfig, kwargs)
    try:
        config = load_config(ServeConfig, config_file, values)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    require("openenv.core", extra="astra-qaenv[openenv]", needed_by="astra-qaenv serve-openenv")
    from astra_sandbox import SandboxUnavailable

    from astra_qaenv.openenv_server import CannotListen, listen, load_samples, serve

    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(f"astra-qaenv serve-openenv: listening on {host}: anyone who can reach it runs sandboxed code "
                   "here", err=True)
    try:
        sock = listen(host, port)
    except CannotListen as exc:
        raise click.ClickException(str(exc)) from None
    with sock:
        served = load_samples(samples, skip_bad=skip_bad, rejects=rejects)
        try:
            serve(served, config, sock, port_file)
        except SandboxUnavailable as exc:
            raise click.ClickException(f"the sandbox cannot run here: {exc}") from None


@main.command("sample-data")
@click.argument("name", type=click.Choice(list(SAMPLE_DATA)))
def sample_data(name):
    """Print a bundled sample file: the KB tables (entities, relations, schema) or ASTRA knowledge rows."""
    sys.stdout.write((files("astra_qaenv") / "data" / SAMPLE_DATA[name]).read_text())


if __name__ == "__main__":
    main()
