"""BFCL v3 multi-turn (base, miss_func, miss_param, long_context) on bfcl-eval's data, backends and checker.

Runs only where `bfcl-eval` is installed (the `bfcl` extra; `.venv-bfcl` in the workspace).

The protocol is BFCL's function-calling one (what its OpenAI chat-completions handler does):
the conversation starts empty (no system prompt), the tools are the involved classes' function
docs in OpenAI form; in every turn the user's messages are appended and the model is queried until
it answers without a decodable call (at most MAXIMUM_STEP_LIMIT steps, else the whole entry is
force-terminated); each call is executed on the backend instances (loaded once per entry from the
entry's `initial_config`) and its result goes back as a tool message. In miss_func, the held-out
functions are added to the tools at their turn, whose user message is BFCL's "I have updated some
more functions ..." prompt. Scoring decodes every step like BFCL's evaluator and calls its
`multi_turn_checker` (state of every backend instance + unordered response check, per turn).

The requests are the ones that handler sends: the tools are bfcl-eval's own `convert_to_tool`
output, each function's `response` (return schema) included, and each assistant message goes back
into the history as the endpoint returned it (`reasoning_content` included) unless
`history_reasoning="drop"`. An error while an entry runs (e.g. the endpoint refuses a request) fails
the entry, as bfcl-eval's "Error during inference" result does.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from bfcl_eval.constants.default_prompts import (
    DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
    MAXIMUM_STEP_LIMIT,
)
from bfcl_eval.constants.enums import ModelStyle
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
    execute_multi_turn_func_call,
    is_empty_execute_response,
)
from bfcl_eval.model_handler.utils import convert_to_function_call, convert_to_tool
from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

from astra_eval.agent import history_message
from astra_eval.results import eval_result, make_item, trial_seed, unknown

CATEGORIES = {
    "base": "multi_turn_base",
    "miss_func": "multi_turn_miss_func",
    "miss_param": "multi_turn_miss_param",
    "long_context": "multi_turn_long_context",
}
DEFAULT_TEMPERATURE = 0.6  # the paper's BFCL-MT setting


@functools.cache
def load(category: str) -> tuple[dict[str, dict], dict[str, list[list[str]]]]:
    """(entries by id, ground-truth call strings per turn by id) of one category, from the bfcl-eval wheel."""
    entries = {entry["id"]: entry for entry in load_dataset_entry(category)}
    truth = {answer["id"]: answer["ground_truth"] for answer in load_ground_truth_entry(category)}
    return entries, truth


def items(categories: list[str], *, limit: int | None, ids: list[str] | None, trials: int,
          seed: int | None) -> list[dict]:
    selected = []
    for short in categories:
        category = CATEGORIES.get(short, short)
        entries, _ = load(category)
        names = [name for name in entries if not ids or name in ids][:limit]
        selected += [make_item("bfcl", category, name, trial, trial_seed(seed, trial))
                     for trial in range(trials) for name in names]
    return selected


def is_long_context(category: str) -> bool:
    return "long_context" in category or "composite" in category


class Backends:
    """The entry's backend instances, in a namespace of their own (bfcl-eval keeps instances in a module
    global keyed by model name and entry id, so every run and every scoring gets a fresh name)."""

    def __init__(self, entry: dict):
        self.entry = entry
        self.name = f"astra_{uuid.uuid4().hex}"
        self.execute([])  # instantiate and load the initial config before the first turn

    def execute(self, calls: list[str], *, name: str | None = None) -> list[str]:
        entry = self.entry
        results, _ = execute_multi_turn_func_call(
            calls, entry.get("initial_config", {}), entry["involved_classes"], name or self.name, entry["id"],
            long_context=is_long_context(entry["id"].rsplit("_", 1)[0]), is_evaL_run=False)
        return results

    def release(self) -> None:
        namespace = vars(multi_turn_utils)
        for key in [key for key in namespace if key.startswith(self.name)]:
            del namespace[key]


def openai_tools(functions: list[dict]) -> list[dict]:
    return convert_to_tool(functions, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)


def model_response(message: dict) -> list[dict] | str:
    """A step as BFCL records it: [{name: arguments_json}, ...] for tool calls, else the content (None too)."""
    calls = message.get("tool_calls") or []
    if calls:
        return [{call["function"]["name"]: call["function"].get("arguments")} for call in calls]
    return message.get("content")


def decode(step: list[dict] | str) -> list[str]:
    """BFCL's FC decoding: a step's calls as executable strings; raises on text or malformed arguments."""
    return convert_to_function_call(step)


@dataclass
class Episode:
    turns: list[list[Any]] = field(default_factory=list)  # per turn, per step: model_response()
    messages: list[dict] = field(default_factory=list)
    force_quit: bool = False


async def play(entry: dict, agent, *, seed: int | None = None, max_turns: int | None = None,
               history_reasoning: str = "keep") -> Episode:
    """Drive the model through the turns of `entry` (all of them unless `max_turns`, a smoke-test cap that
    leaves the entry incomplete), executing its calls on the backends."""
    entry = copy.deepcopy(entry)
    held_out: dict[str, list[dict]] = entry.get("missed_function", {})
    tools = openai_tools(entry["function"])
    episode = Episode()
    history: list[dict] = []
    backends = Backends(entry)
    try:
        for turn_index, turn_messages in enumerate(entry["question"][:max_turns]):
            if str(turn_index) in held_out:
                entry["function"].extend(held_out[str(turn_index)])
                tools = openai_tools(entry["function"])
                turn_messages = [{"role": "user", "content": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}]
            history.extend(turn_messages)
            episode.messages.extend(turn_messages)
            steps: list[Any] = []
            for step in range(MAXIMUM_STEP_LIMIT + 1):
                message = await agent(history, tools, seed=seed)
                history.append(history_message(message, history_reasoning))
                episode.messages.append(message)
                response = model_response(message)
                steps.append(response)
                try:
                    calls = decode(response)
                except Exception:  # noqa: BLE001 - text or malformed arguments end the turn, as in BFCL
                    break
                if is_empty_execute_response(calls):
                    break
                results = backends.execute(calls)
                for call, result in zip(message["tool_calls"], results, strict=False):
                    tool_message = {"role": "tool", "tool_call_id": call.get("id"), "content": result}
                    history.append(tool_message)
                    episode.messages.append(tool_message)
                if step == MAXIMUM_STEP_LIMIT:
                    episode.force_quit = True
            episode.turns.append(steps)
            if episode.force_quit:
                break
    finally:
        backends.release()
    return episode


def decode_turns(turns: list[list[Any]], decode=decode) -> list[list[list[str]]]:
    """Every turn's decodable, non-empty steps (what BFCL's evaluator hands to its checker); `decode` is the
    handler's decoding (BFCL's FC decoding unless a bfcl-eval handler plays)."""
    decoded_turns = []
    for steps in turns:
        decoded = []
        for step in steps:
            try:
                calls = decode(step)
            except Exception:  # noqa: BLE001 - BFCL ignores steps that do not decode
                continue
            if not is_empty_execute_response(calls):
                decoded.append(calls)
        decoded_turns.append(decoded)
    return decoded_turns


def score(entry: dict, ground_truth: list[list[str]], turns: list[list[Any]], decode=decode) -> dict:
    """BFCL's verdict for one entry: {"valid": bool, ...error details}."""
    if len(turns) != len(ground_truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated",
                "error_message": f"model result has {len(turns)} turns, ground truth {len(ground_truth)}"}
    scoring_name = f"astra_{uuid.uuid4().hex}"
    try:
        return multi_turn_checker(decode_turns(turns, decode), ground_truth, copy.deepcopy(entry),
                                  entry["id"].rsplit("_", 1)[0], scoring_name)
    finally:
        namespace = vars(multi_turn_utils)
        for key in [key for key in namespace if key.startswith(scoring_name)]:
            del namespace[key]


# -- ground-truth replay (checks the harness: every entry must score 1) ------------------------------

def call_arguments(call: str, functions: list[dict]) -> tuple[str, dict]:
    """'cd(folder="x")' or 'cd("x")' -> ("cd", {"folder": "x"}); positional arguments follow the doc's order."""
    node = ast.parse(call, mode="eval").body
    name = node.func.id
    doc = next((f for f in functions if f["name"] == name), None)
    order = list(doc["parameters"]["properties"]) if doc else []
    arguments = {order[i]: ast.literal_eval(arg) for i, arg in enumerate(node.args)}
    arguments.update({kw.arg: ast.literal_eval(kw.value) for kw in node.keywords})
    return name, arguments


class Oracle:
    """An agent that answers every turn with the ground-truth calls, in one step, then says it is done.

    With `drop_rate` > 0 each ground-truth call is left out with that probability (seeded per entry):
    a deliberately imperfect replay, to compare our scores with BFCL's own runner."""

    def __init__(self, entry: dict, ground_truth: list[list[str]], *, drop_rate: float = 0.0, seed: int = 0):
        rng = random.Random(f"{seed}/{entry['id']}")
        self.turns = [[call for call in turn if rng.random() >= drop_rate] for turn in ground_truth]
        self.functions = entry["function"] + [f for fs in entry.get("missed_function", {}).values() for f in fs]
        self.answered = -1

    async def __call__(self, messages: list[dict], tools: list[dict], *, seed: int | None = None) -> dict:
        turn = sum(1 for m in messages if m["role"] == "user") - 1
        if messages[-1]["role"] == "tool" or turn == self.answered or not self.turns[turn]:
            self.answered = turn
            return {"role": "assistant", "content": "Done."}
        self.answered = turn
        calls = []
        for index, call in enumerate(self.turns[turn]):
            name, arguments = call_arguments(call, self.functions)
            calls.append({"id": f"call_{turn}_{index}", "type": "function",
                          "function": {"name": name, "arguments": json.dumps(arguments)}})
        return {"role": "assistant", "content": None, "tool_calls": calls}


def entry_of(item: dict) -> tuple[dict, list[list[str]]]:
    """(BFCL entry, ground truth) of an item; a malformed item (unknown category or id) is rejected."""
    if item["benchmark"] != "bfcl" or item["category"] not in CATEGORIES.values():
        raise unknown(item, "category")
    entries, truth = load(item["category"])
    if item["item_id"] not in entries:
        raise unknown(item, "task")
    return entries[item["item_id"]], truth[item["item_id"]]


async def run_item(item: dict, agent_for, max_turns: int | None = None, history_reasoning: str = "keep") -> dict:
    """Play and score one item; `agent_for(entry, ground_truth)` gives the agent to use."""
    entry, ground_truth = entry_of(item)
    episode = await play(entry, agent_for(entry, ground_truth), seed=item.get("seed"), max_turns=max_turns,
                         history_reasoning=history_reasoning)
    verdict = score(entry, ground_truth, episode.turns)
    details = {"checker": short_verdict(verdict), "model_result": episode.turns, "force_quit": episode.force_quit}
    return eval_result(item, success=verdict["valid"], score=1.0 if verdict["valid"] else 0.0,
                       messages=episode.messages, details=details)


def short_verdict(verdict: dict) -> dict:
    """The checker's verdict without its bulky execution logs."""
    kept = {key: verdict[key] for key in ("valid", "error_type", "error_message") if key in verdict}
    details = verdict.get("details") or {}
    if "differences" in details:
        kept["differences"] = json.loads(json.dumps(details["differences"], default=str))
    if "missing_items" in details:
        kept["missing_items"] = details["missing_items"]
    return kept
