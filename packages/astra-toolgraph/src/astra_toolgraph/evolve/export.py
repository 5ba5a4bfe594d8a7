"""What the engine's accepted data feeds: user-model SFT data (paper §5: fine-tune the user model
before RL) and astra-grpo RL samples with a user simulator and the task's state checker."""

from __future__ import annotations

from astra_core.records import new_record
from astra_core.stage import Rejected
from astra_core.users import UserProfile, user_sft_messages

from astra_toolgraph.evolve import prompts


def accepted(trajectory: dict) -> bool:
    return (trajectory.get("verification") or {}).get("verdict") == "SUCCESS"


def user_sft_record(trajectory: dict, *, require_accepted: bool = True) -> dict:
    """A `trajectory` record for SFT of the user model: the conversation from the user's side
    (the user simulator's system prompt, roles swapped, the assistant's tool traffic dropped, the user's own
    tool calls kept with its tools, its stop token last)."""
    if require_accepted and not accepted(trajectory):
        verdict = (trajectory.get("verification") or {}).get("verdict", "unverified")
        raise Rejected(f"trajectory not accepted ({verdict})")
    if not trajectory.get("user"):
        raise Rejected("trajectory has no user simulator profile (`user`)")
    profile = UserProfile.of(trajectory["user"])
    messages = user_sft_messages(profile, trajectory["messages"], trajectory.get("user_stop"))
    record = new_record(f"{trajectory['id']}/user", parent=trajectory, task_id=trajectory.get("task_id"),
                        messages=messages, tools=list(profile.tools), role="user_simulator")
    # Exported with --all, a record must still say whether its conversation was accepted.
    record["meta"]["source_verdict"] = (trajectory.get("verification") or {}).get("verdict", "unverified")
    return record


def rl_sample_record(task: dict, environment: dict, first_message: str | None = None) -> dict:
    """An astra-grpo `rl_sample`: the assistant prompt with the user's opening message, the
    environment's code, the user simulator profile, and the state reward with the expected state."""
    if (task.get("verification") or {}).get("verdict") != "PASS":
        raise Rejected("task did not pass verification")
    if "code" not in environment:
        raise Rejected(f"domain {environment['id']!r} is not an astra-sandbox environment (astra-grpo runs those)")
    opening = first_message or task["user"]["instruction"]
    messages = [{"role": "system", "content": prompts.ASSISTANT_SYSTEM}, {"role": "user", "content": opening}]
    return new_record(f"{task['id']}/rl", parent=task, messages=messages, tools=environment["tools"],
                      environment={"code": environment["code"], "requirements": environment.get("requirements") or []},
                      user=task["user"],
                      reward={"kind": "state", "expected_state": task["expected_state"],
                              "ignore_fields": task.get("ignore_fields") or []})
