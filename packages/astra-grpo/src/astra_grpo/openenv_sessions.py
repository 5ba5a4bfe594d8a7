"""GRPO episodes against OpenEnv environment servers: samples whose environment is `{"openenv": {...}}`.

    {"environment": {"openenv": {"base_url": "http://127.0.0.1:8000", "reset": {"sample_id": "x"}, "finish": true}}}

Such a sample is played through OpenEnv's own client (`MCPToolClient`, the `openenv` extra), whoever made the
environment (`astra-qaenv serve-openenv`, an environment of the OpenEnv hub, one written with `MCPEnvironment`):

- one OpenEnv session per episode, opened at its first tool call and reset with the sample's `reset` arguments;
- each tool call is a `step(CallToolAction)` over the session's WebSocket (OpenEnv's training loop, which carries
  rewards); the observation is the tool's result, or `Error: ...` for the environment's tool error;
- the prompt and the tools the policy sees are the sample's own `messages` and `tools`;
- an environment that says done ends the episode (`finish_reason: env_done`);
- the reward is ours (F1 over the sample's `job`, computed in-process from the conversation as for any sample) or,
  with `reward.kind: openenv` (or `--reward openenv`), the environment's: the sum of its steps' rewards, plus, with
  `finish`, that of a closing step `Action(metadata={"answer": the policy's final answer})`, which is where
  `astra-qaenv serve-openenv` scores an episode (its reward components come back in the closing metadata);
- a server that cannot be reached, a session that breaks (the server killed mid-episode) or a message unanswered
  within `openenv_timeout_s` ends that episode with the reason (`finish_reason: error`); the run goes on.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass


class OpenEnvError(RuntimeError):
    """The OpenEnv server could not be reached, or the session broke."""


@dataclass
class CallResult:
    """A tool call's outcome in the shape the episode runner reads (astra-sandbox's ToolResult)."""

    output: str
    ok: bool
    kind: str = "ok"  # ok | error (the environment answered with a tool error)


class OpenEnvSession:
    """One episode's session on an OpenEnv server: reset at opening, then tool calls as steps. `rewards` holds the
    reward of the reset and of every step (None where the environment gave none)."""

    def __init__(self, spec: dict, timeout_s: float):
        from openenv.core.mcp_client import MCPToolClient

        self.base_url = spec["base_url"]
        self.client = MCPToolClient(base_url=self.base_url, connect_timeout_s=timeout_s,
                                    message_timeout_s=timeout_s).sync()
        self.rewards: list[float | None] = []  # each step's reward (None: the environment gave none)
        self.done = False
        self.closing: dict | None = None  # the closing step's observation metadata (`finish`)
        try:
            self.client.connect()
            self._took(self.client.reset(**(spec.get("reset") or {})))
        except Exception as exc:
            self.close()
            raise self._broken("reset", exc) from exc

    def _broken(self, what: str, exc: Exception) -> OpenEnvError:
        return OpenEnvError(f"OpenEnv server {self.base_url}: {what}: {type(exc).__name__}: {exc}")

    def _took(self, result) -> None:
        self.rewards.append(None if result.reward is None else float(result.reward))
        self.done = self.done or bool(result.done)

    def _step(self, action, what: str):
        try:
            result = self.client.step(action)
        except Exception as exc:
            raise self._broken(what, exc) from exc
        self._took(result)
        return result

    def call(self, name: str, arguments: dict | str | None) -> CallResult:
        from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

        if not isinstance(arguments, dict):
            return CallResult("Error: the arguments are not a JSON object", False, "error")
        if self.done:
            return CallResult("Error: the environment has ended the episode", False, "error")
        observation = self._step(CallToolAction(tool_name=name, arguments=arguments), f"calling {name}").observation
        if not isinstance(observation, CallToolObservation):
            # a plain Observation from the tool (finqa's submit_answer): OpenEnv's client makes it a
            # GenericMCPObservation, with no `result`; its text is its own fields, its reward and done are the step's
            return CallResult(observation_text(observation), True, "ok")
        if getattr(observation, "error", None) is not None:
            message = observation.error.message
            return CallResult(message if message.startswith("Error") else f"Error: {message}", False, "error")
        result = getattr(observation, "result", None)
        text = result_text(result)
        failed = isinstance(result, dict) and bool(result.get("is_error"))
        return CallResult(text, not failed, "error" if failed else "ok")

    def finish(self, answer: str | None) -> None:
        """The closing step: `Action(metadata={"answer": answer})` (no answer: empty metadata)."""
        from openenv.core.env_server.types import Action

        if self.done:
            return
        result = self._step(Action(metadata={} if answer is None else {"answer": answer}), "closing step")
        self.closing = result.observation.metadata

    @property
    def reward(self) -> float:
        return sum(reward for reward in self.rewards if reward is not None)

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001, S110 - a server that is gone has nothing to close
            pass


def result_text(result) -> str:
    """An MCP tool result as the observation text: its data (FastMCP's unwrapped value), else its text content."""
    if not isinstance(result, dict):
        return "" if result is None else str(result)
    data = result.get("data")
    if isinstance(data, str):
        return data
    if data is not None:
        return json.dumps(data, ensure_ascii=False, default=str)
    return "\n".join(part.get("text", "") for part in result.get("content") or [] if isinstance(part, dict))


def observation_text(observation) -> str:
    """A generic observation (no MCP `result`) as the observation text: its environment-specific fields, else its
    metadata, as JSON (empty when it has neither)."""
    fields = dict(getattr(observation, "model_extra", None) or {})
    if not fields and getattr(observation, "metadata", None):
        fields = dict(observation.metadata)
    if not fields:
        return ""
    return json.dumps(fields, ensure_ascii=False, default=str)


class OpenEnvPool:
    """Sessions on OpenEnv servers for the episode runner: `with pool.session(spec) as session` (the interface of
    the sandbox's SessionPool and the tau2 pool)."""

    def __init__(self, timeout_s: float = 60.0):
        self.timeout_s = timeout_s

    @contextlib.contextmanager
    def session(self, spec: dict) -> Iterator[OpenEnvSession]:
        session = OpenEnvSession(spec, self.timeout_s)
        try:
            yield session
        finally:
            session.close()

    def __enter__(self) -> OpenEnvPool:
        return self

    def __exit__(self, *exc_info) -> None:
        pass


def openenv_reward(pool: OpenEnvPool, sample: dict, messages: list[dict],
                   session: OpenEnvSession | None = None) -> tuple[float, dict]:
    """(reward, components) of a finished episode by the environment: the sum of its steps' rewards, the closing
    step's included when the sample asks for one (`finish`). An episode that never called a tool gets a session
    here only for that closing step."""
    from astra_reward.conversation import final_answer

    spec = sample["environment"]["openenv"]
    if session is None:  # never reached the server: its reward is the reset's, or the reason it has none
        with pool.session(spec) as fresh:
            return openenv_reward(pool, sample, messages, fresh)
    if spec.get("finish"):
        session.finish(final_answer(messages))
    components = {"kind": "openenv", "step_rewards": session.rewards, "done": session.done}
    if session.closing is not None:
        components["closing"] = session.closing
    return session.reward, components
