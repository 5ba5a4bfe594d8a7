"""The astra-reward command: programmatic rewards (f1, state) and LLM judges over JSONL records."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import click
from astra_core.jsonl import read_jsonl
from astra_core.llm import LLMClient, LLMConfig
from astra_core.options import llm_config_from, llm_options, report_errors, stage_options, stage_options_from
from astra_core.stage import Rejected, Stage

from astra_reward.bundled import data_path
from astra_reward.f1 import VARIANTS, f1_reward
from astra_reward.judges import JudgeSettings, judge_qa, judge_task, judge_trajectory, threshold_failure
from astra_reward.state import state_reward


@click.group()
@click.version_option(package_name="astra-reward")
def main() -> None:
    """Rewards for tool-use agents: the F1 trajectory reward, a state verifier and LLM judges.

    Every command reads JSONL records, adds a `reward` (f1, state) or `scores` (judge-*) field and
    writes them out; --min-score sends records below the threshold to --rejects.
    """


def _samples_by_id(path: str | None) -> dict[str, dict]:
    return {sample["id"]: sample for sample in read_jsonl(path, kind="rl_sample")} if path else {}


def _sample_of(record: dict, samples: dict[str, dict]) -> dict:
    if not samples:
        return {}
    sample = samples.get(record.get("sample_id"))
    if sample is None:
        raise Rejected(f"no sample: sample_id {record.get('sample_id')!r} is not in --samples")
    return sample


def _check_min_score(value: float | None, min_score: float | None, what: str = "reward") -> None:
    if min_score is None:
        return
    if value is None:
        raise Rejected(f"unscored: no {what} to compare with --min-score {min_score}")
    if value < min_score:
        raise Rejected(f"below min score: {what} {value:.4g} < {min_score}")


@main.command("sample-data")
@click.argument("name", required=False, default="")
def sample_data(name: str) -> None:
    """Print the path of the bundled sample data directory (or of one file in it)."""
    path = data_path(name)
    if not path.exists():
        raise click.ClickException(f"no bundled file {name!r}; see {data_path()}")
    click.echo(str(path))


SAMPLES_HELP = ("rl_sample JSONL to join: a record lacking a field takes it from the sample its `sample_id` "
                "names (e.g. rollouts + the samples they were played from).")
MIN_SCORE_HELP = "Reject records whose reward is below this (they go to --rejects with the reason)."


@main.command("f1")
@stage_options
@click.option("--variant", type=click.Choice(VARIANTS), default="f1", show_default=True,
              help="f1 = harmonic mean of recall and precision; recall / precision alone for the paper's ablation.")
@click.option("--samples", type=click.Path(exists=True, dir_okay=False), help=SAMPLES_HELP + " Gives `job`.")
@click.option("--min-score", type=float, help=MIN_SCORE_HELP)
@report_errors
def f1_command(variant: str, samples: str | None, min_score: float | None, **kwargs) -> None:
    """F1 trajectory reward of records carrying `messages` and `job` (paper Eq. 29–31).

    Adds `reward` and `reward_components` {kind, variant, recall, precision, solved, n, calls,
    solved_ids, malformed_calls, failed_calls}. Calls the policy wrote that could not be parsed are
    read from the record's `malformed_calls` (or `reward_components.malformed_calls`); they count in c.
    """
    options = stage_options_from(kwargs)
    by_id = _samples_by_id(samples)

    def score(record: dict) -> dict:
        if not isinstance(record.get("messages"), list):
            raise Rejected("no messages: the record needs the conversation in `messages`")
        job = record.get("job")
        if job is None:
            job = _sample_of(record, by_id).get("job")
        if not job:
            raise Rejected("no job: the record (or its --samples sample) has no sub-tasks in `job`")
        malformed = record.get("malformed_calls", (record.get("reward_components") or {}).get("malformed_calls", 0))
        result = f1_reward(job, record["messages"], variant=variant, malformed_calls=int(malformed or 0))
        record["reward"] = result.reward
        record["reward_components"] = result.components()
        _check_min_score(result.reward, min_score)
        return record

    with Stage("astra-reward f1", options) as stage:
        stage.run(score)


@main.command("state")
@stage_options
@click.option("--ignore", "ignore", multiple=True, metavar="PATTERN",
              help="A state path to ignore, glob segments allowed (orders.*.created_at, **.updated_at); repeatable.")
@click.option("--samples", type=click.Path(exists=True, dir_okay=False),
              help=SAMPLES_HELP + " Gives `reward.expected_state` and `reward.ignore_fields`.")
@click.option("--max-diff", type=int, default=50, show_default=True,
              help="Keep at most this many diff entries in the record (the count is always kept).")
@click.option("--min-score", type=float, help=MIN_SCORE_HELP)
@report_errors
def state_command(ignore: tuple[str, ...], samples: str | None, max_diff: int, min_score: float | None,
                  **kwargs) -> None:
    """State-based verifier reward (AReaL-SEA) of records carrying `final_state` and `expected_state`.

    Optional `ignore_fields` (list of path patterns) on the record is added to --ignore. A record
    without `expected_state` takes `reward.expected_state` (and `reward.ignore_fields`) of its
    --samples sample. Adds `reward` (1.0 on a full match, else 0.0) and `reward_components`
    {kind: "state", match, differences, diff: [{path, expected, actual, kind}], ignore_fields}.
    """
    options = stage_options_from(kwargs)
    by_id = _samples_by_id(samples)

    def score(record: dict) -> dict:
        if "final_state" not in record:
            raise Rejected("no final_state: the record needs the environment's final state in `final_state`")
        spec = record if "expected_state" in record else (_sample_of(record, by_id).get("reward") or {})
        if "expected_state" not in spec:
            raise Rejected("no expected_state: neither the record nor its --samples sample has one")
        patterns = [*ignore, *(record.get("ignore_fields") or spec.get("ignore_fields") or [])]
        result = state_reward(record["final_state"], spec["expected_state"], patterns)
        record["reward"] = result.reward
        record["reward_components"] = {"kind": "state", "match": result.match, "differences": len(result.diff),
                                       "diff": result.diff[:max_diff], "ignore_fields": patterns}
        _check_min_score(result.reward, min_score)
        return record

    with Stage("astra-reward state", options) as stage:
        stage.run(score)


# -- LLM judges -----------------------------------------------------------------------------------

def judge_options(f):
    """--min-score, --attempts and --max-chars, shared by the judge commands."""
    for option in reversed([
        click.option("--min-score", type=float,
                     help="Reject records whose aggregate score is below this, or that are unscored."),
        click.option("--attempts", type=int, default=2, show_default=True,
                     help="Replies asked for per judgment before giving up on a valid one."),
        click.option("--max-chars", type=int, default=2000, show_default=True,
                     help="Message contents longer than this are cut in what the judge reads."),
    ]):
        f = option(f)
    return f


JUDGE_BOOKKEEPING = ("not_applicable", "judge_errors", "details")


def _settings(config: LLMConfig, attempts: int, max_chars: int) -> JudgeSettings:
    return JudgeSettings(attempts=attempts, max_chars=max_chars,
                         temperature=0.0 if config.temperature is None else config.temperature,
                         max_tokens=config.max_tokens)


def _run_judge(command: str, kind: str, options, config: LLMConfig,
               judge: Callable[[LLMClient, dict], Awaitable[dict]], verdict: Callable[[dict], str | None]) -> None:
    """Judge every record, merge the result into its `scores`, reject the records `verdict` explains."""

    async def main_loop() -> None:
        async with LLMClient(config) as client:
            model = await client.model()

            async def score(record: dict) -> dict:
                # A re-judged record keeps other scores but none of an earlier judge run's bookkeeping.
                kept = {k: v for k, v in (record.get("scores") or {}).items() if k not in JUDGE_BOOKKEEPING}
                record["scores"] = {**kept, **await judge(client, record)}
                failure = verdict(record["scores"])
                if failure:
                    raise Rejected(failure)
                return record

            with Stage(command, options, in_kind=kind, out_kind=kind, model=model, seed=config.seed) as stage:
                await stage.arun(score, concurrency=config.concurrency)
                stage.stats["llm"] = str(client.usage)

    asyncio.run(main_loop())


def _aggregate_verdict(name: str, min_score: float | None) -> Callable[[dict], str | None]:
    def verdict(scores: dict) -> str | None:
        if min_score is None:
            return None
        value = scores.get(name)
        if value is None:
            missing = ", ".join(f"{d} ({e})" for d, e in (scores.get("judge_errors") or {}).items())
            return f"unscored: no {name}; judge output unusable for {missing or 'some dimension'}"
        return f"below min score: {name} {value:.4g} < {min_score}" if value < min_score else None

    return verdict


@main.command("judge-trajectory")
@stage_options
@llm_options
@judge_options
@report_errors
def judge_trajectory_command(min_score: float | None, attempts: int, max_chars: int, **kwargs) -> None:
    """Score trajectory records on the paper's 7 dimensions (QU, QP, TCU, TCP, TCS, TC, FA) and their mean.

    Adds `scores` {QU, QP, TCU, TCP, TCS, TC, FA, overall, not_applicable?, judge_errors, details}.
    A dimension whose judge output cannot be used is null and named in judge_errors; overall is
    then null. --min-score applies to overall.
    """
    options, config = stage_options_from(kwargs), llm_config_from(kwargs)
    settings = _settings(config, attempts, max_chars)
    _run_judge("astra-reward judge-trajectory", "trajectory", options, config,
               lambda client, record: judge_trajectory(client, record, settings),
               _aggregate_verdict("overall", min_score))


@main.command("judge-qa")
@stage_options
@llm_options
@judge_options
@report_errors
def judge_qa_command(min_score: float | None, attempts: int, max_chars: int, **kwargs) -> None:
    """Score qa_instance records: DC, SA, SR per sub-question, TC per instance, QS = their mean.

    Adds `scores` {DC, SA, SR, TC, QS, judge_errors, details}. --min-score applies to QS.
    """
    options, config = stage_options_from(kwargs), llm_config_from(kwargs)
    settings = _settings(config, attempts, max_chars)
    _run_judge("astra-reward judge-qa", "qa_instance", options, config,
               lambda client, record: judge_qa(client, record, settings), _aggregate_verdict("QS", min_score))


@main.command("judge-task")
@stage_options
@llm_options
@judge_options
@click.option("--servers", type=click.Path(exists=True, dir_okay=False),
              help="tool_server JSONL: the judge sees the tools of the server each task names (server_id).")
@click.option("--min-question-quality", type=float, help="Threshold θ_qq (default: --min-score).")
@click.option("--min-scenario-realism", type=float, help="Threshold θ_sr (default: --min-score).")
@click.option("--min-tool-necessity", type=float, help="Threshold θ_tn (default: --min-score).")
@report_errors
def judge_task_command(min_score: float | None, attempts: int, max_chars: int, servers: str | None,
                       min_question_quality: float | None, min_scenario_realism: float | None,
                       min_tool_necessity: float | None, **kwargs) -> None:
    """Score task records on question quality, scenario realism and tool-use necessity, each in [0, 1].

    Adds `scores` {question_quality, scenario_realism, tool_necessity, judge_errors, details}. A task
    is kept only if every dimension with a threshold reaches it (paper Eq. 1); --min-score sets the
    thresholds not given one by one. An unscored dimension with a threshold is rejected.
    """
    options, config = stage_options_from(kwargs), llm_config_from(kwargs)
    settings = _settings(config, attempts, max_chars)
    tools_of = {server["id"]: server["tools"] for server in read_jsonl(servers, kind="tool_server")} if servers else {}
    given = {"question_quality": min_question_quality, "scenario_realism": min_scenario_realism,
             "tool_necessity": min_tool_necessity}
    thresholds = {name: value if value is not None else min_score for name, value in given.items()}
    thresholds = {name: value for name, value in thresholds.items() if value is not None}

    async def judge(client: LLMClient, record: dict) -> dict:
        if tools_of and record["server_id"] not in tools_of:
            raise Rejected(f"no server: {record['server_id']!r} is not in --servers")
        return await judge_task(client, record, settings, tools=tools_of.get(record["server_id"]))

    _run_judge("astra-reward judge-task", "task", options, config, judge,
               lambda scores: threshold_failure(scores, thresholds))
