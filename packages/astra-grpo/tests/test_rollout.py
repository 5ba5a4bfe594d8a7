"""Multi-turn episodes: termination rules, token-in/token-out bookkeeping, tool calls executed in
per-episode environment sessions, bad calls as error observations. Policy replies are scripted
(recorded) so the control flow is deterministic; tokens, templates, parsing and the jailed
environment sessions are real."""

import json

import pytest
from astra_grpo.chat import ChatRenderer
from astra_grpo.rollout import EpisodeRunner, RolloutSettings, rollout_record
from grpo_support import (
    QWEN_STYLE_TEMPLATE,
    ScriptedEngine,
    assistant_turns,
    load_tokenizer,
    rl_sample,
    sandbox_pool,
)

CAPITAL = '<tool_call>\n{"name": "get_capital", "arguments": {"country": "Norway"}}\n</tool_call>'
POPULATION = '<tool_call>\n{"name": "get_population", "arguments": {"city": "Oslo"}}\n</tool_call>'


def count_calls_reward(episode):
    """Stand-in reward for control-flow tests: fraction of the two needed answers seen in tool output."""
    seen = " ".join(m["content"] for m in episode.messages if m["role"] == "tool")
    solved = sum(answer in seen for answer in ("Oslo", "709,000"))
    return solved / 2, {"solved": solved}


@pytest.fixture
def runner_for(sandbox):
    def make(replies, *, template=None, pool=None, **settings):
        tokenizer = load_tokenizer(template)
        renderer = ChatRenderer(tokenizer)
        engine = ScriptedEngine(tokenizer, replies, renderer.stop_ids[0])
        runner = EpisodeRunner(engine, renderer, pool or sandbox, RolloutSettings(**settings),
                               reward_fn=count_calls_reward)
        return runner, engine
    return make


def script(*turns):
    """Reply by turn number (the last one repeats)."""
    return lambda prompt: turns[min(assistant_turns(prompt), len(turns) - 1)]


@pytest.mark.parametrize("template", [None, QWEN_STYLE_TEMPLATE], ids=["hermes", "template"])
def test_an_episode_calls_tools_observes_and_answers(template, runner_for):
    runner, engine = runner_for(script(CAPITAL, POPULATION, "About 709,000 people live in Oslo."), template=template)
    [group] = runner.play([rl_sample()], group_size=2)
    for episode in group.episodes:
        assert episode.finish_reason == "no_tool_call" and episode.turns == 3 and episode.tool_calls == 2
        roles = [m["role"] for m in episode.messages]
        assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
        assert json.loads(episode.messages[3]["content"]) == {"capital": "Oslo"}
        assert episode.messages[3]["tool_call_id"] == episode.messages[2]["tool_calls"][0]["id"]
        assert episode.reward == 1.0
        # Token-in/token-out: the loss sees exactly the generated tokens, and re-rendering agrees.
        trained = runner.renderer.tokenizer.decode([t for t, m in zip(episode.token_ids, episode.loss_mask,
                                                                      strict=True) if m])
        assert trained == f"{CAPITAL}<|im_end|>{POPULATION}<|im_end|>About 709,000 people live in Oslo.<|im_end|>"
        assert episode.retokenize_match is True
        assert "<tool_response>" in runner.renderer.tokenizer.decode(episode.token_ids)
    assert runner.retokenize_mismatches == 0
    assert len(engine.calls) == 3 and all(len(c) == 2 for c in engine.calls)  # both members generate together


def test_each_episode_has_its_own_environment(runner_for):
    visit = '<tool_call>\n{"name": "count_visits", "arguments": {}}\n</tool_call>'
    runner, _ = runner_for(script(visit, visit, "Done."), max_live_episodes=4)  # 6 episodes in 2 waves
    groups = runner.play([rl_sample("a"), rl_sample("b")], group_size=3)
    for episode in (e for g in groups for e in g.episodes):
        assert [m["content"] for m in episode.messages if m["role"] == "tool"] == ["1", "2"]  # state kept, not shared
    assert [g.sample_id for g in groups] == ["a", "b"] and [len(g.episodes) for g in groups] == [3, 3]


def test_a_badly_written_call_is_an_error_observation_and_counts(runner_for):
    runner, _ = runner_for(script('<tool_call>{"name": get_capital}</tool_call>', CAPITAL, "Oslo."))
    [group] = runner.play([rl_sample()], group_size=1)
    [episode] = group.episodes
    assert episode.finish_reason == "no_tool_call" and episode.turns == 3
    assert episode.tool_calls == 2 and episode.malformed_calls == 1
    error = episode.messages[3]
    assert error["role"] == "tool" and error["content"].startswith("Error: tool call is not valid JSON")
    assert episode.messages[2]["content"].startswith("<tool_call>")  # what the model wrote is kept


def test_unknown_and_failing_tools_answer_with_errors(runner_for):
    calls = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "get_capital", "arguments": {"country": "Atlantis"}}\n</tool_call>')
    runner, _ = runner_for(script(calls, "I could not find it."))
    [episode] = runner.play([rl_sample()], group_size=1)[0].episodes
    observations = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert len(observations) == 2 and all(o.startswith("Error:") for o in observations)
    assert episode.tool_calls == 2 and episode.malformed_calls == 0 and episode.turns == 2


def test_max_turns_ends_an_episode_that_keeps_calling(runner_for):
    runner, _ = runner_for(script(CAPITAL), max_turns=3)
    [episode] = runner.play([rl_sample()], group_size=1)[0].episodes
    assert episode.finish_reason == "max_turns" and episode.turns == 3 and episode.tool_calls == 3
    assert episode.messages[-1]["role"] == "tool"  # the last call was answered; nothing generated after it


def test_max_length_bounds_the_response_tokens(runner_for):
    runner, engine = runner_for(script(CAPITAL), max_response_length=120, max_new_tokens=64)
    [episode] = runner.play([rl_sample()], group_size=1)[0].episodes
    assert episode.finish_reason == "max_length"
    assert len(episode.token_ids) - episode.prompt_length <= 120
    budgets = [b for call in engine.calls for b in call]
    assert budgets[0] == 64 and all(b <= 64 for b in budgets)


def test_a_turn_cut_by_the_sequence_budget_ends_the_episode(runner_for):
    runner, _ = runner_for(script("word " * 200), max_response_length=40, max_new_tokens=100)
    [episode] = runner.play([rl_sample()], group_size=1)[0].episodes
    assert episode.finish_reason == "max_length" and not episode.last_stopped
    assert episode.generated_tokens == 40


def test_an_environment_timeout_ends_the_episode_with_what_it_has(runner_for):
    slow = '<tool_call>\n{"name": "slow", "arguments": {"seconds": 30}}\n</tool_call>'
    with sandbox_pool(1, call_timeout_s=0.5) as pool:
        runner, _ = runner_for(script(CAPITAL, slow, "never reached"), pool=pool)
        [episode] = runner.play([rl_sample()], group_size=1)[0].episodes
    assert episode.finish_reason == "env_timeout" and episode.turns == 2
    assert episode.reward == 0.5  # the first observation still counts
    assert episode.messages[-1]["content"].startswith("Error")


def test_rollout_records_follow_the_schema(runner_for):
    from astra_core.schema import validate

    runner, _ = runner_for(script(CAPITAL, "Oslo."))
    [group] = runner.play([rl_sample()], group_size=2, uids=["rl-geo@7"])
    records = [rollout_record(group, e, command="astra-grpo train", step=3, group_index=0, status="trained")
               for e in group.episodes]
    for record in records:
        validate(record, "rollout")
        assert record["sample_id"] == "rl-geo" and record["meta"]["parent_id"] == "rl-geo"
        assert record["num_turns"] == 2 and record["finish_reason"] == "no_tool_call"
    assert [r["id"] for r in records] == ["rl-geo@7/step3/0", "rl-geo@7/step3/1"]
