"""A scripted model behind a real OpenAI-compatible HTTP server, for parity runs against the benchmarks' own harnesses.

Every reply is a function of the request alone (no per-connection state), so astra-eval and the official
harness, sending the same requests, get the same replies whatever the concurrency. A *plan* assigns each
task (and tau2 trial seed) one behaviour:

- `none`: replay the ground truth, then say it is done;
- `drop`: leave out a ground-truth call (the task fails on its state);
- `malformed`: a tool call whose arguments are not JSON;
- `empty`: an assistant message with neither content nor tool calls;
- `http400`: the endpoint refuses the request (vLLM's context-length error);
- `loop`: call the same tool again and again, past the harness's step limit.

The server records every request (path and body); `take_requests()` returns them and starts a new log.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KINDS = ("none", "http400", "malformed", "empty", "loop", "drop")
REFUSAL = {"error": {"message": "This model's maximum context length is 40960 tokens. However, you requested "
                                "41234 tokens in the messages. Please reduce the length of the messages.",
                     "type": "BadRequestError", "param": None, "code": 400}}


@dataclass
class Refuse:
    """An HTTP error reply."""

    status: int = 400
    body: dict = field(default_factory=lambda: REFUSAL)


Reply = dict | Refuse


class ScriptedEndpoint:
    """A loopback OpenAI-compatible server: POST …/chat/completions answered by `reply(body)`."""

    def __init__(self, reply: Callable[[dict], Reply], models: tuple[str, ...] = ("scripted",)):
        self.reply, self.models = reply, models
        self._requests: list[tuple[str, dict]] = []
        self.crashes: list[str] = []  # the script's own failures (tests assert there are none)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.base_url = ""

    def take_requests(self) -> list[tuple[str, dict]]:
        with self._lock:
            taken, self._requests = self._requests, []
        return taken

    def __enter__(self) -> ScriptedEndpoint:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in endpoint.models]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with endpoint._lock:
                    endpoint._requests.append((self.path, body))
                try:
                    outcome = endpoint.reply(body)
                except Exception as exc:  # noqa: BLE001 - a bug in the script must show, not hang the client
                    endpoint.crashes.append(f"{self.path} {sorted(body)}: {exc!r}")
                    self._send(500, {"error": {"message": f"scripted model crashed: {exc!r}"}})
                    return
                if isinstance(outcome, Refuse):
                    self._send(outcome.status, outcome.body)
                    return
                self._send(200, completion(body, outcome))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def completion(body: dict, outcome: dict) -> dict:
    """A chat completion (or, for a `prompt` request, a text completion) carrying `outcome`."""
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if "prompt" in body:
        return {"id": "cmpl-scripted", "object": "text_completion", "model": body.get("model"), "created": 0,
                "choices": [{"index": 0, "text": outcome["text"], "finish_reason": "stop", "logprobs": None}],
                "usage": usage}
    message = {"role": "assistant", **outcome}
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {"id": "chatcmpl-scripted", "object": "chat.completion", "model": body.get("model"), "created": 0,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}], "usage": usage}


def tool_call(call_id: str, name: str, arguments: dict | str) -> dict:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


# -- BFCL: one model plays every entry ------------------------------------------------------------------

def bfcl_plan(entries: dict[str, dict]) -> dict[str, str]:
    """First user message -> behaviour, cycling through KINDS in entry order (entries sharing their first
    message, e.g. a base entry and its long-context twin, share the behaviour)."""
    plan: dict[str, str] = {}
    for entry in entries.values():
        plan.setdefault(entry["first_message"], KINDS[len(plan) % len(KINDS)])
    return plan


class BFCLModel:
    """Replays an entry's ground truth as OpenAI tool calls (all of a turn's calls in one step, then text);
    the behaviour of the plan applies at the entry's first turn that has calls. Every reply carries
    `reasoning_content`, so the history shows whether a harness sends reasoning back.

    The entry is the first one whose user turns begin like the request's (entries share first messages:
    a base entry, its long-context twin, its miss_func variant with a turn more, whose held-out turn's
    message each handler writes its own way)."""

    def __init__(self, entries: dict[str, dict], plan: dict[str, str]):
        self.plan = plan
        self.entries = list(entries.values())

    def entry(self, messages: list[dict]) -> dict:
        said = [m["content"] for m in messages if m["role"] == "user"]
        entry = next((e for e in self.entries if len(e["user_turns"]) >= len(said) and all(
            expected is None or expected == got for expected, got in zip(e["user_turns"], said, strict=False))), None)
        if entry is None:
            raise LookupError(f"no entry's user turns begin with {said}")
        return entry

    def __call__(self, body: dict) -> Reply:
        if "prompt" in body:
            return self.completion(body)
        return self.chat(body["messages"], body["tools"])

    def completion(self, body: dict) -> Reply:
        """The same script for a handler that writes Qwen's prompt itself: the reply as Qwen's text."""
        messages, tools = qwen_prompt_messages(body["prompt"])
        outcome = self.chat(messages, tools)
        if isinstance(outcome, Refuse):
            return outcome
        text = f"<think>\n{outcome['reasoning_content']}\n</think>\n\n"
        for call in outcome.get("tool_calls") or []:
            arguments = call["function"]["arguments"]
            text += f'<tool_call>\n{{"name": "{call["function"]["name"]}", "arguments": {arguments}}}\n</tool_call>\n'
        return {"text": text + (outcome.get("content") or "")}

    def chat(self, messages: list[dict], tools: list[dict]) -> Reply:
        entry = self.entry(messages)
        turns, kind = entry["ground_truth"], self.plan[messages[0]["content"]]
        turn = sum(m["role"] == "user" for m in messages) - 1
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        step = sum(m["role"] == "assistant" for m in messages[last_user:])
        thought = {"reasoning_content": f"turn {turn}, step {step}"}
        calls = [call_parts(text, tools) for text in turns[turn]]
        target = next((i for i, t in enumerate(turns) if t), None)
        if turn == target and kind != "none":
            if kind == "http400":
                return Refuse()
            if kind == "empty":
                return {"content": "", **thought}
            if kind == "malformed" and step == 0:
                return {"content": None, "tool_calls": [tool_call(f"c{turn}_0", calls[0][0], '{"broken": ')],
                        **thought}
            if kind == "loop":
                return {"content": None, "tool_calls": [tool_call(f"c{turn}_{step}", *calls[0])], **thought}
            if kind == "drop" and step == 0:
                calls = calls[:-1]
        if step > 0 or not calls:
            return {"content": "Done.", **thought}
        return {"content": None, "tool_calls": [tool_call(f"c{turn}_{i}", name, args)
                                                for i, (name, args) in enumerate(calls)], **thought}


def call_parts(text: str, tools: list[dict]) -> tuple[str, dict]:
    """'cd(folder="x")' or 'cd("x")' -> ("cd", {"folder": "x"}), positional arguments in the tool's order."""
    import ast

    node = ast.parse(text, mode="eval").body
    functions = [t.get("function", t) for t in tools]  # OpenAI tools, or BFCL's raw function docs
    order = {f["name"]: list(f["parameters"]["properties"]) for f in functions}
    names = order.get(node.func.id, []) + [f"arg{i}" for i in range(len(node.args))]
    arguments = {names[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return node.func.id, arguments


QWEN_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?=<\|im_end\|>|\Z)", re.DOTALL)


def qwen_prompt_messages(prompt: str) -> tuple[list[dict], list[dict]]:
    """(messages without the system one, tools) read back from a Qwen chat-format prompt."""
    messages, tools = [], []
    for role, content in QWEN_TURN.findall(prompt):
        if role == "system":
            block = content.split("<tools>\n", 1)[-1].split("\n</tools>", 1)[0]
            tools = [json.loads(line) for line in block.splitlines() if line.strip()]
        elif role == "user" and content.startswith("<tool_response>"):
            messages.append({"role": "tool", "content": content})
        elif content or role != "assistant":
            messages.append({"role": role, "content": content})
    return messages, tools


# -- tau2: a scripted agent and a scripted user on one server -------------------------------------------

TASK_MARK = re.compile(r"\[task (\w+)\|([^\]]+)\]")


def tau2_plan(tasks: dict[str, dict[str, dict]], seeds: list[int]) -> dict[tuple[str, int], str]:
    """(domain|task, trial seed) -> behaviour, cycling through KINDS over tasks and trials."""
    keys = [f"{domain}|{task}" for domain, by_id in tasks.items() for task in by_id]
    return {(key, seed): KINDS[(index + trial) % len(KINDS)] for index, key in enumerate(keys)
            for trial, seed in enumerate(seeds)}


class Tau2Model:
    """Model `agent` replays the task's ground-truth actions one per step, then reports the information the
    task expects; model `user` asks for help naming the task, and stops once the agent says it is done."""

    def __init__(self, tasks: dict[str, dict[str, dict]], plan: dict[tuple[str, int], str]):
        self.tasks, self.plan = tasks, plan
        self.scenarios = [(task["scenario"], domain, task_id) for domain, by_id in tasks.items()
                          for task_id, task in by_id.items()]

    def __call__(self, body: dict) -> Reply:
        return self.agent(body) if body.get("tools") and body["model"].endswith("agent") else self.user(body)

    def user(self, body: dict) -> Reply:
        system = body["messages"][0]["content"]
        domain, task_id = next((d, t) for scenario, d, t in self.scenarios if scenario in system)
        last = body["messages"][-1].get("content") or ""
        if len(body["messages"]) <= 2:
            return {"content": f"Hi, I need help with [task {domain}|{task_id}]."}
        return {"content": "###STOP###" if "Done." in last else "Please go on."}

    def agent(self, body: dict) -> Reply:
        messages = body["messages"]
        opening = next(m["content"] for m in messages if m["role"] == "user")
        domain, task_id = TASK_MARK.search(opening).groups()
        task = self.tasks[domain][task_id]
        kind = self.plan.get((f"{domain}|{task_id}", body.get("seed")), "none")
        actions = task["actions"]
        done = sum(len(m.get("tool_calls") or []) for m in messages if m["role"] == "assistant")
        call_id = f"call_{done}"
        if kind == "http400":
            return Refuse()
        if kind == "empty" and done == 0:
            return {"content": ""}
        if kind == "malformed" and done == 0 and actions:
            return {"content": None, "tool_calls": [tool_call(call_id, actions[0]["name"], '{"oops": ')]}
        if kind == "loop":
            if actions:
                return {"content": None, "tool_calls": [tool_call(call_id, actions[0]["name"],
                                                                  actions[0]["arguments"])]}
            return {"content": "Let me look into that."}
        if kind == "drop":
            actions = actions[:-1]
        if done < len(actions):
            action = actions[done]
            return {"content": None, "tool_calls": [tool_call(call_id, action["name"], action["arguments"])]}
        return {"content": "Done. " + " ".join(task["info"])}
