"""Task synthesis and task verification (AReaL-SEA §4.3) with executable per-instance checkers.

The synthesis agent, guided by the plan's synthesis plan, explores the domain with tool calls
(grounding the task in entities that exist), then writes the task `(user instruction + private
information, specification, expected actions / answer)`. Its expected actions are replayed in a
fresh episode: the state they leave is the task's `expected_state`, the checker any trajectory is
held to (astra-reward's state verifier). The verification agent judges the task against the plan's
evaluation rules, seeing the replay (with `verify_calls` > 0 it first investigates the domain in its
own tool-calling loop: `astra_toolgraph.evolve.verifier`); a task whose expected actions fail to replay
fails before any judge is asked.
"""

from __future__ import annotations

from astra_core.llm import LLMClient, StructuredOutputError
from astra_core.records import new_record, stable_id

from astra_toolgraph.evolve import prompts
from astra_toolgraph.evolve.agent import tool_turn
from astra_toolgraph.evolve.config import EvolveConfig
from astra_toolgraph.evolve.domains import Domain
from astra_toolgraph.evolve.plans import AgentFailed
from astra_toolgraph.evolve.verifier import verdict


def _as_text(value) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{key}: {item}" for key, item in value.items())
    return str(value or "").strip()


async def replay(domain: Domain, actions: list[dict]) -> tuple[list[dict], dict, dict]:
    """Run `actions` in a fresh episode: (steps with observations, initial state, final state)."""
    steps = []
    async with domain.episode() as episode:
        initial = await episode.state()
        for action in actions:
            ok, text = await episode.call(action["name"], action.get("arguments") or {})
            steps.append({"name": action["name"], "arguments": action.get("arguments") or {}, "ok": ok,
                          "observation": text})
        final = await episode.state()
    return steps, initial, final


async def synthesize_task(llm: LLMClient, plan: dict, domain: Domain, index: int, config: EvolveConfig) -> dict:
    """One candidate task record for `plan` (raises AgentFailed when the task reply does not parse)."""
    messages = prompts.task_explore_messages(plan, domain.description, domain.tools)
    executions: list[dict] = []
    async with domain.episode() as episode:
        for turn in range(config.explore_turns):
            called = await tool_turn(llm, messages, domain.tools, episode, turn=turn,
                                     tool_choice=config.explore_tool_choice, max_tokens=config.max_tokens,
                                     observation_chars=config.max_observation_chars, executions=executions)
            if not called:
                break
    messages.append(prompts.task_write_message(domain.tools))
    try:
        fields, _ = await llm.chat_json(messages, prompts.task_schema(domain.tools), name="task", attempts=2,
                                        max_tokens=config.max_tokens)
    except StructuredOutputError as exc:
        raise AgentFailed(f"task synthesis: {exc}") from None
    actions = [{"name": str(a["name"]), "arguments": a.get("arguments") or {}} for a in fields["expected_actions"]]
    steps, initial, expected_state = await replay(domain, actions)
    task_id = stable_id(plan["id"], index, prefix="etask-")
    instruction = _as_text(fields["user_instruction"])
    return new_record(
        task_id, parent=plan, server_id=domain.id, question=instruction, origin="evolve",
        user={"instruction": instruction, "private_info": _as_text(fields["private_info"])},
        specification=_as_text(fields["specification"]), expected_actions=actions,
        expected_answer=_as_text(fields["expected_answer"]), expected_state=expected_state,
        ignore_fields=list(config.ignore_fields), plan_id=plan["id"], stream=plan["stream"],
        iteration=plan["iteration"],
        synthesis={"exploration": messages[1:-1], "executions": executions, "replay": steps,
                   "changes_state": initial != expected_state})


async def complete_task(domain: Domain, task: dict) -> dict:
    """A hand-written task (user, expected_actions, expected_answer?) made checkable: its expected
    actions replayed in a fresh episode give `expected_state` and the replay log the verifier sees."""
    if "expected_state" in task and "synthesis" in task:
        return task
    actions = [{"name": str(a["name"]), "arguments": a.get("arguments") or {}} for a in task.get("expected_actions", [])]
    steps, initial, expected_state = await replay(domain, actions)
    synthesis = {**(task.get("synthesis") or {}), "replay": steps, "changes_state": initial != expected_state}
    return {**task, "expected_actions": actions, "expected_state": expected_state, "synthesis": synthesis,
            "ignore_fields": task.get("ignore_fields") or []}


def precheck(task: dict) -> str | None:
    """Why the task cannot be checked (None when it can): every expected action must replay without
    error, and the task must change the state or expect an answer."""
    replayed = task["synthesis"]["replay"]
    broken = [step for step in replayed if not step["ok"]]
    if broken:
        step = broken[0]
        return f"expected action {step['name']} fails when replayed: {step['observation'][:300]}"
    if not task["synthesis"]["changes_state"] and not task.get("expected_answer"):
        return "the task neither changes the state nor expects an answer: nothing to check"
    if not task["question"].strip():
        return "the user instruction is empty"
    return None


async def verify_task(llm: LLMClient | None, plan: dict, task: dict, config: EvolveConfig,
                      domain: Domain | None = None) -> dict:
    """The task with `verification: {verdict: PASS|FAIL, rationale, by, investigation?}` added.

    by = "precheck" (the executable pre-check failed), "judge" (one verification call over the replay),
    "agent" (the verification agent investigated `domain` with up to `config.verify_calls` tool calls
    first; `investigation` holds every call) or "precheck-only" (no judge asked). Raises AgentFailed
    when the verdict does not parse.
    """
    problem = precheck(task)
    if problem is not None:
        verification = {"verdict": "FAIL", "rationale": problem, "by": "precheck"}
    elif llm is None or not config.judge_tasks:
        verification = {"verdict": "PASS", "rationale": "expected actions replay without error", "by": "precheck-only"}
    else:
        messages = prompts.task_verify_messages(plan, task, task["synthesis"]["replay"], config.verify_calls)
        judged, investigation = await verdict(llm, messages, prompts.TASK_VERDICT_SCHEMA, "task_verdict", domain,
                                              config)
        verification = {"verdict": judged["verdict"], "rationale": str(judged["rationale"]).strip(),
                        "by": "agent" if investigation else "judge"}
        if investigation:
            verification["investigation"] = investigation
    return {**task, "verification": verification}
