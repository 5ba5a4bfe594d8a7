"""What each `astra-reward` command does to one record: configs, input shapes and per-record functions.

The command line (`cli.py`) only declares them; a library user calls the same functions:

    from astra_reward.stages import F1Config, score_f1
    scored = score_f1(rollout, F1Config(variant="recall"), samples={})
"""

from __future__ import annotations

from dataclasses import dataclass

from astra_core.config import knob
from astra_core.llm import LLMClient
from astra_core.stage import Malformed, Rejected, require_text

from astra_reward.f1 import VARIANTS, f1_reward
from astra_reward.judges import JudgeSettings, judge_qa, judge_task, judge_trajectory, threshold_failure
from astra_reward.state import state_reward

# -- input shapes: what a record must carry, typed (a wrong type is a reject, never a score) ------------

_CONTENT = {"type": ["string", "null", "array"],  # OpenAI content: text, or a list of parts
            "items": {"type": "object", "required": ["type"],
                      "properties": {"type": {"type": "string"}, "text": {"type": "string"}}}}
_TOOL_CALL = {"type": "object", "required": ["function"],
              "properties": {"id": {"type": ["string", "null"]}, "type": {"type": "string"},
                             "function": {"type": "object", "required": ["name"],
                                          "properties": {"name": {"type": "string"},
                                                         # JSON text as the API sends it (or its object)
                                                         "arguments": {"type": ["string", "object", "null"]}}}}}
_MESSAGE = {"type": "object", "required": ["role"],
            "properties": {"role": {"type": "string"}, "content": _CONTENT,
                           "tool_calls": {"type": ["array", "null"], "items": _TOOL_CALL},
                           "tool_call_id": {"type": ["string", "null"]}, "name": {"type": "string"},
                           "reasoning_content": {"type": ["string", "null"]}}}
_SUB_TASK = {"type": "object", "required": ["question", "answer"],
             "properties": {"id": {"type": ["string", "integer"]}, "question": {"type": "string"},
                            "answer": {"type": ["string", "number", "array"]}, "needs_tool": {"type": "boolean"}}}

SCORABLE_CONVERSATION = {
    "title": "scorable conversation",
    "description": "A conversation to score with the F1 reward: `messages` and the sub-tasks in `job` "
                   "(or a `sample_id` whose --samples sample has them).",
    "type": "object",
    "required": ["messages"],
    "properties": {
        "messages": {"type": "array", "items": _MESSAGE},
        "job": {"type": "array", "items": _SUB_TASK},
        "sample_id": {"type": "string"},
        "malformed_calls": {"type": "integer", "minimum": 0},
        "reward_components": {"type": "object"},
    },
}

STATE_CHECK = {
    "title": "state check",
    "description": "An environment's `final_state`, with `expected_state` (or a `sample_id` whose --samples "
                   "sample has `reward.expected_state`) and optional `ignore_fields` path patterns.",
    "type": "object",
    "required": ["final_state"],
    "properties": {
        "final_state": {"type": "object"},
        "expected_state": {"type": "object"},
        "sample_id": {"type": "string"},
        "ignore_fields": {"type": "array", "items": {"type": "string"}},
    },
}

SAMPLES_HELP = ("rl_sample JSONL to join: a record lacking a field takes it from the sample its `sample_id` "
                "names (e.g. rollouts + the samples they were played from).")
MIN_SCORE_HELP = "Reject records whose reward is below this (they go to --rejects with the reason)."


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


# -- f1 -----------------------------------------------------------------------------------------------

@dataclass
class F1Config:
    variant: str = knob("f1", "f1 = harmonic mean of recall and precision; recall / precision alone for the "
                              "paper's ablation.", choices=VARIANTS)
    samples: str | None = knob(None, SAMPLES_HELP + " Gives `job`.", path=True)
    min_score: float | None = knob(None, MIN_SCORE_HELP, minimum=0, maximum=1)


def score_f1(record: dict, config: F1Config, samples: dict[str, dict]) -> dict:
    """F1 trajectory reward of records carrying `messages` and `job` (paper Eq. 29–31).

    Adds `reward` and `reward_components` {kind, variant, recall, precision, solved, n, calls,
    solved_ids, malformed_calls, failed_calls}. Calls the policy wrote that could not be parsed are
    read from the record's `malformed_calls` (or `reward_components.malformed_calls`); they count in c.
    """
    job = record["job"] if "job" in record else _sample_of(record, samples).get("job")
    if not job:
        raise Rejected("no job: the record (or its --samples sample) has no sub-tasks in `job`")
    malformed = record.get("malformed_calls", (record.get("reward_components") or {}).get("malformed_calls", 0))
    if not isinstance(malformed, int) or isinstance(malformed, bool) or malformed < 0:
        raise Malformed(f"not a count: {malformed!r}", field="reward_components.malformed_calls")
    result = f1_reward(job, record["messages"], variant=config.variant, malformed_calls=malformed)
    record["reward"] = result.reward
    record["reward_components"] = result.components()
    _check_min_score(result.reward, config.min_score)
    return record


# -- state --------------------------------------------------------------------------------------------

@dataclass
class StateConfig:
    ignore: list[str] = knob([], "State paths to ignore, glob segments allowed (orders.*.created_at, "
                                 "**.updated_at).")
    samples: str | None = knob(None, SAMPLES_HELP + " Gives `reward.expected_state` and `reward.ignore_fields`.", path=True)
    max_diff: int = knob(50, "Keep at most this many diff entries in the record (the count is always kept).",
                         minimum=0)
    min_score: float | None = knob(None, MIN_SCORE_HELP, minimum=0, maximum=1)


def score_state(record: dict, config: StateConfig, samples: dict[str, dict]) -> dict:
    """State-based verifier reward (AReaL-SEA) of records carrying `final_state` and `expected_state`.

    Optional `ignore_fields` (list of path patterns) on the record is added to --ignore. A record
    without `expected_state` takes `reward.expected_state` (and `reward.ignore_fields`) of its
    --samples sample. Adds `reward` (1.0 on a full match, else 0.0) and `reward_components`
    {kind: "state", match, differences, diff: [{path, expected, actual, kind}], ignore_fields}.
    """
    spec = record if "expected_state" in record else (_sample_of(record, samples).get("reward") or {})
    if "expected_state" not in spec:
        raise Rejected("no expected_state: neither the record nor its --samples sample has one")
    extra = record.get("ignore_fields") or spec.get("ignore_fields") or []
    if not isinstance(extra, list) or not all(isinstance(p, str) for p in extra):
        raise Malformed(f"a list of path patterns is needed, got {extra!r}", field="ignore_fields")
    patterns = [*config.ignore, *extra]
    result = state_reward(record["final_state"], spec["expected_state"], patterns)
    record["reward"] = result.reward
    record["reward_components"] = result.components(config.max_diff)
    _check_min_score(result.reward, config.min_score)
    return record


# -- LLM judges ---------------------------------------------------------------------------------------

JUDGE_BOOKKEEPING = ("not_applicable", "judge_errors", "details")


@dataclass
class JudgeConfig:
    min_score: float | None = knob(None, "Reject records whose aggregate score is below this, or that are unscored.",
                                   minimum=0, maximum=1)
    attempts: int = knob(2, "Replies asked for per judgment before giving up on a valid one.", minimum=1)
    max_chars: int = knob(2000, "Message contents longer than this are cut in what the judge reads.", minimum=1)

    def settings(self, llm: LLMClient) -> JudgeSettings:
        temperature = llm.config.temperature
        return JudgeSettings(attempts=self.attempts, max_chars=self.max_chars,
                             temperature=0.0 if temperature is None else temperature, max_tokens=llm.config.max_tokens)


@dataclass
class TaskJudgeConfig(JudgeConfig):
    servers: str | None = knob(None, "tool_server JSONL: the judge sees the tools of the server each task names "
                                     "(server_id).", path=True)
    min_question_quality: float | None = knob(None, "Threshold θ_qq (default: --min-score).", minimum=0, maximum=1)
    min_scenario_realism: float | None = knob(None, "Threshold θ_sr (default: --min-score).", minimum=0, maximum=1)
    min_tool_necessity: float | None = knob(None, "Threshold θ_tn (default: --min-score).", minimum=0, maximum=1)

    def thresholds(self) -> dict[str, float]:
        given = {"question_quality": self.min_question_quality, "scenario_realism": self.min_scenario_realism,
                 "tool_necessity": self.min_tool_necessity}
        chosen = {name: value if value is not None else self.min_score for name, value in given.items()}
        return {name: value for name, value in chosen.items() if value is not None}


def _merge_scores(record: dict, scores: dict) -> dict:
    """A re-judged record keeps other scores but none of an earlier judge run's bookkeeping."""
    kept = {k: v for k, v in (record.get("scores") or {}).items() if k not in JUDGE_BOOKKEEPING}
    record["scores"] = {**kept, **scores}
    return record


def _aggregate_failure(scores: dict, name: str, min_score: float | None) -> str | None:
    if min_score is None:
        return None
    value = scores.get(name)
    if value is None:
        missing = ", ".join(f"{d} ({e})" for d, e in (scores.get("judge_errors") or {}).items())
        return f"unscored: no {name}; judge output unusable for {missing or 'some dimension'}"
    return f"below min score: {name} {value:.4g} < {min_score}" if value < min_score else None


def _verdict(record: dict, failure: str | None) -> dict:
    if failure:
        raise Rejected(failure)
    return record


async def judge_trajectory_record(record: dict, config: JudgeConfig, llm: LLMClient) -> dict:
    """Score trajectory records on the paper's 7 dimensions (QU, QP, TCU, TCP, TCS, TC, FA) and their mean.

    Adds `scores` {QU, QP, TCU, TCP, TCS, TC, FA, overall, not_applicable?, judge_errors, details}.
    A dimension whose judge output cannot be used is null and named in judge_errors; overall is
    then null. --min-score applies to overall.
    """
    record = _merge_scores(record, await judge_trajectory(llm, record, config.settings(llm)))
    return _verdict(record, _aggregate_failure(record["scores"], "overall", config.min_score))


async def judge_qa_record(record: dict, config: JudgeConfig, llm: LLMClient) -> dict:
    """Score qa_instance records: DC, SA, SR per sub-question, TC per instance, QS = their mean.

    Adds `scores` {DC, SA, SR, TC, QS, judge_errors, details}. --min-score applies to QS.
    """
    record = _merge_scores(record, await judge_qa(llm, record, config.settings(llm)))
    return _verdict(record, _aggregate_failure(record["scores"], "QS", config.min_score))


async def judge_task_record(record: dict, config: TaskJudgeConfig, llm: LLMClient, servers: dict[str, dict]) -> dict:
    """Score task records on question quality, scenario realism and tool-use necessity, each in [0, 1].

    Adds `scores` {question_quality, scenario_realism, tool_necessity, judge_errors, details}. A task
    is kept only if every dimension with a threshold reaches it (paper Eq. 1); --min-score sets the
    thresholds not given one by one. An unscored dimension with a threshold is rejected. A task whose question
    is empty or only whitespace is malformed input (there is nothing to judge).
    """
    require_text(record, "question", "a task is a user's request, and there is nothing to judge")
    if servers and record["server_id"] not in servers:
        raise Rejected(f"no server: {record['server_id']!r} is not in --servers")
    tools = servers[record["server_id"]]["tools"] if servers else None
    record = _merge_scores(record, await judge_task(llm, record, config.settings(llm), tools=tools))
    return _verdict(record, threshold_failure(record["scores"], config.thresholds()))
