"""The F1 trajectory reward (paper Eq. 29–31): solved-sub-task rules, call counting, edge cases, properties."""

import json

import pytest
from astra_reward import F1Result, f1_from_counts, f1_reward
from hypothesis import assume, given, settings
from hypothesis import strategies as st

JOB = [
    {"id": 1, "question": "What is the capital of Norway?", "answer": "Oslo", "needs_tool": True},
    {"id": 2, "question": "What is the population of Oslo?", "answer": "709,000", "needs_tool": True},
]
PROMPT = [{"role": "system", "content": "Use the tools."},
          {"role": "user", "content": "What is the population of the capital of Norway?"}]


def call(call_id, name, arguments, content=None):
    """An assistant message with one call, followed by its observation when `content` is given."""
    messages = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}]
    if content is not None:
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
    return messages


def answer(text):
    return [{"role": "assistant", "content": text}]


GOLD = (PROMPT + call("c1", "get_capital", {"country": "Norway"}, '{"capital": "Oslo"}')
        + call("c2", "get_population", {"city": "Oslo"}, '{"population": "709,000"}')
        + answer("Oslo has 709,000 inhabitants."))


def test_gold_rollout_scores_one_with_all_components():
    result = f1_reward(JOB, GOLD)
    assert result == F1Result(reward=1.0, recall=1.0, precision=1.0, solved=2, n=2, calls=2, solved_ids=[1, 2],
                              variant="f1", malformed_calls=0, failed_calls=0)
    assert result.components() == {"kind": "f1", "recall": 1.0, "precision": 1.0, "solved": 2, "n": 2, "calls": 2,
                                   "solved_ids": [1, 2], "variant": "f1", "malformed_calls": 0, "failed_calls": 0}


def test_half_solved_matches_the_rollout_example_in_formats_doc():
    messages = PROMPT + call("c1", "get_capital", {"country": "Norway"}, '{"capital": "Oslo"}') + answer("Oslo.")
    result = f1_reward(JOB, messages)
    assert (result.recall, result.precision, result.solved_ids) == (0.5, 1.0, [1])
    assert result.reward == pytest.approx(2 / 3)


def test_repeated_failed_and_malformed_calls_all_count_in_c():
    messages = (PROMPT
                + call("c1", "get_capital", {"country": "Norway"}, '{"capital": "Oslo"}')
                + call("c2", "get_capital", {"country": "Norway"}, '{"capital": "Oslo"}')        # repeated
                + call("c3", "get_weather", {"city": "Oslo"}, "Error: unknown tool 'get_weather'")  # failed
                + call("c4", "get_population", {"city": "Oslo"}, '{"population": "709,000"}')
                + answer("709,000"))
    result = f1_reward(JOB, messages, malformed_calls=2)
    assert (result.solved, result.calls, result.failed_calls, result.malformed_calls) == (2, 6, 1, 2)
    assert result.precision == pytest.approx(2 / 6)
    assert result.reward == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))


def test_unparseable_arguments_and_unanswered_calls_count():
    messages = PROMPT + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "get_capital", "arguments": "{not json"}},
        {"id": "y", "type": "function", "function": {"name": "get_capital", "arguments": "{}"}}]}]
    result = f1_reward(JOB, messages)
    assert (result.calls, result.failed_calls, result.reward) == (2, 2, 0.0)


def test_answer_in_an_error_observation_solves_nothing():
    messages = PROMPT + call("c1", "get_population", {"city": "Bergen"},
                             "Error: unknown city 'Bergen'; known: Oslo") + answer("Oslo")
    assert f1_reward(JOB, messages).solved == 0
    mcp_error = PROMPT + call("c1", "get_capital", {"country": "Norway"}, '{"isError": true, "text": "Oslo?"}')
    assert f1_reward(JOB, mcp_error).solved == 0


def test_answer_must_come_from_an_observation_of_the_agents_own_call():
    # A tool message that answers no call of the agent (an orphan) is not an observation.
    orphan = PROMPT + [{"role": "tool", "tool_call_id": "nobody", "content": "Oslo 709,000"}] + answer("Oslo")
    assert f1_reward(JOB, orphan).solved == 0
    # The final answer alone never solves a tool sub-task: the model could have guessed.
    guessed = PROMPT + answer("The capital is Oslo with 709,000 people.")
    result = f1_reward(JOB, guessed)
    assert (result.solved, result.calls, result.reward) == (0, 0, 0.0)


def test_tool_messages_without_ids_answer_calls_in_order():
    messages = PROMPT + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_capital", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "get_population", "arguments": "{}"}}]},
        {"role": "tool", "content": "Oslo"},
        {"role": "tool", "content": "709000"},
    ]
    result = f1_reward(JOB, messages)
    assert (result.solved, result.calls, result.reward) == (2, 2, 1.0)


def test_leaf_sub_task_is_checked_against_the_final_answer_and_p_is_capped():
    job = JOB[:1] + [{"id": 3, "question": "Is Oslo big?", "answer": "yes", "needs_tool": False}]
    solved = PROMPT + call("c1", "get_capital", {"country": "Norway"}, '{"capital": "Oslo"}') + answer("Yes, it is.")
    result = f1_reward(job, solved)
    # n̂ = 2 with c = 1: the paper's p would be 2; capped at 1 so the reward stays in [0, 1].
    assert (result.solved, result.calls, result.precision, result.reward) == (2, 1, 1.0, 1.0)
    # The leaf's answer in an observation does not count; it must be in the final answer.
    in_observation = PROMPT + call("c1", "get_capital", {"country": "Norway"}, "Oslo, yes") + answer("Oslo.")
    assert f1_reward(job, in_observation).solved_ids == [1]
    # A rollout cut off while calling has no final answer.
    cut = PROMPT + call("c1", "get_capital", {"country": "Norway"}, "Oslo") + call("c2", "f", {})
    assert f1_reward(job, cut).solved_ids == [1]


def test_leaf_only_job_without_calls():
    job = [{"question": "Say yes", "answer": "yes", "needs_tool": False}]
    result = f1_reward(job, PROMPT + answer("<think>no?</think>Yes."))
    assert (result.reward, result.calls, result.solved_ids) == (1.0, 0, [0])  # position when no id
    assert f1_reward(job, PROMPT + answer("<think>yes</think>No.")).reward == 0.0
    # DeepSeek-R1's and QwQ's templates open the block in the prompt: the reply holds only its end (vLLM without
    # a reasoning parser). The reasoning's "yes" is not the answer.
    assert f1_reward(job, PROMPT + answer("Should I say yes?\n</think>\n\nNo.")).reward == 0.0
    assert f1_reward(job, PROMPT + answer("Hmm, no?\n</think>\n\nYes.")).reward == 1.0


def test_empty_job_scores_zero():
    result = f1_reward([], GOLD)
    assert (result.reward, result.recall, result.precision, result.n) == (0.0, 0.0, 0.0, 0)


def test_variants():
    messages = GOLD[:-1] + call("c3", "get_capital", {"country": "Norway"}, "Oslo") + answer("709,000")
    f1, recall, precision = (f1_reward(JOB, messages, variant=v) for v in ("f1", "recall", "precision"))
    assert recall.reward == 1.0
    assert precision.reward == pytest.approx(2 / 3)
    assert f1.reward == pytest.approx(0.8)
    assert {r.variant for r in (f1, recall, precision)} == {"f1", "recall", "precision"}
    with pytest.raises(ValueError, match="variant"):
        f1_reward(JOB, messages, variant="accuracy")
    with pytest.raises(ValueError):
        f1_reward(JOB, messages, malformed_calls=-1)


# -- properties (hypothesis) ----------------------------------------------------------------------

@st.composite
def episodes(draw, max_n=5, max_calls=10):
    """A job of n tool sub-tasks and a rollout whose calls each solve at most one sub-task.

    Each planned call is a sub-task index (its observation carries that answer), or None (a useless
    call: an empty result or an error).
    """
    n = draw(st.integers(1, max_n))
    plan = draw(st.lists(st.one_of(st.none(), st.integers(0, n - 1)), max_size=max_calls))
    return n, plan


def build(n, plan, extra_useless=0):
    job = [{"id": i, "question": f"q{i}", "answer": f"answer{i} token{i}"} for i in range(n)]
    messages = list(PROMPT)
    for k, target in enumerate([*plan, *[None] * extra_useless]):
        content = f'{{"result": "answer{target} token{target}"}}' if target is not None else (
            "Error: nothing" if k % 2 else "{}")
        messages += call(f"c{k}", "tool", {"k": k}, content)
    return job, messages + answer("done")


@given(episodes(), st.integers(0, 3), st.sampled_from(["f1", "recall", "precision"]))
def test_reward_is_within_bounds(episode, malformed, variant):
    job, messages = build(*episode)
    result = f1_reward(job, messages, variant=variant, malformed_calls=malformed)
    assert 0.0 <= result.reward <= 1.0
    assert 0.0 <= result.recall <= 1.0 and 0.0 <= result.precision <= 1.0


@given(episodes())
def test_reward_is_one_exactly_when_every_sub_task_is_solved_with_n_calls(episode):
    n, plan = episode
    job, messages = build(n, plan)
    result = f1_reward(job, messages)
    every_solved = set(p for p in plan if p is not None) == set(range(n))
    assert (result.reward == 1.0) == (every_solved and len(plan) == n)


@given(episodes())
def test_reward_never_drops_when_a_useless_call_solves_a_new_sub_task_instead(episode):
    n, plan = episode
    unsolved = sorted(set(range(n)) - {p for p in plan if p is not None})
    assume(unsolved)
    if None not in plan:
        plan = [*plan, None]  # one useless call to turn into a solving one
    better = list(plan)
    better[better.index(None)] = unsolved[0]
    before, after = f1_reward(*build(n, plan)), f1_reward(*build(n, better))
    assert after.solved == before.solved + 1 and after.calls == before.calls
    assert after.reward > before.reward


@given(episodes(), st.integers(1, 4))
def test_reward_decreases_with_extra_calls(episode, extra):
    n, plan = episode
    before, after = f1_reward(*build(n, plan)), f1_reward(*build(n, plan, extra_useless=extra))
    assert after.calls == before.calls + extra and after.solved == before.solved
    if before.solved:
        assert after.reward < before.reward
    else:
        assert after.reward == before.reward == 0.0


@settings(max_examples=300)
@given(st.integers(0, 20), st.integers(1, 20), st.integers(0, 40))
def test_formula_properties(solved, n, calls):
    solved = min(solved, n)
    reward, recall, precision = f1_from_counts(solved, n, calls)
    assert 0.0 <= reward <= 1.0
    assert (reward == 1.0) == (solved == n and calls <= n)
    more_solved = f1_from_counts(min(solved + 1, n), n, calls)[0]
    assert more_solved >= reward
    more_calls = f1_from_counts(solved, n, calls + 1)[0]
    assert more_calls <= reward
    if solved and calls >= solved:
        assert more_calls < reward
