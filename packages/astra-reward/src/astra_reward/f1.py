"""The F1 trajectory reward of ASTRA (paper §3.2.2, Eq. 29–31), with its recall and precision variants.

For a job of n sub-tasks, an agent that makes c tool calls and solves n̂ sub-tasks gets

    r = n̂ / n        p = min(1, n̂ / max(c, ε))        reward = 2pr / (p + r)   (0 when p + r = 0)

**When a sub-task counts as solved** (answers compared with `astra_reward.normalize.contains_answer`:
normalized, whole tokens, see that module):

- a sub-task with `needs_tool` true (the default): its answer appears in the observation of a
  *successful* tool call the agent made in this conversation — a `tool` message that answers one of
  the agent's calls (see `astra_reward.conversation` for the pairing) and is not an error
  observation (`is_error_observation`). Orphan tool messages and failed calls solve nothing. Which
  tool produced it is not checked: the path is not prescribed, only attainment (paper §2.2.1);
- a leaf sub-task with `needs_tool` false: its answer appears in the final answer (the last
  assistant message, when it makes no tool call; <think> blocks removed).

**What counts in c**: every entry of every assistant message's `tool_calls` — repeated identical
calls each count, failed calls count, calls to unknown tools count, calls whose arguments are not
valid JSON count, calls never answered count — plus `malformed_calls`, the calls the policy wrote
that could not be parsed into a tool call at all (the rollout engine knows them; they are not in
`messages`).

**Edge cases**:

- n = 0 (empty job): nothing to verify; recall, precision and reward are 0.
- c = 0: p is 1 if some sub-task is solved (only leaf sub-tasks can be), else 0; a job of tool
  sub-tasks answered without any call scores 0.
- p > 1: the paper's p = n̂/(c+ε) exceeds 1 when leaf sub-tasks are solved without calls or one
  observation answers several sub-tasks, which would push F1 above 1. p is capped at 1, so the
  reward stays in [0, 1] and is exactly 1.0 when every sub-task is solved with at most n̂ calls.
- ε only guards c = 0 (`max(c, ε)`): with c ≥ 1 it plays no part, so solving all n tool
  sub-tasks with exactly n calls gives exactly 1.0, not 1 − 1e-9.

Variants (the paper's ablation, §4.2): "recall" rewards r alone, "precision" rewards p alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from astra_reward.conversation import final_answer, tool_calls
from astra_reward.normalize import Haystack

VARIANTS = ("f1", "recall", "precision")
EPSILON = 1e-9


@dataclass(frozen=True)
class F1Result:
    reward: float
    recall: float
    precision: float
    solved: int  # n̂
    n: int
    calls: int  # c, malformed calls included
    solved_ids: list = field(default_factory=list)  # sub-task ids (their position when a sub-task has no id)
    variant: str = "f1"
    malformed_calls: int = 0
    failed_calls: int = 0  # calls with no observation or an error observation

    def components(self) -> dict:
        """Everything but the scalar: a record's `reward_components` (common.json's reward_components)."""
        out = asdict(self)
        out.pop("reward")
        return {"kind": "f1", **out}


def f1_from_counts(solved: int, n: int, calls: int, variant: str = "f1", epsilon: float = EPSILON
                   ) -> tuple[float, float, float]:
    """(reward, recall, precision) from n̂, n and c, as defined in the module docstring."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if n <= 0:
        return 0.0, 0.0, 0.0
    recall = solved / n
    precision = min(1.0, solved / max(calls, epsilon))
    if variant == "recall":
        return recall, recall, precision
    if variant == "precision":
        return precision, recall, precision
    f1 = 0.0 if recall + precision == 0 else 2 * precision * recall / (precision + recall)
    return f1, recall, precision


def _sub_task_id(sub_task: dict, position: int):
    return sub_task.get("id", position)


def solved_sub_tasks(job: list[dict], messages: list[dict]) -> list:
    """Ids of the sub-tasks of `job` that `messages` solve (rules in the module docstring)."""
    observations = [Haystack(call.observation) for call in tool_calls(messages) if not call.failed]
    answer = final_answer(messages)
    final = Haystack(answer) if answer is not None else None
    solved = []
    for position, sub_task in enumerate(job):
        expected = sub_task.get("answer")
        if sub_task.get("needs_tool", True) is False:
            hit = final is not None and final.contains(expected)
        else:
            hit = any(observation.contains(expected) for observation in observations)
        if hit:
            solved.append(_sub_task_id(sub_task, position))
    return solved


def f1_reward(job: list[dict], messages: list[dict], variant: str = "f1", malformed_calls: int = 0,
              epsilon: float = EPSILON) -> F1Result:
    """The F1 reward of one rollout.

    job: sub_qa dicts {"id"?, "question", "answer", "needs_tool"?} (an rl_sample's `job`; an answer
        may also be a list of accepted alternatives).
    messages: the full OpenAI-format conversation (assistant tool_calls, tool observations, final answer).
    malformed_calls: tool calls the policy wrote that could not be parsed (they count in c).
    variant: "f1" | "recall" | "precision".
    """
    if malformed_calls < 0:
        raise ValueError("malformed_calls must be >= 0")
    calls = tool_calls(messages)
    solved_ids = solved_sub_tasks(job, messages)
    c = len(calls) + malformed_calls
    reward, recall, precision = f1_from_counts(len(solved_ids), len(job), c, variant, epsilon)
    return F1Result(reward=reward, recall=recall, precision=precision, solved=len(solved_ids), n=len(job), calls=c,
                    solved_ids=solved_ids, variant=variant, malformed_calls=malformed_calls,
                    failed_calls=sum(call.failed for call in calls))
