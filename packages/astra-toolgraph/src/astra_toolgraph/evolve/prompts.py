"""Prompts of the self-evolving engine's agents, written from AReaL-SEA §4 (plan generation, task
synthesis, task verification, trajectory rollout, trajectory verification, reflection).

Each builder returns chat messages; the JSON schema its reply must match sits next to it.
"""

from __future__ import annotations

import json

from astra_toolgraph.prompts import chat, tool_lines

# -- 4.1 diversified plan generation ---------------------------------------------------------------
# Structured where the plan checks need structure (a focus with a category, tagged rules): the first
# alternative is what guided decoding writes; a model may also answer with plain text.
FOCUS_SCHEMA = {"anyOf": [
    {"type": "object", "required": ["category", "complexity", "user_style"],
     "properties": {"category": {"type": "string"},
                    "complexity": {"enum": ["single action", "multi-step", "multi-turn with follow-ups"]},
                    "user_style": {"enum": ["direct", "vague", "impatient", "detailed"]}}},
    {"type": "string"}]}
RULES_SCHEMA = {"anyOf": [
    {"type": "array", "minItems": 2, "maxItems": 4,
     "items": {"type": "object", "required": ["kind", "rule"],
               "properties": {"kind": {"enum": ["ACCEPT", "REJECT"]}, "rule": {"type": "string"}}}},
    {"type": "string"}]}
PLAN_SCHEMA = {
    "type": "object",
    "required": ["focus", "synthesis_plan", "evaluation_rules"],
    "properties": {"focus": FOCUS_SCHEMA, "synthesis_plan": {"type": "string"}, "evaluation_rules": RULES_SCHEMA},
}

PLAN_SYSTEM = """You are the meta-planner of a data-synthesis pipeline for customer-service agents that use tools.
You write one synthesis-evaluation plan pair for one task category of a domain.
- focus: the task category, in one line: what the user needs in a few words (the category), its complexity tier and the user's style.
- synthesis_plan: how to gather information with the tools, which real entities to use, and what the user wants; the task must change the domain's state or ask for a checkable answer.
- evaluation_rules: the quality rubric for tasks and conversations of this category: two to four rules, each an ACCEPT or REJECT with one sentence.
Reply with a JSON object with the keys focus, synthesis_plan, evaluation_rules."""


def plan_messages(domain_description: str, tools: list[dict], example_tasks: list[str],
                  earlier: list[dict]) -> list[dict]:
    examples = "\n".join(f"- {task}" for task in example_tasks) or "(none)"
    previous = "\n".join(f"- {plan['focus']}" for plan in earlier) or "(none yet)"
    user = (f"Domain: {domain_description}\n\nTools:\n{tool_lines(tools)}\n\nExample tasks:\n{examples}\n\n"
            f"Categories already planned (choose a different one):\n{previous}\n\nWrite the next plan pair as JSON.")
    return chat(PLAN_SYSTEM, user)


# -- 4.3 task synthesis ----------------------------------------------------------------------------
TASK_EXPLORE_SYSTEM = """You create a realistic customer-service task for the domain below, following the synthesis plan.
First look up real entities with the tools (ids, names, amounts), so the task uses entities that exist.

Synthesis plan:
{synthesis_plan}"""

TASK_SCHEMA = {
    "type": "object",
    "required": ["user_instruction", "private_info", "specification", "expected_actions", "expected_answer"],
    "properties": {
        "user_instruction": {"type": "string"},
        "private_info": {"type": "string"},
        "specification": {"type": "string"},
        "expected_actions": {
            "type": "array",
            "items": {"type": "object", "required": ["name", "arguments"],
                      "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}}},
        },
        "expected_answer": {"type": "string"},
    },
}



def action_schema(tool: dict) -> dict:
    """One expected action of `tool`: its name as a const and its JSON-schema parameters, `required` list
    included (so an action missing a required argument is not a valid reply)."""
    function = tool["function"]
    parameters = function.get("parameters") or {}
    arguments = {"type": "object", "properties": parameters.get("properties") or {},
                 "required": list(parameters.get("required") or [])}
    return {"type": "object", "required": ["name", "arguments"],
            "properties": {"name": {"const": function["name"]}, "arguments": arguments}}


def task_schema(tools: list[dict]) -> dict:
    """TASK_SCHEMA with expected actions as one alternative per domain tool (`anyOf`, tagged by the
    name), each with that tool's parameters and required arguments; the tools' `$defs` move to the root
    so their `$ref`s resolve. Guided decoding (vLLM, the embedded server) then writes real tool names
    with their required arguments."""
    defs = {name: definition for tool in tools
            for name, definition in ((tool["function"].get("parameters") or {}).get("$defs") or {}).items()}
    actions = {"type": "array", "minItems": 1, "items": {"anyOf": [action_schema(tool) for tool in tools]}}
    schema = {**TASK_SCHEMA, "properties": {**TASK_SCHEMA["properties"], "expected_actions": actions}}
    return {**schema, "$defs": defs} if defs else schema


TASK_WRITE = """Now write the task as JSON with these keys:
- user_instruction: what the user wants, in the user's words (first person), without ids the user would not say first.
- private_info: facts only the user knows and gives when asked (e.g. email, order id, quantities).
- specification: what a correct assistant must do, step by step.
- expected_actions: the state-changing tool calls a correct assistant makes, in order, each {{"name": ..., "arguments": {{...}}}}; use only these tools: {tools}.
- expected_answer: a fact the assistant must tell the user, or "" if none."""


def task_explore_messages(plan: dict, domain_description: str, tools: list[dict]) -> list[dict]:
    system = TASK_EXPLORE_SYSTEM.format(synthesis_plan=plan["synthesis_plan"])
    user = (f"Domain: {domain_description}\n\nTools:\n{tool_lines(tools)}\n\nTask category: "
            f"{plan.get('focus', '')}\nLook up the entities you need.")
    return chat(system, user)


def task_write_message(tools: list[dict]) -> dict:
    names = ", ".join(t["function"]["name"] for t in tools)
    return {"role": "user", "content": TASK_WRITE.format(tools=names)}


# -- 4.3 task verification -------------------------------------------------------------------------
# The rationale comes first: a model decoding in order (guided decoding writes the required keys in
# this order) gives its reasons, then the verdict that follows from them.
TASK_VERDICT_SCHEMA = {
    "type": "object",
    "required": ["rationale", "verdict"],
    "properties": {"rationale": {"type": "string"}, "verdict": {"enum": ["PASS", "FAIL"]}},
}

TASK_VERIFY_SYSTEM = """You verify synthesized customer-service tasks against the evaluation rules below.
A task passes when it is realistic, the user instruction plus the private information are enough to do it, and the expected actions and answer follow from it.

Evaluation rules:
{evaluation_rules}

Reply with a JSON object: first "rationale" (what you checked and what you found about this task, in your own words), then "verdict" (PASS or FAIL)."""

TASK_INVESTIGATE = """
Before your verdict, investigate with the domain's tools (at most {budget} calls; they run in a scratch copy of the domain that starts from its initial state, so changes are discarded): look up the records the task names, check that the expected actions are possible and enough for what the user wants, and that the user instruction plus the private information give the assistant what it must ask for."""


def task_verify_messages(plan: dict, task: dict, replay: list[dict], budget: int = 0) -> list[dict]:
    """The task verifier's prompt; with a tool-call `budget`, it investigates before its verdict."""
    system = TASK_VERIFY_SYSTEM.format(evaluation_rules=plan["evaluation_rules"])
    if budget:
        system += TASK_INVESTIGATE.format(budget=budget)
    replay_lines = "\n".join(f"- {step['name']}({json.dumps(step['arguments'], ensure_ascii=False)}) -> "
                             f"{step['observation'][:300]}" for step in replay) or "(no actions)"
    user = (f"User instruction: {task['question']}\nPrivate information: {task['user'].get('private_info', '')}\n"
            f"Specification: {task.get('specification', '')}\nExpected answer: {task.get('expected_answer', '')}\n"
            f"Expected actions, executed in a fresh environment:\n{replay_lines}\n\n"
            + ("Investigate with the tools." if budget else "Verdict as JSON:"))
    return chat(system, user)


# -- 4.3 trajectory rollout (the assistant) --------------------------------------------------------
ASSISTANT_SYSTEM = """You are a customer-service assistant. Help the user with the tools you have.
Ask for the information you need (such as the user's email or an order id), call tools to look things up and to act, and tell the user the result. Do not make up facts."""


# -- 4.3 trajectory verification -------------------------------------------------------------------
TRAJECTORY_VERDICT_SCHEMA = {
    "type": "object",
    "required": ["rationale", "verdict", "attribution"],
    "properties": {
        "rationale": {"type": "string"},
        "verdict": {"enum": ["SUCCESS", "FAIL"]},
        "attribution": {"enum": ["TASK", "TRAJECTORY", "NONE"]},
    },
}

TRAJECTORY_VERIFY_SYSTEM = """You verify a conversation between a customer-service assistant and a simulated user against the task and the evaluation rules below.
SUCCESS when the assistant did what the task specifies and the final state check passed. On FAIL, attribute the root cause:
TASK when the task itself is under-specified, contradictory or impossible; TRAJECTORY when the assistant (or the simulated user) went wrong.

Evaluation rules:
{evaluation_rules}

Reply with a JSON object: first "rationale" (what the assistant did and what the state check found, in your own words), then "verdict" (SUCCESS or FAIL), then "attribution" (TASK or TRAJECTORY on FAIL, NONE on SUCCESS)."""

TRAJECTORY_INVESTIGATE = """
Before your verdict, investigate with the domain's tools (at most {budget} calls; they run in a scratch copy of the domain that starts from the initial state, so changes are discarded): look up the records the task and the conversation name, and find out whether the task was possible as written (if not, the failure is the TASK's) or the assistant went wrong (TRAJECTORY)."""


def conversation_lines(messages: list[dict], limit: int = 400) -> str:
    lines = []
    for message in messages:
        role = message["role"]
        if role == "system":
            continue
        if role == "tool":
            lines.append(f"[tool result] {(message.get('content') or '')[:limit]}")
            continue
        if message.get("content"):
            lines.append(f"[{role}] {message['content'][:limit]}")
        for call in message.get("tool_calls") or []:
            lines.append(f"[{role} calls] {call['function']['name']}({call['function']['arguments'][:limit]})")
    return "\n".join(lines)


def trajectory_verify_messages(plan: dict, task: dict, trajectory: dict, budget: int = 0) -> list[dict]:
    """The trajectory verifier's prompt; with a tool-call `budget`, it investigates before its verdict."""
    system = TRAJECTORY_VERIFY_SYSTEM.format(evaluation_rules=plan["evaluation_rules"])
    if budget:
        system += TRAJECTORY_INVESTIGATE.format(budget=budget)
    check = trajectory["state_check"]
    diff = json.dumps(check["diff"][:10], ensure_ascii=False) if check["diff"] else "none"
    user = (f"Task specification: {task.get('specification', '')}\nExpected answer: {task.get('expected_answer', '')}"
            f"\n\nConversation:\n{conversation_lines(trajectory['messages'])}\n\nFinal state check: "
            f"{'PASSED' if check['reward'] == 1.0 else 'FAILED'}; differences from the expected state: {diff}\n"
            f"User ended with: {trajectory.get('user_stop') or 'no stop token'}\n\n"
            + ("Investigate with the tools." if budget else "Verdict as JSON:"))
    return chat(system, user)


# -- 4.4 reflection --------------------------------------------------------------------------------
REFLECTION_SCHEMA = {
    "type": "object",
    "required": ["analysis", "synthesis_plan", "evaluation_rules"],
    "properties": {"analysis": {"type": "string"}, "synthesis_plan": {"type": "string"}, "evaluation_rules": RULES_SCHEMA},
}

REFLECTION_SYSTEM = """You improve a data-synthesis stream from its failures.
Failures attributed to TASK, and tasks that failed verification, mean the synthesis plan must make tasks more precise or feasible.
Failures attributed to TRAJECTORY, when the rationale shows the rules were too lenient or too strict, mean the evaluation rules must be recalibrated.
Reply with JSON: {"analysis": "the failure pattern, in two sentences", "synthesis_plan": "the revised synthesis plan", "evaluation_rules": "the revised evaluation rules, one [ACCEPT]/[REJECT] rule per sentence"}."""


def reflection_messages(plan: dict, outcome: dict, failures: list[dict]) -> list[dict]:
    failure_lines = "\n".join(
        f"- {f['stage']}{' [' + f['attribution'] + ']' if f.get('attribution') else ''}: {f['rationale'][:300]}"
        for f in failures) or "(no failures)"
    user = (f"Task category: {plan.get('focus', '')}\n\nSynthesis plan:\n{plan['synthesis_plan']}\n\nEvaluation rules:"
            f"\n{plan['evaluation_rules']}\n\nThis iteration: {json.dumps(outcome)}\nFailures:\n{failure_lines}\n\n"
            "Revised plan pair as JSON:")
    return chat(REFLECTION_SYSTEM, user)
