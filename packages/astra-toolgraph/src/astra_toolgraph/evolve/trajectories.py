"""Trajectory rollout with a user simulator, the executable checker, and trajectory verification
(AReaL-SEA §4.3).

An episode: the user simulator opens (answering the assistant's greeting), or the task's question does
(`user_opening`); the assistant calls tools and writes messages; each plain message goes to the user
simulator, whose reply continues the conversation until it writes a stop token, or the turn limits cut it. The task's checker then reads
the episode's final state: astra-reward's `state_reward` against the task's `expected_state` (and,
when the task expects an answer, that the assistant told it), giving a binary reward and a diff.
The verification agent gives SUCCESS/FAIL with a rationale and, on failure, a TASK or TRAJECTORY
attribution; a trajectory succeeds only when the checker passes and the agent agrees.
"""

from __future__ import annotations

from astra_core.llm import LLMClient
from astra_core.records import new_record, stable_id
from astra_core.users import UserProfile, UserTurn, simulate_user
from astra_reward import contains_answer, state_reward
from astra_reward.conversation import message_text, strip_thinking

from astra_toolgraph.evolve import prompts
from astra_toolgraph.evolve.agent import tool_turn
from astra_toolgraph.evolve.config import EvolveConfig
from astra_toolgraph.evolve.domains import Domain
from astra_toolgraph.evolve.verifier import verdict


def check_trajectory(task: dict, final_state: dict, messages: list[dict]) -> dict:
    """The task's executable checker: {reward: 1.0|0.0, diff: [{path, expected, actual, kind}], answer_given}.
    The answer must be in what the agent said, not in its reasoning."""
    result = state_reward(final_state, task["expected_state"], ignore_fields=task.get("ignore_fields") or [])
    check = {"reward": result.reward, "diff": result.diff}
    expected_answer = task.get("expected_answer") or ""
    if expected_answer:
        said = " ".join(strip_thinking(message_text(m.get("content"))) for m in messages if m["role"] == "assistant")
        check["answer_given"] = contains_answer(said, expected_answer)
        if not check["answer_given"]:
            check["reward"] = 0.0
    return check


async def roll_out(agent: LLMClient, user: LLMClient, task: dict, domain: Domain, config: EvolveConfig,
                   sample: int = 0) -> dict:
    """One trajectory record for `task`: the conversation, how it ended, the final state and its check."""
    profile = UserProfile.of(task["user"])
    messages = [{"role": "system", "content": prompts.ASSISTANT_SYSTEM}]
    executions: list[dict] = []
    if config.user_opening == "question":
        opening = UserTurn(content=task["question"], stop=None)
    else:
        opening = await simulate_user(user, profile, [], max_tokens=config.user_max_tokens)
    messages.append({"role": "user", "content": opening.content})
    user_stop, finish, user_turns = opening.stop, "max_turns", 0
    async with domain.episode() as episode:
        turn = 0
        while user_stop is None and turn < config.max_turns:
            called = await tool_turn(agent, messages, domain.tools, episode, turn=turn,
                                     tool_choice=config.assistant_choice(turn), max_tokens=config.assistant_max_tokens,
                                     observation_chars=config.max_observation_chars, executions=executions)
            turn += 1
            if called:
                continue
            if user_turns >= config.max_user_turns:
                finish = "max_user_turns"
                break
            reply = await simulate_user(user, profile, messages, max_tokens=config.user_max_tokens)
            user_turns += 1
            user_stop = reply.stop
            if reply.content:
                messages.append({"role": "user", "content": reply.content})
        if user_stop is not None:
            finish = "user_stop"
        final_state = await episode.state()
    record = new_record(stable_id(task["id"], sample, prefix="etraj-"), parent=task, task_id=task["id"],
                        messages=messages, tools=domain.tools, user=task["user"], user_stop=user_stop,
                        finish_reason=finish, final_state=final_state,
                        state_check=check_trajectory(task, final_state, messages),
                        plan_id=task.get("plan_id"), stream=task.get("stream"), iteration=task.get("iteration"))
    record["meta"]["rollout"] = {"domain_id": domain.id, "sample": sample, "turns": turn, "user_turns": user_turns,
                                 "tool_calls": len(executions), "executions": executions,
                                 "tool_choice": config.tool_choice}
    return record


async def verify_trajectory(llm: LLMClient | None, plan: dict, task: dict, trajectory: dict,
                            config: EvolveConfig, domain: Domain | None = None) -> dict:
    """The trajectory with `verification: {verdict, rationale, attribution, checker, judge?, investigation?}`
    (`investigation`: every tool call the agent made in `domain` first, when `config.verify_calls` > 0)."""
    check = trajectory["state_check"]
    passed = check["reward"] == 1.0
    checker_rationale = ("the final state matches the expected state" if passed else
                         f"the final state differs from the expected state at {len(check['diff'])} path(s)"
                         + ("" if check.get("answer_given", True) else "; the expected answer was not given"))
    if llm is None or not config.judge_trajectories:
        verification = {"verdict": "SUCCESS" if passed else "FAIL", "rationale": checker_rationale,
                        "attribution": "NONE" if passed else "TRAJECTORY", "checker": passed}
        return {**trajectory, "verification": verification}
    messages = prompts.trajectory_verify_messages(plan, task, trajectory, config.verify_calls)
    judged, investigation = await verdict(llm, messages, prompts.TRAJECTORY_VERDICT_SCHEMA, "trajectory_verdict",
                                          domain, config)
    success = passed and judged["verdict"] == "SUCCESS"
    attribution = "NONE" if success else (judged["attribution"] if judged["attribution"] != "NONE" else "TRAJECTORY")
    rationale = str(judged["rationale"]).strip()
    if not passed:
        rationale = f"{checker_rationale}. {rationale}".strip()
    verification = {"verdict": "SUCCESS" if success else "FAIL", "rationale": rationale, "attribution": attribution,
                    "checker": passed, "judge": judged["verdict"]}
    if investigation:
        verification["investigation"] = investigation
    return {**trajectory, "verification": verification}
