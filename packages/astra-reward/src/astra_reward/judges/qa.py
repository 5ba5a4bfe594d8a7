"""Q–A decomposition quality judge: DC, SA, SR, TC and their mean QS (paper §2.2.2, Eq. 13–21).

A qa_instance's `decomposition_trace` is τ = {(q_i, a_i, d_i)}: `sub_question`, `sub_answer` and
`dependency` of each step, identified by its `_uuid`, listed in execution order.

- DC_i, SA_i, SR_i ∈ {0, 1} per sub-question (Eq. 14, 16, 18): one judgment per dimension that
  scores every sub-question by id; the dimension is the mean over sub-questions (Eq. 15, 17, 19).
- SR_i is also checked structurally, without the judge: a dependency on an unknown sub-question,
  or on one that does not come earlier in the trace, makes SR_i = 0 whatever the judge says.
- TC ∈ {0, 1} per instance (Eq. 20): are the sub-questions with their answers sufficient to
  derive the answer to the main question?
- QS = (DC + SA + SR + TC) / 4 (Eq. 21); `null` when a dimension is missing (see `scorecard`).
"""

from __future__ import annotations

import asyncio

from astra_core.llm import LLMClient

from astra_reward.judges import prompts
from astra_reward.judges.asking import JudgeSettings, ask, item_errors, item_scores, single_score
from astra_reward.judges.prompts import BINARY
from astra_reward.judges.render import clip, sub_questions_text
from astra_reward.judges.scorecard import Scorecard

DIMENSIONS = ("DC", "SA", "SR", "TC")
_PER_SUB_QUESTION = {"DC": prompts.DEPENDENCY_CONSISTENCY, "SA": prompts.SUB_QUESTION_ATOMICITY,
                     "SR": prompts.SEQUENTIAL_RATIONALITY}


def order_problems(trace: list[dict]) -> dict[str, str]:
    """Sub-questions (by id) whose dependencies name an unknown or a not-yet-answered sub-question."""
    position = {str(step.get("_uuid")): i for i, step in enumerate(trace)}
    problems: dict[str, str] = {}
    for i, step in enumerate(trace):
        for dependency in step.get("dependency") or []:
            if str(dependency) not in position:
                problems[str(step.get("_uuid"))] = f"depends on unknown sub-question {dependency}"
            elif position[str(dependency)] >= i:
                problems[str(step.get("_uuid"))] = f"depends on sub-question {dependency}, which does not come earlier"
    return problems


async def judge_qa(client: LLMClient, record: dict, settings: JudgeSettings | None = None) -> dict:
    """DC, SA, SR, TC and QS of a qa_instance record, with `judge_errors` and per-sub-question `details`."""
    settings = settings or JudgeSettings()
    trace = record["decomposition_trace"]
    ids = [str(step.get("_uuid")) for step in trace]
    material = prompts.QA_USER.substitute(main_question=clip(record["main_question"], settings.max_chars),
                                          final_answer=clip(record["final_answer"], settings.max_chars),
                                          sub_questions=sub_questions_text(trace, settings.max_chars))
    asks = [ask(client, judgment, material, settings) for judgment in _PER_SUB_QUESTION.values()]
    asks.append(ask(client, prompts.TASK_COMPLETENESS, material, settings))
    *per_item_replies, completeness = await asyncio.gather(*asks)

    card = Scorecard(DIMENSIONS)
    structural = order_problems(trace)
    for dimension, reply in zip(_PER_SUB_QUESTION, per_item_replies, strict=True):
        scores, reasons, problems = item_scores(reply, "items", "id", ids, BINARY)
        if dimension == "SR":
            for item, problem in structural.items():
                scores[item], reasons[item] = 0.0, f"structural: {problem}"
        errors = item_errors(ids, scores, problems, "sub-question")
        card.set(dimension, None if errors else sum(scores.values()) / len(ids), errors)
        card.details[dimension] = [{"id": item, "score": scores.get(item), "reason": reasons.get(item)} for item in ids]
    score, reason, error = single_score(completeness, BINARY)
    card.set("TC", score, error)
    card.details["TC"] = {"score": score, "reason": reason}
    return card.scores("QS")
