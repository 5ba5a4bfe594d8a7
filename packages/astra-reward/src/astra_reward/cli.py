"""The astra-reward command: programmatic rewards (f1, state) and LLM judges over JSONL records."""

from __future__ import annotations

import click
from astra_core.jsonl import read_jsonl
from astra_core.options import report_errors, stage_options, stage_options_from
from astra_core.stage import Rejected, Stage

from astra_reward.bundled import data_path
from astra_reward.f1 import VARIANTS, f1_reward
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
    """F1 trajectory reward (paper Eq. 29–31) of records carrying `messages` and `job`.

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
