"""Task quality judge (paper §2.1.3, Eq. 1): question quality, scenario realism, tool-use necessity.

One judgment rates the three dimensions on an anchored 1–5 scale; each is stored normalized to
[0, 1] as (rating − 1) / 4 (so 1 → 0.0, 3 → 0.5, 5 → 1.0), the raw rating kept in `details`. The
judge sees the tools of the task's server when they are given (`astra-reward judge-task --servers`)
and the chain the task was conditioned on. A task is kept only if every dimension reaches its
threshold (Eq. 1); an unscored dimension never passes.
"""

from __future__ import annotations

from astra_core.llm import LLMClient

from astra_reward.judges import prompts
from astra_reward.judges.asking import JudgeSettings, ask, scored_field
from astra_reward.judges.prompts import RATINGS
from astra_reward.judges.render import clip, tools_text
from astra_reward.judges.scorecard import Scorecard

DIMENSIONS = prompts.TASK_DIMENSIONS


async def judge_task(client: LLMClient, record: dict, settings: JudgeSettings | None = None,
                     tools: list[dict] | None = None) -> dict:
    """question_quality, scenario_realism, tool_necessity in [0, 1], with `judge_errors` and `details`."""
    settings = settings or JudgeSettings()
    chain = record.get("chain")
    chain_text = f"\nThe task is meant to be solved with these tools, in order: {', '.join(chain)}\n" if chain else ""
    material = prompts.TASK_USER.substitute(tools=tools_text(tools), chain=chain_text,
                                            question=clip(record["question"], settings.max_chars))
    reply = await ask(client, prompts.TASK_QUALITY, material, settings)
    card = Scorecard(DIMENSIONS)
    for dimension in DIMENSIONS:
        rating, reason, error = scored_field(reply, dimension, RATINGS)
        card.set(dimension, None if rating is None else (rating - 1) / 4, error)
        card.details[dimension] = {"rating": rating, "reason": reason}
    return card.scores(None)


def threshold_failure(scores: dict, thresholds: dict[str, float]) -> str | None:
    """Why `scores` fail Eq. 1 for the given thresholds (None: they pass)."""
    unscored = [d for d in thresholds if scores.get(d) is None]
    if unscored:
        errors = scores.get("judge_errors") or {}
        return "unscored: " + "; ".join(f"{d} ({errors.get(d, 'no score')})" for d in unscored)
    low = [f"{d} {scores[d]:.3g} < {t}" for d, t in thresholds.items() if scores[d] < t]
    return "below threshold: " + ", ".join(low) if low else None
