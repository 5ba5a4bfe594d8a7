"""LLM judges: trajectory quality (7 dimensions), Q–A decomposition quality, task quality.

    async with LLMClient(LLMConfig.from_env()) as client:
        scores = await judge_trajectory(client, trajectory_record)

Each returns the `scores` dict of its record kind. An unparseable judge reply never yields a
score: the dimension is None and `judge_errors` says why (see `astra_reward.judges.scorecard`).
"""

from astra_reward.judges.asking import JudgeSettings
from astra_reward.judges.qa import judge_qa
from astra_reward.judges.task import judge_task, threshold_failure
from astra_reward.judges.trajectory import judge_trajectory, tool_call_rounds

__all__ = ["JudgeSettings", "judge_qa", "judge_task", "judge_trajectory", "threshold_failure", "tool_call_rounds"]
