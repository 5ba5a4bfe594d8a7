"""GRPO episodes against OpenEnv environment servers: samples whose environment is `{"openenv": {...}}`.

    {"environment": {"openenv": {"base_url": "http://127.0.0.1:8000", "reset": {"seed": 3},
                                 "task": "{{ context }}\n\nQuestion: {{ question }}", "finish": "llm_response"}}}

Such a sample is played through OpenEnv's own clients (the `openenv` extra), whoever made the environment
(`astra-qaenv serve-openenv`, an environment of the OpenEnv hub, one written with `MCPEnvironment` or `Environment`):

- before a run plays anything, each server is asked once for its `/schema` and, for samples with tools, its
  `tools/list` after a reset with the sample's arguments; a sample whose server cannot be reached, lacks one of its tools or gives it another schema, or
  cannot take its `finish`, is rejected with the reason (`OpenEnvPool.check`);
- one OpenEnv session per episode, opened and reset (with the sample's `reset` arguments) before its first turn:
  MCP's client (`MCPToolClient`) for a sample with tools, the generic one (`GenericEnvClient`) for one without;
- the reset's observation can put the environment's task into the prompt: `task` is a Jinja template over the
  reset observation's fields (its environment-specific ones such as `question`, `metadata`, and `text`: the
  observation as a tool observation would read); the rendered task ends the prompt, appended to its last user
  message after a blank line (or as a user message when the prompt does not end with one). A server that picks its
  task at reset gives each episode its own: reset arguments that fix it (a seed, an id) keep a group on one task;
- each tool call is a `step(CallToolAction)` over the session's WebSocket (OpenEnv's training loop, which carries
  rewards). Every observation shape its clients return is read: an MCP tool result (its data, else its text
  content), an MCP tool error (`Error: ...`), a plain observation (GenericMCPObservation without a result, finqa's
  `submit_answer`; a dict from the generic client): its own fields as JSON, else its metadata. Every step's reward
  and done are kept, whatever the shape;
- an environment that says done ends the episode (`finish_reason: env_done`);
- the reward is ours (F1 over the sample's `job`, computed in-process from the conversation as for any sample) or,
  with `reward.kind: openenv` (or `--reward openenv`), the environment's: the sum of its steps' rewards, plus, with
  `finish`, that of a closing step carrying the policy's final answer: `finish: true` sends
  `Action(metadata={"answer": ...})`, where `astra-qaenv serve-openenv` scores an episode; `finish: "FIELD"` sends
  the server's own action with the answer in FIELD (`llm_response` for DIPG, `message` for `openenv init`'s echo);
- a server that cannot be reached at reset, a session that breaks (the server killed mid-episode) or a message
  unanswered within `openenv_timeout_s` ends that episode with the reason (`finish_reason: error`), whatever the
  policy did; the run goes on.
"""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

from astra_core.schema import RecordError


class OpenEnvError(RuntimeError):
    """The OpenEnv server could not be reached, or the session broke."""


class TaskError(RuntimeError):
    """The sample's `task` template could not be rendered from what the reset returned."""


@dataclass
class CallResult:
    """A tool call's outcome in the shape the episode runner reads (astra-sandbox's ToolResult)."""

    output: str
    ok: bool
    kind: str = "ok"  # ok | error (the environment answered with a tool error)


class ActionPayload:
    """An action of the server's own type, as JSON: OpenEnv's clients send `model_dump()` of an action they do not
    know, and the server validates it against its action class."""

    def __init__(self, payload: dict):
        self.payload = payload

    def model_dump(self) -> dict:
        return dict(self.payload)


class OpenEnvSession:
    """One episode's session on an OpenEnv server, reset when it opens, then tool calls as steps. `rewards` holds the
    reward of the reset and of every step (None where the environment gave none); `opening` is the reset's
    observation."""

    def __init__(self, spec: dict, timeout_s: float, *, tools: bool = True):
        self.base_url = spec["base_url"]
        self.finish_field = spec.get("finish")
        self.client = _client(self.base_url, timeout_s, mcp=tools)
        self.rewards: list[float | None] = []  # each step's reward (None: the environment gave none)
        self.done = False
        self.closing: dict | None = None  # the closing step's observation (`finish`): its metadata and fields
        try:
            self.client.connect()
            result = self.client.reset(**(spec.get("reset") or {}))
        except Exception as exc:
            self.close()
            raise self._broken("reset", exc) from exc
        self.opening = result.observation
        self._took(result)

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

    def task(self, template: str) -> str:
        """The sample's `task` template rendered over the reset observation's fields."""
        import jinja2

        fields = {"metadata": {}, **observation_fields(self.opening), "text": observation_text(self.opening)}
        try:
            return compile_task(template).render(**fields)
        except jinja2.UndefinedError as exc:
            raise TaskError(f"environment.openenv.task: {exc} in the reset of {self.base_url} (it gave: "
                            f"{', '.join(sorted(fields))})") from exc

    def call(self, name: str, arguments: dict | str | None, call_id: str = "") -> CallResult:
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
        if observation.error is not None:
            message = observation.error.message
            return CallResult(message if message.startswith("Error") else f"Error: {message}", False, "error")
        text = result_text(observation.result)
        failed = isinstance(observation.result, dict) and bool(observation.result.get("is_error"))
        return CallResult(text, not failed, "error" if failed else "ok")

    def finish(self, answer: str | None) -> None:
        """The closing step with the final answer: `Action(metadata={"answer": answer})` (`finish: true`; no
        answer: empty metadata), or the server's own action with the answer in the field `finish` names."""
        if self.done:
            return
        if self.finish_field is True:
            payload = {"metadata": {} if answer is None else {"answer": answer}}
        else:
            payload = {self.finish_field: answer or ""}
        fields = observation_fields(self._step(ActionPayload(payload), "closing step").observation)
        self.closing = {**(fields.pop("metadata", None) or {}), **fields}  # what the server said of the answer

    @property
    def reward(self) -> float:
        return sum(reward for reward in self.rewards if reward is not None)

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001, S110 - a server that is gone has nothing to close
            pass


def _client(base_url: str, timeout_s: float, *, mcp: bool):
    """OpenEnv's MCP client for an environment with tools, its generic client (plain JSON actions and observations)
    for one the policy only answers: MCP's client opens an HTTP MCP session beside the WebSocket, which a server
    that is no MCP environment counts as a second session."""
    if mcp:
        from openenv.core.mcp_client import MCPToolClient

        return MCPToolClient(base_url=base_url, connect_timeout_s=timeout_s, message_timeout_s=timeout_s).sync()
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient(base_url=base_url, connect_timeout_s=timeout_s, message_timeout_s=timeout_s).sync()


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


def observation_fields(observation) -> dict:
    """An observation's own fields and its metadata (not done and reward), whichever client made it: a pydantic
    observation (typed, or GenericMCPObservation with the environment's fields as extras) or a dict."""
    if observation is None:
        return {}
    if isinstance(observation, dict):
        fields = dict(observation)
    else:
        fields = observation.model_dump()
    for key in ("done", "reward"):
        fields.pop(key, None)
    return fields


def observation_text(observation) -> str:
    """A generic observation (no MCP `result`) as the observation text: its environment-specific fields, else its
    metadata, as JSON (empty when it has neither)."""
    fields = observation_fields(observation)
    metadata = fields.pop("metadata", None) or {}
    shown = fields or metadata
    return json.dumps(shown, ensure_ascii=False, default=str) if shown else ""


_templates = threading.local()


def compile_task(template: str):
    """The `task` template, compiled in a sandboxed Jinja environment (a field the reset lacks is an error, not an
    empty string); TemplateSyntaxError for a template that is none. (Jinja comes with torch, which astra-grpo
    requires.)"""
    import jinja2.sandbox

    cache = _templates.__dict__.setdefault("compiled", {})
    if template not in cache:
        environment = jinja2.sandbox.SandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        cache[template] = environment.from_string(template)
    return cache[template]


def with_task(messages: list[dict], task: str) -> list[dict]:
    """The prompt with the reset's task at its end: appended to a final user message after a blank line, else as a
    user message of its own."""
    messages = [dict(m) for m in messages]
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "user" and isinstance(last.get("content"), str):
        last["content"] = f"{last['content']}\n\n{task}" if last["content"] else task
    else:
        messages.append({"role": "user", "content": task})
    return messages


# -- what a server is, asked once per run --------------------------------------------------------------------------
@dataclass
class Server:
    """What an OpenEnv server says of itself: its action's JSON schema (GET /schema), its tools after a reset with
    given arguments (tools/list: a server may give each task its own tools, as `astra-qaenv serve-openenv` does), or
    why it could not be asked."""

    base_url: str
    action: dict | None = None
    unreachable: str | None = None
    tools: dict[str, tuple[dict[str, dict] | None, str | None]] = field(default_factory=dict)  # by reset: listed, why not
    lock: threading.Lock = field(default_factory=threading.Lock)


def http_url(base_url: str) -> str:
    for scheme, http in (("wss://", "https://"), ("ws://", "http://")):
        if base_url.startswith(scheme):
            return http + base_url[len(scheme):]
    return base_url.rstrip("/")


def schema_difference(ours: dict, theirs: dict) -> str | None:
    """How a sample's tool parameters differ from the server's input schema: their names, which are required, the
    type of each; None when they agree."""
    our_properties, their_properties = ours.get("properties") or {}, theirs.get("properties") or {}
    if set(our_properties) != set(their_properties):
        return f"parameters {sorted(our_properties)} here, {sorted(their_properties)} on the server"
    our_required, their_required = set(ours.get("required") or []), set(theirs.get("required") or [])
    if our_required != their_required:
        return f"required {sorted(our_required)} here, {sorted(their_required)} on the server"
    for name, ours_of in our_properties.items():
        our_type, their_type = ours_of.get("type"), their_properties[name].get("type")
        if our_type and their_type and our_type != their_type:
            return f"parameter {name!r} is {our_type} here, {their_type} on the server"
    return None


def finish_problem(finish, action: dict) -> str | None:
    """Why the server's action (its JSON schema) cannot carry the closing step `finish` asks for; None when it can."""
    properties = action.get("properties") or {}
    required = set(action.get("required") or [])
    title = action.get("title") or "its action"
    answer_fields = sorted(name for name in required if (properties.get(name) or {}).get("type") == "string")
    if finish is True:
        others = required - {"metadata"}
        if not others:
            return None
        hint = f' (finish: "{answer_fields[0]}")' if len(others) == 1 and answer_fields else ""
        return (f"the closing step Action(metadata={{'answer': ...}}) is not an action of this server: its action "
                f"{title} requires {sorted(others)}; name the field that takes the answer{hint} or leave finish out")
    if finish not in properties:
        return f"the server's action {title} has no field {finish!r} (its fields: {', '.join(sorted(properties))})"
    if (properties[finish].get("type") or "string") != "string":
        return f"the field {finish!r} of the server's action {title} is {properties[finish]['type']}, not a string"
    others = required - {finish, "metadata"}
    if others:
        return f"the server's action {title} also requires {sorted(others)}, which the closing step cannot fill"
    return None


class OpenEnvPool:
    """Sessions on OpenEnv servers for the episode runner: `with pool.session(spec) as session` (the interface of
    the sandbox's SessionPool and the tau2 pool), and `check(sample)` before a sample is played."""

    def __init__(self, timeout_s: float = 60.0):
        self.timeout_s = timeout_s
        self._servers: dict[str, Server] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def session(self, spec: dict, *, tools: bool = True) -> Iterator[OpenEnvSession]:
        session = OpenEnvSession(spec, self.timeout_s, tools=tools)
        try:
            yield session
        finally:
            session.close()

    def __enter__(self) -> OpenEnvPool:
        return self

    def __exit__(self, *exc_info) -> None:
        pass

    # -- checks before anything is played ------------------------------------------------------------------------
    def check(self, sample: dict) -> None:
        """RecordError naming the field unless the sample can be played on its server: the server answers, lists
        every tool of the sample with the same parameters, and takes the closing step `finish` asks for. Each
        server is asked once per run."""
        import jinja2

        spec = sample["environment"]["openenv"]

        def bad(where: str, message: str) -> RecordError:
            return RecordError(message, record_id=sample.get("id"), field=where)

        if "task" in spec:
            try:
                compile_task(spec["task"])
            except jinja2.TemplateSyntaxError as exc:
                raise bad("environment.openenv.task", f"not a Jinja template: {exc}") from None
        server = self._server(spec["base_url"])
        if server.unreachable:
            raise bad("environment.openenv.base_url", server.unreachable)
        if sample["tools"]:
            self._check_tools(sample, server, bad)
        if spec.get("finish"):
            problem = finish_problem(spec["finish"], server.action)
            if problem:
                raise bad("environment.openenv.finish", f"OpenEnv server {server.base_url}: {problem}")

    def _check_tools(self, sample: dict, server: Server, bad) -> None:
        listed, why = self._tools(server, sample["environment"]["openenv"].get("reset") or {})
        if listed is None:
            raise bad("tools", f"OpenEnv server {server.base_url} lists no tools ({why}); a sample without tools "
                               "plays it through finish")
        for index, tool in enumerate(sample["tools"]):
            name = tool["function"]["name"]
            if name not in listed:
                raise bad(f"tools[{index}].function.name", f"OpenEnv server {server.base_url} has no tool {name!r} "
                                                          f"(it lists: {', '.join(sorted(listed)) or 'none'})")
            difference = schema_difference(tool["function"].get("parameters") or {}, listed[name])
            if difference:
                raise bad(f"tools[{index}].function.parameters",
                          f"tool {name!r} differs from OpenEnv server {server.base_url}'s: {difference}")

    def _server(self, base_url: str) -> Server:
        with self._lock:
            known = self._servers.get(base_url)
            if known is None:
                server = self._servers[base_url] = Server(base_url)
                server.lock.acquire()  # asked below, outside the pool's lock
        if known is not None:
            with known.lock:  # a second asker waits for the first one's answer
                return known
        try:
            with urllib.request.urlopen(f"{http_url(base_url)}/schema", timeout=self.timeout_s) as response:
                server.action = json.load(response)["action"]
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, the samples on it are rejected with it
            server.unreachable = f"OpenEnv server {base_url} cannot be asked for its schema: {type(exc).__name__}: {exc}"
        finally:
            server.lock.release()
        return server

    def _tools(self, server: Server, reset: dict) -> tuple[dict[str, dict] | None, str | None]:
        key = json.dumps(reset, sort_keys=True, default=str)
        with server.lock:
            if key not in server.tools:
                server.tools[key] = self._list_tools(server.base_url, reset)
            return server.tools[key]

    def _list_tools(self, base_url: str, reset: dict) -> tuple[dict[str, dict] | None, str | None]:
        """tools/list in a session reset as the sample's episodes will be: {name: input schema}, or None and why."""
        from openenv.core.mcp_client import MCPToolClient

        client = MCPToolClient(base_url=base_url, connect_timeout_s=self.timeout_s,
                               message_timeout_s=self.timeout_s).sync()
        try:
            client.connect()
            client.reset(**reset)
            tools = client.list_tools(use_cache=False)
        except Exception as exc:  # noqa: BLE001
            return None, f"reset and tools/list: {type(exc).__name__}: {exc}"
        finally:
            with contextlib.suppress(Exception):
                client.close()
        if not tools:
            return None, "tools/list gave none: not an MCP environment?"
        return {tool.name: tool.input_schema or {} for tool in tools}, None


def openenv_reward(sample: dict, messages: list[dict], session: OpenEnvSession | None) -> tuple[float, dict]:
    """(reward, components) of a finished episode by the environment: the sum of its steps' rewards, the closing
    step's included when the sample asks for one (`finish`)."""
    from astra_reward.conversation import final_answer

    if session is None:  # (an episode whose session did not open ended in an error before it was scored)
        raise OpenEnvError(f"sample {sample['id']}: the episode has no OpenEnv session to be scored by")
    if sample["environment"]["openenv"].get("finish"):
        session.finish(final_answer(messages))
    components = {"kind": "openenv", "step_rewards": session.rewards, "done": session.done}
    if session.closing is not None:
        components["closing"] = session.closing
    return session.reward, components
