"""Domains the self-evolving engine works in: tools an agent calls and a state the checker reads.

A domain record is either
- an `environment` record (astra-sandbox): its `code` runs in a fresh jailed session per episode;
  the session's `state()` is the state (the code's `get_state()` or its public globals); or
- a `tool_server` record with a stdio/http transport (an MCP server, e.g. the tau2 adapter in
  `astra_toolgraph.evolve.tau2_server`): one fresh server process per episode; its `state_tool`
  (a tool not shown to agents) returns the state as JSON.

Either may carry `description` and `example_tasks` for the planner. An episode is
`async with domain.episode() as episode:` then `await episode.call(name, args)` -> (ok, text) and
`await episode.state()` -> dict.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field

from astra_core.stage import Rejected

from astra_toolgraph.mcp_client import McpConnection


@dataclass
class Domain:
    id: str
    record: dict
    tools: list[dict]  # what agents see
    description: str = ""
    example_tasks: list[str] = field(default_factory=list)
    sandbox: object = None  # astra_sandbox.SandboxConfig for environment domains
    state_tool: str | None = None  # MCP domains: the hidden tool returning the state

    @property
    def tool_names(self) -> set[str]:
        return {tool["function"]["name"] for tool in self.tools}

    def episode(self):
        if "code" in self.record:
            return _SandboxEpisode(self)
        return _McpEpisode(self)


def domain_of(record: dict, *, sandbox_config=None) -> Domain:
    """A Domain from an environment or tool_server record."""
    if "code" in record:
        from astra_sandbox import SandboxConfig

        return Domain(record["id"], record, record["tools"], record.get("description", ""),
                      list(record.get("example_tasks") or []), sandbox=sandbox_config or SandboxConfig())
    transport = record.get("transport") or {}
    if transport.get("kind") not in ("stdio", "http"):
        raise Rejected(f"domain {record.get('id')!r} has neither environment code nor a deployed MCP transport")
    state_tool = record.get("state_tool")
    tools = [t for t in record["tools"] if t["function"]["name"] != state_tool]
    return Domain(record["id"], record, tools, record.get("description", ""), list(record.get("example_tasks") or []),
                  state_tool=state_tool)


def load_domains(records: list[dict], *, sandbox_config=None) -> dict[str, Domain]:
    return {record["id"]: domain_of(record, sandbox_config=sandbox_config) for record in records}


class _SandboxEpisode:
    """One astra-sandbox session (a cold-started jailed worker, ~50 ms); calls run in a thread."""

    def __init__(self, domain: Domain):
        self.domain = domain
        self.session = None

    async def __aenter__(self):
        from astra_sandbox import open_session

        environment = self.domain.record
        self.session = await asyncio.to_thread(open_session, environment["code"],
                                               environment.get("requirements") or [], config=self.domain.sandbox)
        return self

    async def __aexit__(self, *exc) -> None:
        await asyncio.to_thread(self.session.close)

    async def call(self, name: str, arguments: dict) -> tuple[bool, str]:
        if name not in self.domain.tool_names:
            return False, f"Error: unknown tool {name!r}"
        result = await asyncio.to_thread(self.session.call, name, arguments)
        return result.ok, result.output

    async def state(self) -> dict:
        return await asyncio.to_thread(self.session.state)


class _McpEpisode:
    """A fresh MCP server process (or HTTP session) per episode, so episodes share no state."""

    def __init__(self, domain: Domain):
        self.domain = domain
        self.stack = contextlib.AsyncExitStack()
        self.connection: McpConnection | None = None

    async def __aenter__(self):
        self.connection = await self.stack.enter_async_context(McpConnection(self.domain.record["transport"]))
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stack.aclose()

    async def call(self, name: str, arguments: dict) -> tuple[bool, str]:
        if name not in self.domain.tool_names:
            return False, f"Error: unknown tool {name!r}"
        outcome = await self.connection.call(name, arguments)
        return outcome.ok, outcome.content

    async def state(self) -> dict:
        if self.domain.state_tool is None:
            return {}
        outcome = await self.connection.call(self.domain.state_tool, {})
        if not outcome.ok:
            raise RuntimeError(f"state tool {self.domain.state_tool!r} failed: {outcome.content}")
        return json.loads(outcome.content)
