"""Episode rewards through astra-reward: the F1 reward and its recall/precision ablations (a badly
written call counts in c), and the state verifier on the environment session's final state."""

import pytest
from astra_grpo.rewards import score_episode
from grpo_support import rl_sample


def conversation(*turns):
    messages = rl_sample()["messages"][:]
    for index, (name, arguments, observation) in enumerate(turns):
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{index}", "type": "function",
            "function": {"name": name, "arguments": arguments}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{index}", "content": observation})
    messages.append({"role": "assistant", "content": "Oslo has 709,000 inhabitants."})
    return messages


SOLVED = conversation(("get_capital", '{"country": "Norway"}', '{"capital": "Oslo"}'),
                      ("get_population", '{"city": "Oslo"}', '{"population": "709,000"}'))


def test_f1_reward_of_a_solved_episode():
    reward, parts = score_episode(rl_sample(), SOLVED, malformed_calls=0)
    assert reward == pytest.approx(1.0, abs=1e-6) and parts["solved"] == 2 and parts["calls"] == 2


def test_malformed_calls_lower_precision_and_the_ablations_pick_one_term():
    f1, parts = score_episode(rl_sample(), SOLVED, malformed_calls=2)
    assert parts["calls"] == 4 and parts["precision"] == pytest.approx(0.5, abs=1e-6)
    assert f1 == pytest.approx(2 * 0.5 * 1.0 / 1.5, abs=1e-5)
    recall, _ = score_episode(rl_sample(), SOLVED, 2, override="recall")
    precision, _ = score_episode(rl_sample(), SOLVED, 2, override="precision")
    assert recall == pytest.approx(1.0, abs=1e-6) and precision == pytest.approx(0.5, abs=1e-6)


def test_the_sample_reward_kind_is_used_unless_overridden():
    sample = rl_sample()
    sample["reward"]["kind"] = "recall"
    half = conversation(("get_capital", '{"country": "Norway"}', '{"capital": "Oslo"}'))[:-1]
    assert score_episode(sample, half, 3)[0] == pytest.approx(0.5, abs=1e-6)
    assert score_episode(sample, half, 3, override="f1")[0] < 0.5


@pytest.mark.nsjail
def test_state_reward_checks_the_final_environment_state(sandbox):
    sample = rl_sample(code="visits = 0\n\ndef count_visits():\n    global visits\n    visits += 1\n    return visits\n")
    sample["reward"] = {"kind": "state", "expected_state": {"visits": 2}}
    with sandbox.session(sample["environment"]["code"]) as session:
        session.call("count_visits", {})
        assert score_episode(sample, [], 0, final_state=session.state())[0] == 0.0
        session.call("count_visits", {})
        reward, parts = score_episode(sample, [], 0, final_state=session.state())
    assert reward == 1.0 and parts["differences"] == 0 and parts["kind"] == "state"


def test_the_trainers_state_components_are_astra_rewards_shape():
    """The trainer writes what `astra-reward state` writes (common.json's reward_components), ignore_fields too."""
    from astra_reward.stages import StateConfig, score_state

    sample = {**rl_sample(), "reward": {"kind": "state", "expected_state": {"a": 1, "t": 1}, "ignore_fields": ["t"]}}
    _, parts = score_episode(sample, SOLVED, malformed_calls=0, final_state={"a": 2, "t": 2})
    scored = score_state({"final_state": {"a": 2, "t": 2}, **sample["reward"]}, StateConfig(), samples={})
    assert parts == scored["reward_components"] and parts["ignore_fields"] == ["t"] and parts["differences"] == 1
