"""One stream of the self-evolving engine (AReaL-SEA Figure 1): K iterations of
synthesize -> verify tasks -> roll out -> verify trajectories -> reflect, starting from one plan.

Streams are independent (each reflects on its own failures only). Nothing is dropped: every
plan revision, every task with its verdict, every trajectory with its check, verdict and
attribution, and every agent failure is returned for the output records.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from astra_core.llm import LLMClient

from astra_toolgraph.evolve.config import EvolveConfig
from astra_toolgraph.evolve.domains import Domain
from astra_toolgraph.evolve.plans import AgentFailed
from astra_toolgraph.evolve.reflection import reflect
from astra_toolgraph.evolve.tasks import synthesize_task, verify_task
from astra_toolgraph.evolve.trajectories import roll_out, verify_trajectory


@dataclass
class StreamResult:
    plans: list[dict] = field(default_factory=list)  # iteration 0..K (the last one is the reflection on K-1)
    tasks: list[dict] = field(default_factory=list)  # every synthesized task, with `verification`
    trajectories: list[dict] = field(default_factory=list)  # every trajectory, with `state_check` and `verification`
    failures: list[dict] = field(default_factory=list)  # agent replies that could not be used: {iteration, stage, reason}


async def run_iteration(llm: LLMClient, user: LLMClient, plan: dict, domain: Domain, config: EvolveConfig,
                        result: StreamResult) -> dict:
    """One iteration of `plan`'s stream; returns the revised plan (or the same plan when reflection failed)."""
    k = plan["iteration"]
    tasks, trajectories, synthesis_failures = [], [], []
    for index in range(config.tasks_per_plan):
        try:
            task = await synthesize_task(llm, plan, domain, index, config)
            task = await verify_task(llm, plan, task, config, domain)
        except AgentFailed as exc:
            synthesis_failures.append(str(exc))
            result.failures.append({"iteration": k, "stage": "task", "reason": str(exc)})
            continue
        tasks.append(task)
    for task in (t for t in tasks if t["verification"]["verdict"] == "PASS"):
        for sample in range(config.rollouts_per_task):
            trajectory = await roll_out(llm, user, task, domain, config, sample)
            try:
                trajectory = await verify_trajectory(llm, plan, task, trajectory, config, domain)
            except AgentFailed as exc:
                result.failures.append({"iteration": k, "stage": "trajectory_verification", "reason": str(exc),
                                        "id": trajectory["id"]})
                trajectory["verification"] = {"verdict": "FAIL", "rationale": str(exc), "attribution": "TRAJECTORY",
                                              "checker": trajectory["state_check"]["reward"] == 1.0,
                                              "judge": "no usable verdict"}
            trajectories.append(trajectory)
    result.tasks += tasks
    result.trajectories += trajectories
    try:
        return await reflect(llm, plan, tasks, trajectories, synthesis_failures, max_tokens=config.max_tokens)
    except AgentFailed as exc:
        result.failures.append({"iteration": k, "stage": "reflection", "reason": str(exc)})
        return plan


async def run_stream(llm: LLMClient, user: LLMClient, plan: dict, domain: Domain, config: EvolveConfig) -> StreamResult:
    result = StreamResult(plans=[plan])
    for _ in range(config.iterations):
        revised = await run_iteration(llm, user, result.plans[-1], domain, config, result)
        if revised is result.plans[-1]:
            # Reflection gave nothing usable: the next iteration re-runs the same plan under a new number.
            revised = {**copy.deepcopy(revised), "id": f"{plan['stream']}-k{revised['iteration'] + 1}",
                       "iteration": revised["iteration"] + 1}
        result.plans.append(revised)
    for record in result.plans:
        record["meta"]["evolve"] = {"failures": [f for f in result.failures if f["iteration"] == record["iteration"]]}
    return result
