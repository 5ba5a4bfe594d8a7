"""A stateful LLM tool emulator for doc-only servers (paper §2.1.4).

One `ToolEmulator` per session (trajectory). It keeps the session's calls and outputs and shows
them to the LLM with every new call, so outputs stay consistent (an order created earlier can be
looked up later); a repeated read-only call returns its earlier output verbatim. Arguments are
checked against the tool's schema first, as a real server would. With probability
`failure_rate` (paper: 20%) a call fails instead, as a timeout or an unreachable server: the
draw is seeded by (seed, session, call index), so a rerun injects the same failures.
"""

from __future__ import annotations

import json
import random
import re
import time

from astra_core.llm import LLMClient
from astra_core.reasoning import without_reasoning
from astra_core.records import stable_id
from jsonschema import Draft202012Validator

from astra_toolgraph import prompts
from astra_toolgraph.configs import EmulatorConfig
from astra_toolgraph.dependency import tokens
from astra_toolgraph.mcp_client import CallOutcome

READ_VERBS = {"get", "list", "read", "search", "find", "query", "describe", "show", "fetch", "lookup", "check",
              "count", "view", "retrieve"}
FAILURES = (
    ("timeout", "Error: timeout: the tool did not respond within 30 seconds"),
    ("unreachable", "Error: unreachable: could not connect to the tool server (connection refused)"),
)


def _read_only(tool: dict) -> bool:
    hint = (tool.get("annotations") or {}).get("readOnlyHint")
    if hint is not None:
        return bool(hint)
    first = tool["function"]["name"].replace("-", "_").split("_")[0].lower()
    return first in READ_VERBS or bool(tokens(first) & READ_VERBS)


def _clean_output(text: str) -> str:
    text = text.strip()
    fenced = re.match(r"^```[a-zA-Z]*\s*(.*?)\s*```$", text, re.DOTALL)
    return fenced.group(1).strip() if fenced else text


class ToolEmulator:
    def __init__(self, llm: LLMClient, server: dict, session_id: str, config: EmulatorConfig):
        self.llm = llm
        self.server = server
        self.session_id = session_id
        self.config = config
        self.tools = {t["function"]["name"]: t for t in server["tools"]}
        self.history: list[dict] = []  # {name, arguments, output, ok}
        self._calls = 0

    def _injected_failure(self, index: int) -> tuple[str, str] | None:
        draw = random.Random(stable_id(self.config.seed, self.session_id, index)).random()
        if draw < self.config.failure_rate:
            return FAILURES[int(draw / self.config.failure_rate * len(FAILURES)) % len(FAILURES)]
        return None

    async def call(self, name: str, arguments: dict) -> tuple[CallOutcome, bool]:
        """The call's outcome and whether its failure was injected."""
        started = time.monotonic()
        index, self._calls = self._calls, self._calls + 1
        failure = self._injected_failure(index)
        if failure is not None:
            self._remember(name, arguments, failure[1], ok=False)
            return CallOutcome(False, failure[1], failure[0], time.monotonic() - started), True
        tool = self.tools.get(name)
        if tool is None:
            return CallOutcome(False, f"Error: unknown tool {name!r}", "error", time.monotonic() - started), False
        problem = self._argument_problem(tool, arguments)
        if problem:
            self._remember(name, arguments, problem, ok=False)
            return CallOutcome(False, problem, "error", time.monotonic() - started), False
        if _read_only(tool):
            for earlier in self.history:
                if earlier["ok"] and earlier["name"] == name and earlier["arguments"] == arguments:
                    return CallOutcome(True, earlier["output"], "ok", time.monotonic() - started), False
        messages = prompts.emulate_call(self.server, tool, arguments, self.history)
        reply = await self.llm.chat(messages, max_tokens=self.config.max_tokens)
        output = _clean_output(without_reasoning(reply.content)) or json.dumps({"status": "ok"})
        self._remember(name, arguments, output, ok=True)
        return CallOutcome(True, output, "ok", time.monotonic() - started), False

    @staticmethod
    def _argument_problem(tool: dict, arguments: dict) -> str | None:
        schema = tool["function"].get("parameters") or {}
        errors = sorted(Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if not errors:
            return None
        where = "/".join(map(str, errors[0].absolute_path)) or "arguments"
        return f"Error: invalid arguments: {where}: {errors[0].message}"

    def _remember(self, name: str, arguments: dict, output: str, *, ok: bool) -> None:
        self.history.append({"name": name, "arguments": arguments, "output": output, "ok": ok})
