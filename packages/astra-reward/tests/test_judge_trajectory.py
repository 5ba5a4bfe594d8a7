"""Trajectory judge on recorded replies (well-formed, malformed, partially valid, out of range).

Replies are recorded and served by a real loopback HTTP server (`recorded_llm`): these tests check
rounds, scoring arithmetic, parsing and the missing-score behaviour, not judge quality.
"""

import asyncio
import json

import pytest
from astra_core.schema import validate
from astra_reward.bundled import data_path
from astra_reward.conversation import tool_calls
from astra_reward.judges import JudgeSettings, judge_trajectory, tool_call_rounds
from judge_replies import client_for, requests_for, round_of, router, score

TRAJECTORIES = {r["id"]: r for r in map(json.loads, data_path("trajectories.jsonl").read_text().splitlines())}
SLOPPY = TRAJECTORIES["traj-weather-sloppy"]  # 3 rounds: [call 1] [calls 2, 3] [call 4 to an undefined tool]
GOOD = TRAJECTORIES["traj-geo-good"]

WELL_FORMED = {
    "query_understanding": score(1),
    "query_planning": score(0.5),
    "round_understanding": lambda body: score({2: 1, 3: 0.5}[round_of(body)]),
    "round_planning": lambda body: score({2: 1, 3: 0}[round_of(body)]),
    "tool_conciseness": json.dumps({"calls": [{"index": i, "reason": "r", "score": s}
                                              for i, s in [(1, 1), (2, 0), (3, 1), (4, 0)]]}),
    "answer_correlation": score(0.5),
    "answer_faithfulness": "Here is my verdict:\n```json\n{\"reason\": \"invented weather\", \"score\": 0}\n```",
}


def judge(server, record, **settings):
    async def go():
        async with client_for(server) as client:
            return await judge_trajectory(client, record, JudgeSettings(**settings))
    return asyncio.run(go())


def test_rounds_group_parallel_calls_and_name_the_preceding_responses():
    rounds = tool_call_rounds(SLOPPY["messages"], tool_calls(SLOPPY["messages"]))
    assert [(r.number, r.message_indices, len(r.calls), r.responses) for r in rounds] == [
        (1, [2], 1, []), (2, [4], 2, [3]), (3, [7], 1, [5, 6])]
    split = [{"role": "user", "content": "q"},
             {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}]},
             {"role": "assistant", "tool_calls": [{"id": "b", "function": {"name": "f", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "a", "content": "1"}, {"role": "tool", "tool_call_id": "b", "content": "2"}]
    (only,) = tool_call_rounds(split, tool_calls(split))  # parallel calls in separate messages: one round
    assert only.message_indices == [1, 2] and len(only.calls) == 2


def test_well_formed_replies_give_all_seven_dimensions_and_their_mean(recorded_llm):
    server = recorded_llm(replies=[router(WELL_FORMED)])
    scores = judge(server, SLOPPY)
    expected = {"QU": 1.0, "QP": 0.5, "TCU": 0.75, "TCP": 0.5, "TCS": 0.75, "TC": 0.5, "FA": 0.25}
    assert {d: scores[d] for d in expected} == expected
    assert scores["overall"] == pytest.approx(sum(expected.values()) / 7)
    assert scores["judge_errors"] == {} and "not_applicable" not in scores
    # TCS is programmatic: call 4 names a tool the trajectory does not offer.
    assert [c["ok"] for c in scores["details"]["TCS"]] == [1, 1, 1, 0]
    assert scores["details"]["TCS"][3]["why"] == "undefined tool 'get_forecast'"
    assert scores["details"]["FA"]["Summ"] == {"score": 0.0, "reason": "invented weather"}

    # QU, QP, TC, Corr, Summ once; TCU and TCP once per round from j = 2.
    assert len(server.chat_requests) == 2 + 2 * 2 + 1 + 2
    system_prompt = SLOPPY["messages"][0]["content"]
    assert all(system_prompt not in body["messages"][1]["content"] for body in server.chat_requests)
    # Round j sees the history c_j = m1..m_tj: round 2 ends before round 3's call to get_forecast.
    (round_2,) = [b for b in requests_for(server, "round_understanding") if round_of(b) == 2]
    assert "call #3: get_temperature" in round_2["messages"][1]["content"]
    assert "get_forecast" not in round_2["messages"][1]["content"]
    assert "Tool responses immediately preceding it: message(s) 3." in round_2["messages"][1]["content"]
    # Corr sees only the user's request and the final answer.
    (corr,) = requests_for(server, "answer_correlation")
    assert "get_temperature" not in corr["messages"][1]["content"]
    assert "Oslo is warmer" in corr["messages"][1]["content"]
    # chat_json asks the endpoint for the schema; judges run greedy by default.
    assert all(b["response_format"]["type"] == "json_schema" and b["temperature"] == 0.0
               for b in server.chat_requests)


def test_malformed_replies_leave_dimensions_missing_never_a_default(recorded_llm):
    server = recorded_llm(replies=["I think the assistant did a great job! Score: excellent."])
    scores = judge(server, SLOPPY, attempts=2)
    for dimension in ("QU", "QP", "TCU", "TCP", "TC", "FA"):
        assert scores[dimension] is None
        assert "unparseable reply" in scores["judge_errors"][dimension]
    assert scores["TCS"] == 0.75  # programmatic, still there
    validate({**SLOPPY, "scores": scores}, "trajectory")
    assert scores["overall"] is None
    assert len(server.chat_requests) == 2 * 9  # each judgment asked twice (attempts=2) before giving up
    retry = server.chat_requests[-1]["messages"]
    assert retry[-1]["role"] == "user" and "not valid" in retry[-1]["content"]


def test_partially_valid_replies_keep_what_parses(recorded_llm):
    replies = dict(WELL_FORMED)
    replies["tool_conciseness"] = json.dumps({"calls": [{"index": 1, "score": 1}, {"index": 2, "score": 0},
                                                        {"index": 3, "score": 1}, {"index": 9, "score": 1}]})
    replies["round_planning"] = lambda body: score(1) if round_of(body) == 2 else "no idea"
    server = recorded_llm(replies=[router(replies)])
    scores = judge(server, SLOPPY, attempts=1)
    assert scores["TC"] is None and "no score for call 4" in scores["judge_errors"]["TC"]
    assert [c["score"] for c in scores["details"]["TC"]] == [1.0, 0.0, 1.0, None]  # the parsed part is kept
    assert scores["TCP"] is None and scores["judge_errors"]["TCP"].startswith("round 3: unparseable")
    assert [r["score"] for r in scores["details"]["TCP"]] == [1.0, None]
    assert (scores["QU"], scores["TCU"], scores["FA"]) == (1.0, 0.75, 0.25)
    assert scores["overall"] is None and set(scores["judge_errors"]) == {"TC", "TCP"}


def test_out_of_range_scores_are_rejected_not_clamped(recorded_llm):
    replies = {**WELL_FORMED, "query_understanding": score(0.7), "query_planning": score("0.5"),
               "answer_correlation": score(2),
               "tool_conciseness": json.dumps({"calls": [{"index": i, "score": 1} for i in (1, 2, 3)]
                                               + [{"index": 4, "score": -1}]})}
    scores = judge(recorded_llm(replies=[router(replies)]), SLOPPY, attempts=1)
    assert scores["QU"] is None and "score 0.7 is not one of 0, 0.5, 1" in scores["judge_errors"]["QU"]
    assert scores["QP"] == 0.5  # a numeric string is read as its number
    assert scores["FA"] is None and "Corr: score 2 is not one of" in scores["judge_errors"]["FA"]
    assert scores["TC"] is None and scores["judge_errors"]["TC"] == "call 4: score -1 is not one of 0, 1"
    assert scores["overall"] is None


def test_dimensions_that_do_not_apply_are_left_out_of_the_mean(recorded_llm):
    no_calls = {**GOOD, "messages": GOOD["messages"][:2] + [{"role": "assistant", "content": "Oslo, 709,000."}]}
    server = recorded_llm(replies=[router(WELL_FORMED)])
    scores = judge(server, no_calls)
    assert scores["not_applicable"] == {"TCU": "fewer than two tool-call rounds", "TCP": "fewer than two tool-call rounds",
                                        "TCS": "no tool calls", "TC": "no tool calls"}
    assert scores["overall"] == pytest.approx((1.0 + 0.5 + 0.25) / 3)
    assert len(server.chat_requests) == 4  # QU, QP, Corr, Summ
    validate({**no_calls, "scores": scores}, "trajectory")

    one_round = {**GOOD, "messages": GOOD["messages"][:4] + [GOOD["messages"][-1]]}
    scores = judge(recorded_llm(replies=[router(WELL_FORMED)]), one_round)
    assert list(scores["not_applicable"]) == ["TCU", "TCP"] and scores["TC"] == 1.0  # call 1 scored 1


def test_no_final_answer_scores_fa_zero_without_asking(recorded_llm):
    cut = {**GOOD, "messages": GOOD["messages"][:5]}  # ends with an assistant message making a call
    server = recorded_llm(replies=[router(WELL_FORMED)])
    scores = judge(server, cut)
    assert scores["FA"] == 0.0 and "no final answer" in scores["details"]["FA"]["reason"]
    assert requests_for(server, "answer_correlation") == [] and requests_for(server, "answer_faithfulness") == []
    assert scores["TCS"] == 0.5  # call 2 was never answered
