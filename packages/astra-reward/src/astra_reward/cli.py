"""The astra-reward command: programmatic rewards (f1, state) and LLM judges over JSONL records.

Each stage is a declaration; what it does to a record is in `astra_reward.stages`."""

from __future__ import annotations

import click
from astra_core.command import side_records, stage_command

from astra_reward import stages
from astra_reward.bundled import data_path


@click.group("astra-reward")
@click.version_option(package_name="astra-reward")
def main() -> None:
    """Rewards for tool-use agents: the F1 trajectory reward, a state verifier and LLM judges.

    Every command reads JSONL records, adds a `reward` (f1, state) or `scores` (judge-*) field and
    writes them out; --min-score sends records below the threshold to --rejects.
    """


@main.command("sample-data")
@click.argument("name", required=False, default="")
def sample_data(name: str) -> None:
    """Print the path of the bundled sample data directory (or of one file in it)."""
    path = data_path(name)
    if not path.exists():
        raise click.ClickException(f"no bundled file {name!r}; see {data_path()}")
    click.echo(str(path))


SAMPLES = side_records("samples", "rl_sample")

stage_command(main, "f1", reads=stages.SCORABLE_CONVERSATION, config=stages.F1Config,
              uses={"samples": SAMPLES})(stages.score_f1)
stage_command(main, "state", reads=stages.STATE_CHECK, config=stages.StateConfig,
              uses={"samples": SAMPLES})(stages.score_state)
stage_command(main, "judge-trajectory", reads="trajectory", writes="trajectory", config=stages.JudgeConfig,
              llm=True)(stages.judge_trajectory_record)
stage_command(main, "judge-qa", reads="qa_instance", writes="qa_instance", config=stages.JudgeConfig,
              llm=True)(stages.judge_qa_record)
stage_command(main, "judge-task", reads="task", writes="task", config=stages.TaskJudgeConfig, llm=True,
              uses={"servers": side_records("servers", "tool_server")})(stages.judge_task_record)
