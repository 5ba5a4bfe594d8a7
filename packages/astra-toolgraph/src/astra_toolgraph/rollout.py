"""Trajectory collection (paper §2.1.4): a multi-turn agent loop in the OpenAI tool-calling protocol.

Each turn the policy sees the conversation and the server's tools; the tool calls it writes are
executed (concurrently when `parallel_calls`) and answered with tool messages, until it replies
without a call or `max_turns` assistant turns have passed. Calls to deployed MCP servers run
for real (one live connection per server, shared by the run); calls to doc-only servers go to
the stateful emulator, one per trajectory, which injects failures.

`tool_choice` is the OpenAI request field: "auto" lets the policy decide; "required" obliges a call
every turn; "first-required" obliges one on the first turn only (then "auto"), which a small model
needs to call tools at all. What was forced is recorded in the trajectory's meta.
"""

from __future__ import annotations

import asyncio
import json

from astra_core.llm import LLMClient
from astra_core.records import new_record, stable_id

from astra_toolgraph.configs import RolloutConfig
from astra_toolgraph.emulator import ToolEmulator
from astra_toolgraph.mcp_client import CallOutcome, ServerPool


class Executor:
    """Runs one trajectory's tool calls on the right backend."""

    def __init__(self, llm: LLMClient, server: dict, pool: ServerPool, session_id: str, config: RolloutConfig):
        self.server = server
        self.pool = pool
        self.live = server["transport"]["kind"] in ("stdio", "http") and not config.emulate_live
        self.emulator = None if self.live else ToolEmulator(llm, server, session_id, config.emulator)

    @property
    def backend(self) -> str:
        return "mcp" if self.live else "emulator"

    async def call(self, name: str, arguments: dict) -> tuple[CallOutcome, bool]:
        if self.live:
            return await self.pool.call(self.server["id"], self.server["transport"], name, arguments), False
        return await self.emulator.call(name, arguments)


def _normalize_calls(calls: list[dict], turn: int) -> list[dict]:
    """A reply's tool calls as the trajectory keeps them: each with an id (a server may leave it out) and the
    OpenAI fields only. (The client hands arguments on as JSON text whatever the server sent.)"""
    out = []
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        out.append({"id": call.get("id") or f"call_{turn}_{index}", "type": "function",
                    "function": {"name": function.get("name", ""), "arguments": function.get("arguments", "{}")}})
    return out


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n...[truncated {len(text) - limit} characters]"


async def _execute(executor: Executor, call: dict, tool_names: set[str]) -> tuple[CallOutcome, bool]:
    name = call["function"]["name"]
    if name not in tool_names:
        return CallOutcome(False, f"Error: unknown tool {name!r}", "error", 0.0), False
    try:
        arguments = json.loads(call["function"]["arguments"] or "{}")
    except json.JSONDecodeError as exc:
        return CallOutcome(False, f"Error: arguments are not valid JSON: {exc.msg}", "error", 0.0), False
    if not isinstance(arguments, dict):
        return CallOutcome(False, "Error: arguments must be a JSON object", "error", 0.0), False
    return await executor.call(name, arguments)


async def rollout(llm: LLMClient, task: dict, server: dict, pool: ServerPool, config: RolloutConfig,
                  sample: int = 0) -> dict:
    """One trajectory record for `task` on `server`."""
    trajectory_id = stable_id(task["id"], sample, prefix="traj-")
    executor = Executor(llm, server, pool, trajectory_id, config)
    tool_names = {t["function"]["name"] for t in server["tools"]}
    messages = [{"role": "system", "content": config.system_prompt}, {"role": "user", "content": task["question"]}]
    forced, executions, finish = [], [], "max_turns"
    for turn in range(config.max_turns):
        choice = config.choice_for(turn)
        reply = await llm.chat(messages, tools=server["tools"], tool_choice=choice)
        calls = _normalize_calls(reply.tool_calls, turn)
        message = {"role": "assistant", "content": reply.content or None}
        if calls:
            message["tool_calls"] = calls
        messages.append(message)
        if choice == "required":
            forced.append(turn)
        if not calls:
            finish = "no_tool_call"
            break
        if config.parallel_calls:
            outcomes = await asyncio.gather(*(_execute(executor, c, tool_names) for c in calls))
        else:
            outcomes = [await _execute(executor, c, tool_names) for c in calls]
        for call, (outcome, injected) in zip(calls, outcomes, strict=True):
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": _truncate(outcome.content, config.max_observation_chars)})
            executions.append({"turn": turn, "call_id": call["id"], "tool": call["function"]["name"],
                               "backend": executor.backend, "ok": outcome.ok, "kind": outcome.kind,
                               "injected_failure": injected, "duration_s": round(outcome.duration_s, 4)})
    rollout_meta = {
        "server_id": server["id"], "backend": executor.backend, "sample": sample,
        "tool_choice": {"mode": config.tool_choice, "forced_turns": forced},
        "finish_reason": finish, "turns": sum(1 for m in messages if m["role"] == "assistant"),
        "tool_calls": len(executions), "executions": executions,
    }
    if not executor.live:
        rollout_meta["emulator"] = {"failure_rate": config.emulator.failure_rate, "seed": config.emulator.seed}
    record = new_record(trajectory_id, parent=task, task_id=task["id"], messages=messages, tools=server["tools"])
    record["meta"]["rollout"] = rollout_meta
    return record
