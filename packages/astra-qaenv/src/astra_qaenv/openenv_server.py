"""`astra-qaenv serve-openenv`: rl_sample environments served as an OpenEnv MCP environment.

Any trainer that speaks OpenEnv (TRL's GRPOTrainer, SkyRL, astra-grpo itself) plays our environments:

- every OpenEnv session is one `QAEnvironment`; each of its episodes is a fresh astra-sandbox episode of the
  sample's environment code on the shared warm pool (nsjail isolation as everywhere in the toolkit);
- `reset(sample_id=...)` or `reset(index=...)` picks a sample, `reset()` the next one in order (shared by all
  sessions, cycling); the observation's metadata holds its prompt (`messages`), its `tools` (OpenAI format),
  `sample_id` and `reward_kind`;
- the sample's tools (distractors included) are the session's MCP tools (`tools/list`, `tools/call` on /mcp, or
  `step(CallToolAction)` on /ws): each call runs in the episode's sandbox and is recorded;
- a step with any other action ends the episode: `Action(metadata={"answer": TEXT})`, TEXT being the policy's
  final answer (optional). Its observation is `done` with our reward: F1 over the sample's sub-tasks (or its
  recall / precision variant) from astra-reward, computed on the recorded calls and the answer exactly as
  astra-grpo computes it in-process, or the state verifier on the sandbox's final state; the reward components
  are in its metadata (`reward_components`);
- sessions run concurrently up to `max_sessions` (OpenEnv's ConcurrencyConfig); a crashed or timed-out tool is
  that call's error observation, and an environment that cannot be made is that session's error.

Needs the `openenv` extra (`pip install 'astra-qaenv[openenv]'`); nothing else in astra-qaenv imports this module.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import json
import socket
import sys
import threading
from collections.abc import Iterable
from functools import partial
from typing import Any

from astra_core.jsonl import load_checked
from astra_core.schema import RecordError
from fastmcp import FastMCP
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.tools import Tool
from fastmcp.tools.base import ToolResult
from mcp.types import TextContent
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import RESERVED_TOOL_NAMES
from openenv.core.env_server.types import Action, ConcurrencyConfig, Observation, State
from pydantic import PrivateAttr

from astra_qaenv.serve_config import ServeConfig

COMMAND = "astra-qaenv serve-openenv"
F1_KINDS = ("f1", "recall", "precision")
# A tool's observation arrives as text; FastMCP's marker for a wrapped scalar result makes clients read `.data` as
# that text (what FastMCP does for a function returning str).
TEXT_RESULT = {"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"],
               "x-fastmcp-wrap-result": True}


# -- the samples served -----------------------------------------------------------------------------------

def check_servable(record: dict) -> None:
    """RecordError (naming the field) unless the sample can be played here: code in a sandbox, our reward."""
    rid = record.get("id")
    environment = record["environment"]
    if not (environment.get("code") or "").strip():
        raise RecordError("serve-openenv serves environments with code (not tau2 or OpenEnv ones)",
                          record_id=rid, field="environment.code")
    if record.get("user"):
        raise RecordError("an interactive sample needs a user simulator, which OpenEnv does not carry",
                          record_id=rid, field="user")
    for index, tool in enumerate(record["tools"]):
        name = tool["function"].get("name")
        if not isinstance(name, str) or not name:
            raise RecordError("every tool needs a name", record_id=rid, field=f"tools[{index}].function.name")
        if name in RESERVED_TOOL_NAMES:
            raise RecordError(f"{name!r} is reserved by OpenEnv ({', '.join(sorted(RESERVED_TOOL_NAMES))})",
                              record_id=rid, field=f"tools[{index}].function.name")
    kind = record["reward"]["kind"]
    if kind in F1_KINDS and not record.get("job"):
        raise RecordError(f"the {kind} reward needs a non-empty job (sub-Q-A pairs)", record_id=rid, field="job")
    if kind == "state" and not isinstance(record["reward"].get("expected_state"), dict):
        raise RecordError("the state reward needs an expected_state object", record_id=rid,
                          field="reward.expected_state")
    if kind not in F1_KINDS + ("state",):
        raise RecordError(f"the {kind} reward is not ours to compute", record_id=rid, field="reward.kind")


def load_samples(paths: Iterable[str], *, skip_bad: bool = False, rejects: str | None = None) -> list[dict]:
    """The rl_samples of `paths` that can be served, in order. A bad or unservable one stops the server with
    file, line and field, or with `skip_bad` goes to `rejects` (and stderr) with that reason."""
    seen: set[str] = set()

    def servable(sample: dict) -> None:
        check_servable(sample)
        if sample["id"] in seen:
            raise RecordError("duplicate id", record_id=sample["id"], field="id")
        seen.add(sample["id"])

    return load_checked(paths, "rl_sample", stage=COMMAND, check=servable, skip_bad=skip_bad, rejects=rejects)


class SampleCatalog:
    """The served samples, by id, by position, or the next in order (one cursor for all sessions, cycling)."""

    def __init__(self, samples: list[dict]):
        self.samples = samples
        self.by_id = {sample["id"]: sample for sample in samples}
        self._cursor = itertools.cycle(range(len(samples)))
        self._lock = threading.Lock()

    def pick(self, sample_id: str | None = None, index: int | None = None) -> dict:
        if sample_id is not None and index is not None:
            raise ValueError("reset takes sample_id or index, not both")
        if sample_id is not None:
            if sample_id not in self.by_id:
                raise ValueError(f"no sample {sample_id!r} is served here ({len(self.samples)} samples)")
            return self.by_id[sample_id]
        if index is not None:
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self.samples):
                raise ValueError(f"index must be an integer in [0, {len(self.samples)}), got {index!r}")
            return self.samples[index]
        with self._lock:
            return self.samples[next(self._cursor)]


# -- one episode: a sample in a sandbox session, its calls recorded for the reward --------------------------

class SandboxEpisode:
    """One sample played in one astra-sandbox session; the conversation the reward reads is built from its calls."""

    def __init__(self, sample: dict, pool):
        self.sample = sample
        environment = sample["environment"]
        self.session = pool.session(environment["code"], requirements=environment.get("requirements") or [])
        self.messages: list[dict] = [dict(message) for message in sample["messages"]]
        self.tool_names = {tool["function"]["name"] for tool in sample["tools"]}
        self.calls = 0
        self.done = False
        self._lock = threading.Lock()

    def call(self, name: str, arguments: dict) -> tuple[str, bool]:
        """(observation, ok) of one tool call; it runs in the sandbox (blocking) and joins the conversation."""
        with self._lock:
            if self.done:
                return "Error: the episode has ended (reset to start another)", False
            self.calls += 1
            call_id = f"call_{self.calls}"
        result = self.session.call(name, arguments)
        with self._lock:
            self.messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}]})
            self.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": result.output})
        return result.output, result.ok

    def finish(self, answer: str | None) -> tuple[float, dict]:
        """End the episode with the policy's final answer: (reward, components). The sandbox episode ends."""
        with self._lock:
            if self.done:
                raise RuntimeError("the episode has already ended (reset to start another)")
            self.done = True
            if answer is not None:
                self.messages.append({"role": "assistant", "content": answer})
        try:
            return self._reward()
        finally:
            self.close()

    def _reward(self) -> tuple[float, dict]:
        spec = self.sample["reward"]
        if spec["kind"] == "state":
            from astra_reward import state_reward

            result = state_reward(self.session.state(), spec["expected_state"],
                                  ignore_fields=spec.get("ignore_fields") or [])
            return float(result.reward), result.components()
        from astra_reward import f1_reward

        result = f1_reward(self.sample["job"], self.messages, variant=spec["kind"])
        return float(result.reward), result.components()

    def close(self) -> None:
        self.session.close()


async def run_call(environment: QAEnvironment, name: str, arguments: dict[str, Any]) -> ToolResult:
    """A tool call in the session's current episode (off the event loop: the sandbox blocks), as MCP's result."""
    episode = environment.episode
    if episode is None:
        text, ok = "Error: no episode: reset the environment first", False
    else:
        text, ok = await asyncio.to_thread(episode.call, name, arguments)
    return ToolResult(content=[TextContent(type="text", text=text)], structured_content={"result": text},
                      is_error=not ok)


class SandboxTool(Tool):
    """One of the sample's tools on the session's MCP server: a call runs in the session's current episode."""

    _environment: QAEnvironment = PrivateAttr()

    @classmethod
    def of(cls, spec: dict, environment: QAEnvironment) -> SandboxTool:
        function = spec["function"]
        tool = cls(name=function["name"], description=function.get("description") or "",
                   parameters=function.get("parameters") or {"type": "object", "properties": {}},
                   output_schema=TEXT_RESULT)
        tool._environment = environment
        return tool

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        return await run_call(self._environment, self.name, arguments)


class UnlistedCalls(Middleware):
    """A call of a tool the sample does not have is the episode's call too (FastMCP would refuse it before any tool
    runs): the sandbox answers it with its unknown-tool error and it counts in the reward, as a policy's call of
    a tool that does not exist counts in F1's c wherever it is computed."""

    def __init__(self, environment: QAEnvironment):
        self.environment = environment

    async def on_call_tool(self, context: MiddlewareContext, call_next) -> ToolResult:
        episode = self.environment.episode
        if episode is not None and context.message.name not in episode.tool_names:
            return await run_call(self.environment, context.message.name, context.message.arguments or {})
        return await call_next(context)


# -- the OpenEnv environment --------------------------------------------------------------------------

class QAEnvironment(MCPEnvironment):
    """One OpenEnv session: an episode of a served sample at a time (see the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own sandbox episode; the pool is thread-safe

    def __init__(self, catalog: SampleCatalog, pool):
        super().__init__(FastMCP("astra-qaenv"))
        self.mcp_server.add_middleware(UnlistedCalls(self))
        self.catalog, self.pool = catalog, pool
        self.episode: SandboxEpisode | None = None
        self._episode_id: str | None = None
        self._steps = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, sample_id: str | None = None,
              index: int | None = None, **kwargs: Any) -> Observation:
        if kwargs:
            raise ValueError(f"unknown reset argument(s): {', '.join(sorted(kwargs))} (sample_id, index, seed, "
                             "episode_id)")
        sample = self.catalog.pick(sample_id, index)
        self._end_episode()
        self.episode = SandboxEpisode(sample, self.pool)
        self._episode_id, self._steps = episode_id, 0
        self._show_tools(sample["tools"])
        return Observation(done=False, reward=None, metadata={
            "sample_id": sample["id"], "messages": sample["messages"], "tools": sample["tools"],
            "reward_kind": sample["reward"]["kind"]})

    def _show_tools(self, tools: list[dict]) -> None:
        provider = self.mcp_server.local_provider
        for tool in self._get_server_tools(self.mcp_server):
            provider.remove_tool(tool)
        for spec in tools:
            self.mcp_server.add_tool(SandboxTool.of(spec, self))

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """Any action that is not an MCP one ends the episode; `action.metadata["answer"]` is the final answer."""
        if self.episode is None:
            raise RuntimeError("no episode: reset the environment first")
        answer = action.metadata.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise ValueError(f"metadata.answer must be text, got {type(answer).__name__}")
        reward, components = self.episode.finish(answer)
        return Observation(done=True, reward=reward, metadata={
            "sample_id": self.episode.sample["id"], "reward_components": components,
            "tool_calls": self.episode.calls})

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        self._steps += 1
        return await super().step_async(action, timeout_s=timeout_s, **kwargs)

    @property
    def state(self) -> State:
        episode = self.episode
        return State(episode_id=self._episode_id, step_count=self._steps,
                     sample_id=episode.sample["id"] if episode else None,
                     tool_calls=episode.calls if episode else 0, done=episode.done if episode else False)

    def _end_episode(self) -> None:
        if self.episode is not None:
            self.episode.done = True
            self.episode.close()

    def close(self) -> None:
        self._end_episode()
        super().close()


# -- serving ----------------------------------------------------------------------------------------------

def make_app(catalog: SampleCatalog, pool, max_sessions: int, session_timeout_s: float | None = None):
    """The FastAPI app of OpenEnv's HTTPEnvServer over our environment (/ws, /mcp, /reset, /step, /state,
    /health, /schema)."""
    return create_app(partial(QAEnvironment, catalog, pool), Action, Observation, env_name="astra-qaenv",
                      concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                           session_timeout=session_timeout_s))


class CannotListen(OSError):
    """The server's address cannot be bound (a port in use, a host not on this machine)."""


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (0 picks a free port), or CannotListen saying why in one line: bound before
    the samples load and the pool starts, so that a port in use is said at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=1024)
    except OSError as exc:
        hint = " (--port 0 picks a free port)" if exc.errno == errno.EADDRINUSE else ""
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None


def serve(samples: list[dict], config: ServeConfig, sock: socket.socket, port_file: str | None = None) -> None:
    """Serve `samples` on the listening socket until Ctrl-C or SIGTERM (uvicorn stops on both); the sandbox pool
    closes either way."""
    import uvicorn
    from astra_core.http_server import announce_port, base_url
    from astra_sandbox import SessionPool

    host, port = sock.getsockname()[:2]
    max_sessions = config.max_sessions or config.pool_size
    with SessionPool(size=config.pool_size, config=config.sandbox()) as pool:
        app = make_app(SampleCatalog(samples), pool, max_sessions, config.session_timeout_s)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        print(f"{COMMAND}: {len(samples)} samples at {base_url(host, port)} (OpenEnv /ws, /mcp, /reset, /step; "
              f"{max_sessions} sessions at once on {config.pool_size} sandbox workers)", file=sys.stderr)
        if port_file:
            announce_port(port_file, port)
        server.run(sockets=[sock])
