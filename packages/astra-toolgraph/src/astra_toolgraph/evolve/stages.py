"""What each `astra-toolgraph evolve` command does to one record (AReaL-SEA §4), and the files it joins.

One config, `EvolveCommandConfig`, serves every command (each shows the flags it uses), so one YAML
file can configure a whole run: `astra-toolgraph evolve tasks --config evolve.yaml ...`.
"""

from __future__ import annotations

import contextlib
import functools
import json
from dataclasses import dataclass
from pathlib import Path

from astra_core.command import side_records
from astra_core.config import knob
from astra_core.stage import Rejected, StageError

from astra_toolgraph.evolve.config import EvolveConfig
from astra_toolgraph.evolve.plans import AgentFailed

# -- input shapes: what a record must carry, typed (a wrong type is a reject naming the field, never an error) --

_SCHEMAS = "https://astra-toolkit.dev/schemas/"
_STRING = {"type": "string"}
_STRINGS = {"type": "array", "items": _STRING}
_USER = {"$ref": _SCHEMAS + "common.json#/$defs/user_profile"}
# A verdict: `verdict` is what every reader reads; reflect also reads a failure's rationale and, for a
# trajectory, its TASK/TRAJECTORY attribution.
_VERIFICATION = {"type": "object", "required": ["verdict"],
                 "properties": {"verdict": _STRING, "rationale": _STRING, "attribution": _STRING}}
_REASONED_VERIFICATION = {**_VERIFICATION, "required": ["verdict", "rationale"]}
_ATTRIBUTED_VERIFICATION = {**_VERIFICATION, "required": ["verdict", "rationale", "attribution"]}
_ACTION = {"type": "object", "required": ["name"],
           "properties": {"name": _STRING, "arguments": {"type": ["object", "null"]}}}
_REPLAY_STEP = {"type": "object", "required": ["name", "arguments", "ok", "observation"],
                "properties": {"name": _STRING, "arguments": {"type": "object"}, "ok": {"type": "boolean"},
                               "observation": _STRING}}
_SYNTHESIS = {"type": "object", "properties": {"replay": {"type": "array", "items": _REPLAY_STEP},
                                               "changes_state": {"type": "boolean"}}}
_STATE_CHECK = {"type": "object", "required": ["reward", "diff"],
                "properties": {"reward": {"type": "number"}, "diff": {"type": "array"},
                               "answer_given": {"type": "boolean"}}}
# The fields of an engine task and trajectory the evolve commands read, typed; each shape below requires
# what its command cannot do without.
_TASK_FIELDS = {"user": _USER, "expected_state": {"type": "object"}, "ignore_fields": _STRINGS,
                "verification": _VERIFICATION, "plan_id": _STRING, "specification": _STRING,
                "expected_answer": _STRING, "expected_actions": {"type": "array", "items": _ACTION},
                "synthesis": _SYNTHESIS}
# (a trajectory's `user` is typed by trajectory.json itself)
_TRAJECTORY_FIELDS = {"plan_id": {"type": ["string", "null"]}, "user_stop": {"type": ["string", "null"]},
                      "state_check": _STATE_CHECK, "verification": _VERIFICATION}

DOMAIN_RECORD = {
    "title": "domain",
    "description": "A domain to synthesize for: an environment (astra-sandbox) or a tool_server (MCP) record.",
    "type": "object",
    "required": ["id", "tools"],
    "properties": {"id": _STRING, "tools": {"type": "array", "items": {"$ref": _SCHEMAS + "common.json#/$defs/tool"}},
                   "code": _STRING, "requirements": _STRINGS,
                   "transport": {"$ref": _SCHEMAS + "tool_server.json#/properties/transport"}, "state_tool": _STRING,
                   "description": _STRING, "example_tasks": _STRINGS},
}
ENGINE_TASK = {
    "title": "task",
    "description": "A task of the engine (its plan, specification, expected answer, verdict, ... typed): what "
                   "verify joins to its trajectories.",
    "allOf": [{"$ref": _SCHEMAS + "task.json"}],
    "properties": _TASK_FIELDS,
}
CHECKABLE_TASK = {
    **ENGINE_TASK,
    "description": "A task to verify: hand-written (user, expected actions, replayed with --domains) or "
                   "synthesized (its expected state with the replay that gave it): what verify-tasks reads.",
    "required": ["user"],
    "if": {"required": ["expected_state"]},
    "then": {"required": ["synthesis"], "properties": {"synthesis": {**_SYNTHESIS, "required": ["replay",
                                                                                              "changes_state"]}}},
}
PLAYABLE_TASK = {
    **ENGINE_TASK,
    "description": "A task of the engine with its user simulator profile (and, once verified, its expected final "
                   "state and verdict): what rollout plays.",
    "required": ["user"],
}
VERIFIED_TASK = {**PLAYABLE_TASK, "required": ["user", "expected_state"],
                 "description": "A verified task of the engine: user simulator profile, expected final state and "
                                "verdict (what export-rl exports)."}
REFLECTED_TASK = {**ENGINE_TASK, "properties": {**_TASK_FIELDS, "verification": _REASONED_VERIFICATION},
                  "description": "A task of the engine with its verdict and rationale (once verified): what "
                                 "reflect reads of --tasks."}
ENGINE_TRAJECTORY = {
    "title": "trajectory",
    "description": "A trajectory of the engine (its task, plan, user simulator, stop token, check, verdict typed).",
    "allOf": [{"$ref": _SCHEMAS + "trajectory.json"}],
    "properties": _TRAJECTORY_FIELDS,
}
USER_SIDE_TRAJECTORY = {
    **ENGINE_TRAJECTORY,
    "description": "A trajectory played with the user simulator: its profile, stop token and verdict.",
}
CHECKED_TRAJECTORY = {
    **ENGINE_TRAJECTORY,
    "description": "A trajectory rollout played and checked: its task and final-state check (what verify judges).",
    "required": ["task_id", "state_check"],
    "properties": {**_TRAJECTORY_FIELDS, "task_id": _STRING},
}
REFLECTED_TRAJECTORY = {
    **ENGINE_TRAJECTORY,
    "description": "A trajectory with its verdict, rationale and attribution (once verified): what reflect reads "
                   "of --trajectories.",
    "properties": {**_TRAJECTORY_FIELDS, "verification": _ATTRIBUTED_VERIFICATION},
}


@dataclass
class EvolveCommandConfig(EvolveConfig):
    domains: list[str] = knob([], "Domain records: environment (astra-sandbox) or tool_server (MCP) records "
                                  "(repeatable).", path=True)
    sandbox_jail: bool = knob(True, "Run environment code in nsjail (--no-sandbox-jail: development only, not "
                                    "isolated).")
    plan_files: list[str] = knob([], "plan records the inputs refer to (repeatable).", flag="plans", path=True)
    task_files: list[str] = knob([], "task records the inputs refer to (repeatable).", flag="tasks", path=True)
    trajectory_files: list[str] = knob([], "trajectory records (repeatable).", flag="trajectories", path=True)
    tasks_out: str | None = knob(None, "Write every synthesized task (with its verdict) of every iteration here.", path=True)
    trajectories_out: str | None = knob(None, "Write every trajectory (with check, verdict and attribution) of "
                                              "every iteration here.", path=True)
    include_all: bool = knob(False, "Export every trajectory, not only accepted ones.", flag="all")


def _lookup(table: dict, key: str | None, what: str):
    if key not in table:
        raise Rejected(f"{what} {key!r} is not in --{what}s")
    return table[key]


def domains(required: bool = True):
    """A resource: the --domains records as live domains, by id."""

    @contextlib.contextmanager
    def open_domains(config: EvolveCommandConfig, options=None):
        from astra_core.jsonl import read_jsonl
        from astra_sandbox import SandboxConfig

        from astra_toolgraph.evolve.domains import domain_of

        if required and not config.domains:
            raise StageError("--domains FILE is required")
        records = [record for path in config.domains for record in read_jsonl(path, kind=DOMAIN_RECORD)]
        try:
            live = {r["id"]: domain_of(r, sandbox_config=SandboxConfig(jail=config.sandbox_jail)) for r in records}
        except Rejected as exc:
            raise StageError(f"--domains: {exc}") from None
        yield live

    if required:
        open_domains.requires = [("domains", "environment")]
    return open_domains


def domain_records():
    """A resource: the --domains records (checked, not started), by id."""
    return side_records("domains", DOMAIN_RECORD, required=True, documents="environment")


@contextlib.contextmanager
def first_user_messages(config: EvolveCommandConfig, options=None):
    """A task's opening user message, from the first --trajectories record of that task that has one."""
    from astra_core.jsonl import read_jsonl

    openings: dict[str, str] = {}
    for path in config.trajectory_files:
        for record in read_jsonl(path, kind="trajectory"):
            first = next((m["content"] for m in record["messages"] if m["role"] == "user" and m.get("content")), None)
            if first and record.get("task_id") not in openings:
                openings[record["task_id"]] = first
    yield openings


@contextlib.contextmanager
def iteration_sinks(config: EvolveCommandConfig, options):
    """The --tasks-out and --trajectories-out files of `evolve run` (appended to on --resume)."""
    for name in ("tasks_out", "trajectories_out"):
        if getattr(config, name) is None:
            raise StageError(f"--{name.replace('_', '-')} FILE is required")
    mode = "a" if options.resume else "w"
    with Path(config.tasks_out).open(mode, encoding="utf-8") as tasks, \
            Path(config.trajectories_out).open(mode, encoding="utf-8") as trajectories:
        yield tasks, trajectories


iteration_sinks.requires = [("tasks_out", None), ("trajectories_out", None)]


def _agent(coro_fn):
    """An agent that gave up (AgentFailed) rejects its record with the reason."""

    @functools.wraps(coro_fn)
    async def wrapped(*args, **kwargs):
        try:
            return await coro_fn(*args, **kwargs)
        except AgentFailed as exc:
            raise Rejected(str(exc)) from None

    return wrapped


@_agent
async def plans_of(record: dict, config: EvolveCommandConfig, llm) -> list[dict]:
    """Domain records -> N diversified synthesis-evaluation plan pairs each (plan records, iteration 0)."""
    from astra_toolgraph.evolve.domains import domain_of
    from astra_toolgraph.evolve.plans import generate_plans

    return await generate_plans(llm, domain_of(record), config.plans, max_tokens=config.max_tokens)


async def tasks_of(plan: dict, config: EvolveCommandConfig, llm, domains: dict) -> list[dict]:
    """Plan records -> candidate tasks (task records with user profile, specification, expected actions,
    expected answer and the expected final state their replay leaves)."""
    from astra_toolgraph.evolve.tasks import synthesize_task

    domain = _lookup(domains, plan["domain_id"], "domain")
    tasks, failed = [], []
    for index in range(config.tasks_per_plan):
        try:
            tasks.append(await synthesize_task(llm, plan, domain, index, config))
        except AgentFailed as exc:
            failed.append(str(exc))
    if not tasks:
        raise Rejected("; ".join(failed))
    for task in tasks:
        task["meta"]["evolve_tasks"] = {"failed": failed}
    return tasks


@_agent
async def verified_task(task: dict, config: EvolveCommandConfig, llm, plans: dict, domains: dict) -> dict:
    """Task records -> the same tasks with `verification: {verdict: PASS|FAIL, rationale, by, investigation?}`
    (all kept; `investigation`: the tool calls of the verification agent, --verify-calls > 0).

    Hand-written tasks (user, expected_actions, expected_answer, no expected_state) are made checkable
    first: their expected actions are replayed in the --domains environment."""
    from astra_toolgraph.evolve.tasks import complete_task, verify_task

    needs_domain = "expected_state" not in task or (config.judge_tasks and config.verify_calls > 0)
    domain = _lookup(domains, task["server_id"], "domain") if needs_domain else None
    if "expected_state" not in task:
        task = await complete_task(domain, task)
    return await verify_task(llm, _lookup(plans, task.get("plan_id"), "plan"), task, config, domain)


async def trajectories_of(task: dict, config: EvolveCommandConfig, llm, user, domains: dict) -> list[dict]:
    """Verified task records -> trajectories between the assistant and the user simulator, each with its
    final state and the checker's `state_check: {reward, diff}`. Tasks that failed verification are
    rejected."""
    from astra_toolgraph.evolve.trajectories import roll_out

    verdict = (task.get("verification") or {}).get("verdict")
    if verdict != "PASS":
        raise Rejected(f"task verification: {verdict or 'not verified'}")
    if "expected_state" not in task:
        raise Rejected("task has no expected_state to check its trajectories against (verify-tasks writes it)")
    domain = _lookup(domains, task["server_id"], "domain")
    return [await roll_out(llm, user, task, domain, config, sample) for sample in range(config.rollouts_per_task)]


@_agent
async def verified_trajectory(trajectory: dict, config: EvolveCommandConfig, llm, tasks: dict, plans: dict,
                              domains: dict) -> dict:
    """Trajectory records -> the same with `verification: {verdict: SUCCESS|FAIL, rationale, attribution:
    TASK|TRAJECTORY|NONE, checker, judge, investigation?}` (all kept; `investigation`: the tool calls of
    the verification agent, --verify-calls > 0)."""
    from astra_toolgraph.evolve.trajectories import verify_trajectory

    task = _lookup(tasks, trajectory.get("task_id"), "task")
    agentic = config.judge_trajectories and config.verify_calls > 0
    domain = _lookup(domains, task["server_id"], "domain") if agentic else None
    return await verify_trajectory(llm, _lookup(plans, task.get("plan_id"), "plan"), task, trajectory, config, domain)


@_agent
async def reflected_plan(plan: dict, config: EvolveCommandConfig, llm, tasks: dict, trajectories: dict) -> dict:
    """Plan records + their verified tasks and trajectories -> the revised plans (iteration k+1), each
    keeping the earlier revisions with their outcomes, failures and analysis in `history`."""
    from astra_toolgraph.evolve.reflection import reflect

    for what, records in (("tasks", tasks), ("trajectories", trajectories)):
        unverified = [r["id"] for r in records.values() if r.get("plan_id") == plan["id"] and "verification" not in r]
        if unverified:
            raise Rejected(f"{what} not verified yet: {', '.join(unverified[:3])}")
    return await reflect(llm, plan, list(tasks.values()), list(trajectories.values()), max_tokens=config.max_tokens)


async def evolved_plans(plan: dict, config: EvolveCommandConfig, llm, user, stage, domains: dict, sinks) -> list[dict]:
    """Plan records (one stream each) -> K iterations of synthesis, verification, rollout, verification and
    reflection. Stdout: the stream's plan at every iteration (0..K, `history` and `meta.evolve` with the
    agent failures); tasks and trajectories of every iteration go to --tasks-out and --trajectories-out.
    The dataset is the trajectories whose verdict is SUCCESS."""
    from astra_toolgraph.evolve.stream import run_stream

    result = await run_stream(llm, user, plan, _lookup(domains, plan["domain_id"], "domain"), config)
    for sink, records in zip(sinks, (result.tasks, result.trajectories), strict=True):
        sink.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        sink.flush()
    stage.stats["tasks"] = stage.stats.get("tasks", 0) + len(result.tasks)
    stage.stats["trajectories"] = stage.stats.get("trajectories", 0) + len(result.trajectories)
    stage.stats["accepted"] = stage.stats.get("accepted", 0) + sum(
        t["verification"]["verdict"] == "SUCCESS" for t in result.trajectories)
    return result.plans


def user_sft(trajectory: dict, config: EvolveCommandConfig) -> dict:
    """Accepted trajectories -> user-model SFT trajectories (the user's side of each conversation)."""
    from astra_toolgraph.evolve.export import user_sft_record

    return user_sft_record(trajectory, require_accepted=not config.include_all)


def rl_sample(task: dict, config: EvolveCommandConfig, domain_records: dict, openings: dict) -> dict:
    """Verified tasks -> astra-grpo rl_samples with a user simulator (`user`) and the state reward."""
    from astra_toolgraph.evolve.export import rl_sample_record

    return rl_sample_record(task, _lookup(domain_records, task["server_id"], "domain"), openings.get(task["id"]))
