"""The astra-qaenv command: knowledge -> decomposed Q–A -> verified environments -> RL samples."""

from __future__ import annotations

import asyncio
import json
import sys
from contextlib import ExitStack
from importlib.resources import files

import click
from astra_core.jsonl import dumps, read_jsonl
from astra_core.llm import LLMClient
from astra_core.options import llm_config_from, llm_options, report_errors, stage_options, stage_options_from
from astra_core.records import add_provenance
from astra_core.schema import validate
from astra_core.stage import Rejected, Stage, StageError

from astra_qaenv.build import BuildConfig, build_environment
from astra_qaenv.envsynth import EnvSynthConfig
from astra_qaenv.export import ExportConfig, export_sample, load_pool, solvable
from astra_qaenv.kb import KBError, load_kb
from astra_qaenv.merge import MergeConfig, merge_environment
from astra_qaenv.mixing import MixingConfig
from astra_qaenv.programmatic import ProgrammaticConfig, synthesize_from, why_nothing
from astra_qaenv.synthesize import SynthesisConfig, synthesize_row
from astra_qaenv.trace import SCENARIOS
from astra_qaenv.validate import ValidationConfig, validate_instance
from astra_qaenv.verify import Verifier, VerifierConfig

SAMPLE_DATA = {"entities": "kb/entities.jsonl", "relations": "kb/relations.jsonl", "schema": "kb/schema.jsonl",
               "knowledge": "knowledge/domains.jsonl", "questions": "knowledge/questions.jsonl"}


@click.group()
@click.version_option(package_name="astra-qaenv")
def main() -> None:
    """Verifiable, code-executable RL environments from decomposed Q–A (ASTRA §2.2, §3.2.2).

    \b
    programmatic | synthesize -> validate -> build-env -> merge -> export -> (astra-grpo train)
    """


def sandbox_options(f):
    for option in reversed([
        click.option("--sandbox-jail/--no-sandbox-jail", default=True, show_default=True,
                     help="Run generated code in nsjail (--no-sandbox-jail: development only, it is untrusted code)."),
        click.option("--sandbox-call-timeout-s", type=float, default=5.0, show_default=True,
                     help="Seconds per tool call."),
        click.option("--sandbox-memory-mb", type=int, default=512, show_default=True, help="Memory limit per sandbox."),
        click.option("--sandbox-pool-size", type=int, default=2, show_default=True, help="Warm sandbox workers."),
    ]):
        f = option(f)
    return f


def verifier_config_from(kwargs: dict) -> VerifierConfig:
    jail = kwargs.pop("sandbox_jail")
    if not jail:
        click.echo("astra-qaenv: WARNING: --no-sandbox-jail runs generated code without isolation", err=True)
    return VerifierConfig(jail=jail, call_timeout_s=kwargs.pop("sandbox_call_timeout_s"),
                          memory_mb=kwargs.pop("sandbox_memory_mb"), workers=kwargs.pop("sandbox_pool_size"))


def run_llm_stage(command: str, options, config, fn, *, in_kind: str | None, out_kind: str,
                  verifier: VerifierConfig | None = None) -> None:
    """Run `fn(record, llm, verifier, stage)` over a stage's records with one LLM client (and sandbox pool)."""
    with Stage(command, options, in_kind=in_kind, out_kind=out_kind, model=config.model,
               seed=config.seed, derive_ids=in_kind is None) as stage, ExitStack() as stack:
        checker = stack.enter_context(Verifier(verifier)) if verifier else None

        async def run() -> None:
            async with LLMClient(config) as llm:
                await stage.arun(lambda record: fn(record, llm, checker, stage), concurrency=config.concurrency)
                stage.stats["llm"] = str(llm.usage)

        asyncio.run(run())


def synth_options(f):
    for option in reversed([
        click.option("--attempts", type=int, default=3, show_default=True,
                     help="Implementation attempts per sub-task, each restarting from the invocation statement."),
        click.option("--json-attempts", type=int, default=2, show_default=True,
                     help="Replies tried per LLM step until one matches its JSON schema."),
    ]):
        f = option(f)
    return f


# -- synthesis -----------------------------------------------------------------------------------------

@main.command()
@stage_options
@llm_options
@click.option("--mode", type=click.Choice(["auto", "conditional", "unconditional"]), default="auto",
              show_default=True, help="auto: rows with a `question` are decomposed, the others generate questions.")
@click.option("--min-hops", type=int, default=2, show_default=True, help="Hop budget (hop levels), lower bound.")
@click.option("--max-hops", type=int, default=4, show_default=True, help="Hop budget, upper bound.")
@click.option("--count", type=int, default=2, show_default=True, help="Instances asked per row (unconditional).")
@click.option("--attempts", type=int, default=3, show_default=True, help="Replies tried until one parses.")
@report_errors
def synthesize(**kwargs):
    """ASTRA knowledge rows ({domain, knowledge_corpus} or {question, domain}) -> qa_instance (LLM)."""
    options, config = stage_options_from(kwargs), llm_config_from(kwargs)
    synth = SynthesisConfig(mode=kwargs["mode"], min_hops=kwargs["min_hops"], max_hops=kwargs["max_hops"],
                            count=kwargs["count"], attempts=kwargs["attempts"])
    async def one(row: dict, llm, verifier, stage) -> list[dict]:
        kept, dropped = await synthesize_row(llm, row, synth)
        for record, reason in dropped:
            stage.reject(record, reason)
        if not kept:
            raise Rejected(f"all {len(dropped)} instance(s) the LLM wrote were dropped (see their rejects)")
        return kept

    run_llm_stage("astra-qaenv synthesize", options, config, one, in_kind=None, out_kind="qa_instance")


@main.command()
@stage_options
@click.option("--kb", type=click.Path(exists=True, file_okay=False),
              help="Knowledge-base directory (entities.jsonl, relations.jsonl, schema.jsonl); default: the bundled sample.")
@click.option("--min-hops", type=int, default=1, show_default=True, help="Hop budget (hop levels), lower bound.")
@click.option("--max-hops", type=int, default=3, show_default=True, help="Hop budget, upper bound.")
@click.option("--scenarios", default=",".join(SCENARIOS), show_default=True,
              help="Comma-separated scenario types to build.")
@click.option("--per-entity", type=int, default=1, show_default=True,
              help="Instances (of distinct scenario types) started from each input entity.")
@click.option("--table-rows", type=int, default=4, show_default=True,
              help="Extra table rows each lookup tool holds besides the asked one (-1: the whole table).")
@click.option("--seed", type=int, default=0, show_default=True)
@report_errors
def programmatic(**kwargs):
    """Entity rows (walk starts) -> qa_instance by walking the KB's relations (no LLM).

    \b
    astra-qaenv sample-data entities | astra-qaenv programmatic > qa.jsonl
    """
    options = stage_options_from(kwargs)
    scenarios = tuple(s.strip() for s in kwargs["scenarios"].split(",") if s.strip())
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown or not scenarios:
        raise click.BadParameter(f"unknown scenario type(s) {unknown}; choose from {', '.join(SCENARIOS)}",
                                 param_hint="--scenarios")
    config = ProgrammaticConfig(min_hops=kwargs["min_hops"], max_hops=kwargs["max_hops"], scenarios=scenarios,
                                per_entity=kwargs["per_entity"], table_rows=kwargs["table_rows"], seed=kwargs["seed"])
    try:
        kb = load_kb(kwargs["kb"])
    except KBError as exc:
        raise click.ClickException(str(exc)) from exc

    def one(entity: dict) -> list[dict]:
        instances = synthesize_from(kb, entity, config)
        if not instances:
            raise Rejected(why_nothing(kb, entity, config))
        return instances

    with Stage("astra-qaenv programmatic", options, out_kind="qa_instance", seed=config.seed) as stage:
        stage.run(one)


# -- validation, environments, merging ---------------------------------------------------------------------

@main.command("validate")
@stage_options
@llm_options
@click.option("--necessity", type=click.Choice(["auto", "llm", "given"]), default="auto", show_default=True,
              help="Tool necessity per sub-question: the LLM, or the needs_tool flags present (auto: flags if all set).")
@click.option("--judge/--no-judge", default=True, show_default=True,
              help="Score DC/SA/SR/TC with astra-reward's Q–A judge and apply --threshold to their mean QS.")
@click.option("--threshold", type=float, default=0.75, show_default=True, help="Minimum QS.")
@click.option("--attempts", type=int, default=3, show_default=True, help="Replies tried until one parses.")
@report_errors
def validate_command(**kwargs):
    """qa_instance -> qa_instance with needs_tool and scores (structure, tool necessity, quality)."""
    options, config = stage_options_from(kwargs), llm_config_from(kwargs)
    checks = ValidationConfig(necessity=kwargs["necessity"], judge=kwargs["judge"], threshold=kwargs["threshold"],
                              attempts=kwargs["attempts"])
    judge_qa = None
    if checks.judge:
        from astra_reward.judges import judge_qa

    run_llm_stage("astra-qaenv validate", options, config,
                  lambda record, llm, _, __: validate_instance(record, llm, checks, judge_qa),
                  in_kind="qa_instance", out_kind="qa_instance")


@main.command("build-env")
@stage_options
@llm_options
@sandbox_options
@synth_options
@click.option("--source", type=click.Choice(["auto", "llm"]), default="auto", show_default=True,
              help="auto: use a sub-question's programmatic tool_source when it has one; llm: always synthesize.")
@click.option("--scaling/--no-scaling", default=True, show_default=True, help="Complexity-scale generated tool specs.")
@report_errors
def build_env(**kwargs):
    """Validated qa_instance -> environment whose every tool call is verified in the sandbox."""
    options, config, vconfig = stage_options_from(kwargs), llm_config_from(kwargs), verifier_config_from(kwargs)
    build = BuildConfig(source=kwargs["source"], synth=EnvSynthConfig(
        attempts=kwargs["attempts"], scaling=kwargs["scaling"], json_attempts=kwargs["json_attempts"]))
    run_llm_stage("astra-qaenv build-env", options, config,
                  lambda record, llm, verifier, _: build_environment(record, llm, verifier, build),
                  in_kind="qa_instance", out_kind="environment", verifier=vconfig)


@main.command("merge")
@stage_options
@llm_options
@sandbox_options
@synth_options
@click.option("--grouping", type=click.Choice(["auto", "name", "llm"]), default="auto", show_default=True,
              help="Homogeneous groups: auto = lookups by tool and the rest by the LLM; name; llm.")
@click.option("--merge-seed", type=int, default=0, show_default=True, help="Seed of each group's base choice.")
@report_errors
def merge_command(**kwargs):
    """environment -> environment with homogeneous sub-environments merged (all calls re-verified)."""
    options, config, vconfig = stage_options_from(kwargs), llm_config_from(kwargs), verifier_config_from(kwargs)
    merge = MergeConfig(grouping=kwargs["grouping"], seed=kwargs["merge_seed"], synth=EnvSynthConfig(
        attempts=kwargs["attempts"], json_attempts=kwargs["json_attempts"]))
    run_llm_stage("astra-qaenv merge", options, config,
                  lambda record, llm, verifier, _: merge_environment(record, llm, verifier, merge),
                  in_kind="environment", out_kind="environment", verifier=vconfig)


# -- export and statistics -------------------------------------------------------------------------------

@main.command("export")
@stage_options
@llm_options
@click.option("--mixing", type=click.Choice(["bands", "random", "none"]), default="bands", show_default=True,
              help="Irrelevant tools: similarity bands (paper), random 5-9 from other domains, or none.")
@click.option("-k", "--per-band", type=int, default=3, show_default=True, help="Up to K distractors per band.")
@click.option("--high", type=float, default=0.85, show_default=True, help="High band: normalized similarity above.")
@click.option("--low", type=float, default=0.4, show_default=True, help="Low band: normalized similarity below.")
@click.option("--random-range", nargs=2, type=int, default=(5, 9), show_default=True,
              help="random mode: how many distractors (inclusive range).")
@click.option("--embedder", type=click.Choice(["auto", "local", "endpoint"]), default="auto", show_default=True,
              help="Tool-doc embeddings: local all-MiniLM-L6-v2 (extra `local`), or the endpoint's /v1/embeddings.")
@click.option("--embedding-model", help="Model name for --embedder endpoint (default: the endpoint's first).")
@click.option("--tool-pool", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="JSONL of environments / tool servers / tools forming the distractor pool (default: the inputs).")
@click.option("--gold-trajectories", type=click.Path(dir_okay=False),
              help="Also write one trajectory per sample solving it with the verified calls (SFT warm start).")
@click.option("--system-prompt", help="System prompt of every sample (default: a tool-use instruction).")
@click.option("--reward", "reward_kind", type=click.Choice(["f1", "recall", "precision"]), default="f1",
              show_default=True)
@click.option("--mix-seed", type=int, default=0, show_default=True, help="Seed of distractor sampling and shuffling.")
@report_errors
def export_command(**kwargs):
    """environment -> rl_sample (tools + mixed distractors, job, prompt) [+ gold trajectories]."""
    from astra_qaenv.embed import make_embedder, tool_document

    options, config = stage_options_from(kwargs), llm_config_from(kwargs)
    low_count, high_count = kwargs["random_range"]
    mixing = MixingConfig(mode=kwargs["mixing"], k=kwargs["per_band"], high=kwargs["high"], low=kwargs["low"],
                          random_min=low_count, random_max=high_count)
    export = ExportConfig(mixing=mixing, reward=kwargs["reward_kind"], seed=kwargs["mix_seed"])
    if kwargs["system_prompt"]:
        export.system_prompt = kwargs["system_prompt"]
    pool_paths = list(kwargs["tool_pool"]) or list(options.inputs)
    if "-" in pool_paths:
        raise StageError("export reads the tool pool before writing samples: pass input files (not stdin) "
                         "or --tool-pool FILE")
    pool = load_pool(pool_paths)
    if mixing.mode == "bands":
        embed = make_embedder(kwargs["embedder"], config, kwargs["embedding_model"])
        pool.embeddings = embed([tool_document(t) for t in pool.tools])
    gold = open(kwargs["gold_trajectories"], "wb") if kwargs["gold_trajectories"] else None  # noqa: SIM115

    def one(env: dict) -> dict:
        sample = export_sample(env, pool, export)
        trajectory = solvable(validate(sample, "rl_sample"), env)
        if gold is not None:
            add_provenance(trajectory, "astra-qaenv export", seed=export.seed)
            gold.write(dumps(validate(trajectory, "trajectory")))
        return sample

    try:
        with Stage("astra-qaenv export", options, in_kind="environment", out_kind="rl_sample",
                   seed=export.seed) as stage:
            stage.stats["tool pool"] = f"{len(pool)} unique tools in {len(set(pool.domains))} domains"
            stage.run(one)
    finally:
        if gold is not None:
            gold.close()


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
