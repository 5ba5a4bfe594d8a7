"""Quality validation of Q–A instances (paper §2.2.2).

A dependency naming a sub-question the decomposition does not have breaks the qa_instance kind
(`astra_core.invariants`): the input is malformed (it stops the run naming the field, or goes to --rejects with
--skip-bad). Then, in order, each a reason to drop an instance:
1. structure: unique ids, dependencies that reference earlier ids, no cycles, hop levels that match
   the DAG (the scenario type is then set from the structure);
2. tool necessity per sub-question (LLM, or the `needs_tool` flags already present): a sub-question
   that needs no tool is allowed only at a leaf, and at least one sub-question must need a tool;
3. quality: astra-reward's Q–A judge scores DC, SA, SR, TC; their mean QS must reach a threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

from astra_core.config import knob
from astra_core.llm import LLMClient, StructuredOutputError
from astra_core.stage import Rejected
from astra_reward.judges import judge_qa

from astra_qaenv import prompts
from astra_qaenv.trace import dependents, scenario_of, step_id, structural_problems


@dataclass
class ValidationConfig:
    """Knobs of `astra-qaenv validate`."""

    necessity: str = knob("auto", "Tool necessity per sub-question: the LLM, or the needs_tool flags present (auto: "
                                  "the flags if all are set).", choices=("auto", "llm", "given"))
    judge: bool = knob(True, "Score DC/SA/SR/TC with astra-reward's Q–A judge and apply --threshold to their mean QS.")
    threshold: float = knob(0.75, "Minimum QS = mean(DC, SA, SR, TC).", minimum=0, maximum=1)
    attempts: int = knob(3, "Replies tried until one parses.", minimum=1)


def check_structure(instance: dict) -> None:
    problems = structural_problems(instance["decomposition_trace"])
    if problems:
        raise Rejected("structure: " + "; ".join(problems))
    declared = instance.get("scenario_type")
    actual = scenario_of(instance["decomposition_trace"])
    if declared != actual:
        instance["scenario_declared"] = declared
    instance["scenario_type"] = actual


async def judge_necessity(llm: LLMClient, instance: dict, config: ValidationConfig) -> dict[str, tuple[bool, str]]:
    """{step id: (needs_tool, reason)} from the LLM, one judgment per sub-question."""
    trace = instance["decomposition_trace"]
    steps = "\n".join(f"{s['_uuid']}. {s['sub_question']} (answer: {s['sub_answer']})" for s in trace)
    text = prompts.NECESSITY.format(main_question=instance["main_question"], steps=steps)
    try:
        reply, _ = await llm.chat_json([{"role": "user", "content": text}], prompts.NECESSITY_SCHEMA,
                                       name="tool_necessity", attempts=config.attempts)
    except StructuredOutputError as exc:
        last = " ".join((exc.last_reply or "").split())[:200]
        raise Rejected(f"tool necessity: LLM reply is not a judgment per sub-question ({exc}); last reply: "
                       f"{last!r}") from None
    judged = {str(j["_uuid"]): (bool(j["needs_tool"]), j.get("reason", "")) for j in reply["judgments"]}
    missing = [step_id(s) for s in trace if step_id(s) not in judged]
    if missing:
        raise Rejected(f"tool necessity: the LLM judged no sub-question {', '.join(missing)} "
                       f"(it judged {', '.join(sorted(judged)) or 'none'})")
    return judged


def apply_necessity(instance: dict, judged: dict[str, tuple[bool, str]] | None) -> None:
    """Set `needs_tool` on every step and enforce: tool-free sub-questions only at leaves."""
    trace = instance["decomposition_trace"]
    if judged is not None:
        for step in trace:
            step["needs_tool"], reason = judged[step_id(step)]
            if reason:
                step["necessity_reason"] = reason
    users = dependents(trace)
    bad = [f"sub-question {step_id(s)} needs no tool but {', '.join(users[step_id(s)])} depend(s) on it"
           for s in trace if not s["needs_tool"] and users[step_id(s)]]
    if bad:
        raise Rejected("tool necessity: " + "; ".join(bad) + " (tool-free sub-questions are allowed only at leaves)")
    if not any(s["needs_tool"] for s in trace):
        raise Rejected("tool necessity: no sub-question needs a tool, so there is no environment to build")


def given_necessity(instance: dict) -> bool:
    return all(isinstance(s.get("needs_tool"), bool) for s in instance["decomposition_trace"])


async def validate_instance(instance: dict, llm: LLMClient | None, config: ValidationConfig) -> dict:
    """qa_instance -> qa_instance with needs_tool and scores (structure, tool necessity, quality).

    A record that fails a check is rejected with the reason."""
    check_structure(instance)
    mode = config.necessity
    if mode == "auto":
        mode = "given" if given_necessity(instance) else "llm"
    if mode == "given":
        if not given_necessity(instance):
            raise Rejected("tool necessity: --necessity given, but some sub-questions have no needs_tool flag")
        apply_necessity(instance, None)
    else:
        apply_necessity(instance, await judge_necessity(llm, instance, config))
    if config.judge:
        scores = await judge_qa(llm, instance)
        instance["scores"] = {**(instance.get("scores") or {}), **scores}
        qs = scores.get("QS")
        if not isinstance(qs, int | float):
            raise Rejected(f"quality: the Q–A judge gave no QS score ({scores})")
        if qs < config.threshold:
            parts = ", ".join(f"{k} {scores[k]:.2f}" for k in ("DC", "SA", "SR", "TC")
                              if isinstance(scores.get(k), int | float))
            raise Rejected(f"quality: QS {qs:.2f} < threshold {config.threshold} ({parts})")
    return instance
