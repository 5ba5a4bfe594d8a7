"""Reflection (AReaL-SEA §4.4): the failures of one iteration of a stream — tasks that failed
verification (with rationales) and trajectories that failed (with rationales and TASK/TRAJECTORY
attributions) — rewrite the stream's synthesis plan and evaluation rules. The revised plan record
(iteration k+1) keeps every earlier revision in `history` with its outcome, failures and analysis.
"""

from __future__ import annotations

from astra_core.llm import LLMClient, StructuredOutputError

from astra_toolgraph.evolve import prompts
from astra_toolgraph.evolve.plans import AgentFailed, as_text, plan_problem, plan_record


def failures_of(tasks: list[dict], trajectories: list[dict], synthesis_failures: list[str] = ()) -> list[dict]:
    """The iteration's failures, each {stage, id, rationale, attribution?}."""
    failures = [{"stage": "task_synthesis", "id": None, "rationale": reason} for reason in synthesis_failures]
    failures += [{"stage": "task_verification", "id": t["id"], "rationale": t["verification"]["rationale"],
                  "attribution": "TASK"} for t in tasks if t["verification"]["verdict"] == "FAIL"]
    failures += [{"stage": "trajectory_verification", "id": t["id"], "rationale": t["verification"]["rationale"],
                  "attribution": t["verification"]["attribution"]}
                 for t in trajectories if t["verification"]["verdict"] == "FAIL"]
    return failures


def outcome_of(plan: dict, tasks: list[dict], trajectories: list[dict], synthesis_failures: int = 0) -> dict:
    mine = [t for t in tasks if t.get("plan_id") == plan["id"]]
    rolled = [t for t in trajectories if t.get("plan_id") == plan["id"]]
    return {"tasks": len(mine) + synthesis_failures, "tasks_synthesized": len(mine),
            "tasks_passed": sum(t["verification"]["verdict"] == "PASS" for t in mine),
            "trajectories": len(rolled),
            "trajectories_succeeded": sum(t["verification"]["verdict"] == "SUCCESS" for t in rolled)}


async def reflect(llm: LLMClient, plan: dict, tasks: list[dict], trajectories: list[dict],
                  synthesis_failures: list[str] = (), *, max_tokens: int = 512) -> dict:
    """The stream's plan for iteration k+1 (raises AgentFailed when the reflection reply does not parse)."""
    tasks = [t for t in tasks if t.get("plan_id") == plan["id"]]
    trajectories = [t for t in trajectories if t.get("plan_id") == plan["id"]]
    failures = failures_of(tasks, trajectories, synthesis_failures)
    outcome = outcome_of(plan, tasks, trajectories, len(synthesis_failures))
    try:
        revised, _ = await llm.chat_json(prompts.reflection_messages(plan, outcome, failures),
                                         prompts.REFLECTION_SCHEMA, name="reflection", attempts=2,
                                         max_tokens=max_tokens)
    except StructuredOutputError as exc:
        raise AgentFailed(f"reflection: {exc}") from None
    revised = as_text(revised)
    problem = plan_problem({"focus": plan.get("focus") or "the same focus", **revised})
    if problem:
        raise AgentFailed(f"reflection: the revised plan is not a plan: {problem}")
    entry = {"iteration": plan["iteration"], "plan_id": plan["id"], "focus": plan.get("focus", ""),
             "synthesis_plan": plan["synthesis_plan"], "evaluation_rules": plan["evaluation_rules"],
             "outcome": outcome, "failures": failures, "analysis": str(revised["analysis"]).strip()}
    iteration = plan["iteration"] + 1
    fields = {"focus": plan.get("focus", ""), **revised}
    return plan_record(f"{plan['stream']}-k{iteration}", plan["domain_id"], plan["stream"], iteration, fields, plan,
                       [*(plan.get("history") or []), entry])
