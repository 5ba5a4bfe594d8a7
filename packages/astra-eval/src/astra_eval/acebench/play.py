"""One ACEBench agent task, played end to end: agent, sandbox, and (multi_turn) an LLM user simulator.

The loop follows ACEBench's: a run is a sequence of messages (agent, execution, user) capped at
`max_messages` (ACEBench's max_dialog_turns, 40); an agent message holding calls goes to execution
and counts as a process step; any other agent message goes to the user (multi_turn) or is answered
with a reminder to work alone (multi_step, where it also counts as a process step); a message
containing "finish conversation" (from the third message on) ends the run.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from astra_core.llm.client import LLMClient

from astra_eval.acebench import prompts
from astra_eval.acebench.sandbox import Sandbox, call_text, parse_calls
from astra_eval.acebench.scoring import end_to_end, process_accuracy
from astra_eval.agent import history_message
from astra_eval.results import eval_result, make_item, trial_seed

SPLITS = ("multi_turn", "multi_step")
LANGUAGES = ("en", "zh")
FINISH = "finish conversation"
MAX_MESSAGES = 40
DEFAULT_TEMPERATURE = 0.6  # the paper's ACEBench setting
REPEATS = 4  # the paper averages four runs of the 50 tasks


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@functools.cache
def load(lang: str, split: str) -> tuple[dict[str, dict], dict[str, dict]]:
    """(tasks by id, possible answers by id), from the bundled copy of ACEBench's data."""
    root = resources.files("astra_eval") / "data" / "acebench" / f"data_{lang}"
    tasks = {t["id"]: t for t in _jsonl(root / f"data_agent_{split}.json")}
    answers = {a["id"]: a for a in _jsonl(root / "possible_answer" / f"data_agent_{split}.json")}
    return tasks, answers


def items(languages: list[str], splits: list[str], *, limit: int | None, ids: list[str] | None, trials: int,
          seed: int | None) -> list[dict]:
    selected = []
    for lang in languages:
        for split in splits:
            tasks, _ = load(lang, split)
            names = [name for name in tasks if not ids or name in ids][:limit]
            selected += [make_item("acebench", split, f"{lang}/{name}", trial, trial_seed(seed, trial), language=lang)
                         for trial in range(trials) for name in names]
    return selected


_TYPES = {"dict": "object", "float": "number", "tuple": "array", "int": "integer", "str": "string",
          "list": "array", "bool": "boolean"}


def _schema(node: Any) -> Any:
    if isinstance(node, dict):
        converted = {key: _schema(value) for key, value in node.items()}
        if isinstance(converted.get("type"), str):
            converted["type"] = _TYPES.get(converted["type"], converted["type"])
        return converted
    if isinstance(node, list):
        return [_schema(value) for value in node]
    return node


def openai_tools(functions: list[dict]) -> list[dict]:
    """ACEBench's function docs (types like 'dict') as OpenAI tools (JSON Schema types)."""
    return [{"type": "function", "function": {"name": f["name"], "description": f.get("description", ""),
                                              "parameters": _schema(f.get("parameters", {"type": "object"}))}}
            for f in functions]


@dataclass
class Run:
    messages: list[dict] = field(default_factory=list)  # the agent's side of the conversation
    process: list[str] = field(default_factory=list)  # what the agent sent to execution, in order
    user_turns: int = 0
    finished: bool = False


class LLMUser:
    """ACEBench's simulated user: an LLM following the task's instruction, one line per turn."""

    def __init__(self, client: LLMClient, instruction: str, lang: str, params: dict):
        self.client, self.params = client, params
        self.messages = [{"role": "system", "content": prompts.USER_SIMULATOR.format(instruction=instruction)},
                         {"role": "user", "content": prompts.USER_OPENING[lang]}]

    async def reply(self, agent_text: str | None = None) -> str:
        if agent_text is not None:
            self.messages.append({"role": "user", "content": agent_text})
        answer = await self.client.chat(self.messages, **self.params)
        text = answer.content.strip()
        self.messages.append({"role": "assistant", "content": text})
        return text


def _calls_of(message: dict) -> tuple[list, str | None]:
    """(calls, their process text) of an agent message: native tool calls, else ACEBench's text format."""
    if message.get("tool_calls"):
        calls = []
        for call in message["tool_calls"]:
            try:
                arguments = json.loads(call["function"]["arguments"] or "{}")
            except json.JSONDecodeError:
                arguments = {"__unparsable__": call["function"]["arguments"]}
            calls.append((call["function"]["name"], arguments if isinstance(arguments, dict) else {}))
        return calls, call_text(calls)
    text = message.get("content") or ""
    if "[" in text and "]" in text:
        try:
            return parse_calls(text), text
        except ValueError:
            pass
    return [], None


async def play(task: dict, lang: str, split: str, agent, user: LLMUser | None, *, seed: int | None = None,
               max_messages: int = MAX_MESSAGES) -> tuple[Sandbox, Run]:
    sandbox = Sandbox(task["involved_classes"], task["initial_config"], lang)
    tools = openai_tools(task["function"])
    run = Run()
    if split == "multi_step":
        opening = task["question"]
        system = prompts.AGENT_MULTI_STEP
    else:
        opening = await user.reply()
        run.user_turns += 1
        domain = prompts.TRAVEL_DOMAIN if "Travel" in task["involved_classes"] else prompts.PHONE_DOMAIN
        system = prompts.AGENT_MULTI_TURN.format(domain=domain)
    history = [{"role": "system", "content": system}, {"role": "user", "content": opening}]
    run.messages = list(history)
    index = 0

    def add(message: dict, sent: dict | None = None) -> None:
        history.append(sent or message)
        run.messages.append(message)

    while index < max_messages:
        reply = await agent(history, tools, seed=seed)
        add(reply, history_message(reply))
        content = reply.get("content") or ""
        if index > 1 and FINISH in content:
            run.finished = True
            break
        index += 1
        if index >= max_messages:  # the agent had the last message: nothing more is executed or answered
            break
        calls, text = _calls_of(reply)
        if calls:
            run.process.append(text)
            results = sandbox.execute(calls)
            index += 1
            if reply.get("tool_calls"):
                for call, result in zip(reply["tool_calls"], results, strict=False):
                    add({"role": "tool", "tool_call_id": call["id"], "content": result})
            else:
                add({"role": "user", "content": "execution result: " + json.dumps(results, ensure_ascii=False)})
            continue
        if split == "multi_step":
            run.process.append(content)  # ACEBench executes every multi_step agent message
            add({"role": "user", "content": prompts.MULTI_STEP_NUDGE[lang]})
            index += 1
            continue
        answer = await user.reply(content)
        run.user_turns += 1
        add({"role": "user", "content": answer})
        if index > 1 and FINISH in answer:
            run.finished = True
            break
        index += 1
    return sandbox, run


def score(lang: str, split: str, name: str, sandbox: Sandbox, run: Run) -> dict:
    _, answers = load(lang, split)
    answer = answers[name]
    snapshot = sandbox.snapshot()
    correct, errors = end_to_end(snapshot, answer["ground_truth"])
    return {"end_to_end": correct, "process_accuracy": process_accuracy(run.process, answer["mile_stone"],
                                                                         correct=correct),
            "errors": errors, "process": run.process, "result": snapshot}


class Oracle:
    """Sends ACEBench's milestone calls (the first alternative when there are several), one message each,
    then "finish conversation": replays the possible answers through the sandbox and scorer."""

    def __init__(self, milestones: list):
        chosen = milestones[0] if milestones and isinstance(milestones[0], list) else milestones
        self.script = list(chosen) + [FINISH]

    async def __call__(self, messages: list[dict], tools: list[dict], *, seed: int | None = None) -> dict:
        step = sum(1 for m in messages if m["role"] == "assistant")
        return {"role": "assistant", "content": self.script[min(step, len(self.script) - 1)]}


class ScriptedUser:
    """The oracle's user: opens with the task instruction and lets the agent go on."""

    def __init__(self, instruction: str):
        self.instruction = instruction

    async def reply(self, agent_text: str | None = None) -> str:
        return self.instruction if agent_text is None else "Please go on."


async def run_item(item: dict, agent_for, user_for, max_messages: int = MAX_MESSAGES) -> dict:
    lang, name = item["item_id"].split("/", 1)
    split = item["category"]
    tasks, answers = load(lang, split)
    task = tasks[name]
    agent = agent_for(task, answers[name])
    user = user_for(task, lang) if split == "multi_turn" else None
    sandbox, run = await play(task, lang, split, agent, user, seed=item.get("seed"), max_messages=max_messages)
    verdict = score(lang, split, name, sandbox, run)
    details = {**verdict, "language": lang, "user_turns": run.user_turns, "finished": run.finished}
    return eval_result(item, success=verdict["end_to_end"], score=1.0 if verdict["end_to_end"] else 0.0,
                       messages=run.messages, details=details)
