"""Q–A decomposition judge and task judge on recorded replies.

Replies are recorded and served by a real loopback HTTP server (`recorded_llm`): these tests check
scoring arithmetic, parsing and the missing-score behaviour, not judge quality.
"""

import asyncio
import json

import pytest
from astra_core.schema import validate
from astra_core.testing import Failure
from astra_reward.bundled import data_path
from astra_reward.judges import JudgeSettings, judge_qa, judge_task, threshold_failure
from astra_reward.judges.qa import order_problems
from judge_replies import client_for, requests_for, router, score

QA = {r["id"]: r for r in map(json.loads, data_path("qa_instances.jsonl").read_text().splitlines())}
BOOKS = QA["qa-books-3"]  # sub-question 1 depends on 2, which comes later
TASKS = {r["id"]: r for r in map(json.loads, data_path("tasks.jsonl").read_text().splitlines())}
(SERVER,) = map(json.loads, data_path("servers.jsonl").read_text().splitlines())


def items(*pairs):
    return json.dumps({"items": [{"id": i, "reason": "recorded", "score": s} for i, s in pairs]})


QA_WELL_FORMED = {
    "qa_dependency_consistency": items((1, 0), (2, 1), (3, 1)),
    "qa_atomicity": items((1, 0), (2, 1), (3, 1)),
    "qa_sequential_rationality": items((1, 1), (2, 1), (3, 1)),
    "qa_task_completeness": score(1),
}


def run(judge, server, record, **kwargs):
    settings = JudgeSettings(attempts=kwargs.pop("attempts", 1))

    async def go():
        async with client_for(server) as client:
            return await judge(client, record, settings, **kwargs)
    return asyncio.run(go())


def test_qa_well_formed_with_the_structural_order_check(recorded_llm):
    server = recorded_llm(replies=[router(QA_WELL_FORMED)])
    scores = run(judge_qa, server, BOOKS)
    assert (scores["DC"], scores["SA"]) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    # The judge said SR_1 = 1, but sub-question 1 depends on 2, which comes later: structurally 0.
    assert scores["SR"] == pytest.approx(2 / 3)
    assert scores["details"]["SR"][0] == {"id": "1", "score": 0.0,
                                          "reason": "structural: depends on sub-question 2, which does not come earlier"}
    assert scores["TC"] == 1.0
    assert scores["QS"] == pytest.approx((2 / 3 * 3 + 1) / 4)
    assert scores["judge_errors"] == {}
    assert len(server.chat_requests) == 4  # one judgment per dimension, every sub-question in it
    material = server.chat_requests[0]["messages"][1]["content"]
    assert "[id 3] (hop 3, depends on: 2, answered without a tool)" in material


def test_order_problems():
    trace = [{"_uuid": "a", "dependency": None}, {"_uuid": "b", "dependency": ["a", "z"]},
             {"_uuid": "c", "dependency": ["c"]}]
    assert order_problems(trace) == {"b": "depends on unknown sub-question z",
                                     "c": "depends on sub-question c, which does not come earlier"}


def test_qa_malformed_partial_and_out_of_range(recorded_llm):
    replies = {**QA_WELL_FORMED,
               "qa_dependency_consistency": items((1, 0), (2, 1)),                 # sub-question 3 missing
               "qa_atomicity": items((1, 0), (2, 5), (3, 1)),                      # 5 is off the scale
               "qa_task_completeness": "The decomposition looks complete to me."}  # no JSON
    server = recorded_llm(replies=[router(replies)])
    scores = run(judge_qa, server, BOOKS)
    assert scores["DC"] is None and scores["judge_errors"]["DC"] == "no score for sub-question 3"
    assert scores["SA"] is None and scores["judge_errors"]["SA"] == "sub-question 2: score 5 is not one of 0, 1"
    assert scores["TC"] is None and "unparseable reply" in scores["judge_errors"]["TC"]
    assert scores["SR"] == pytest.approx(2 / 3) and scores["QS"] is None
    assert [d["score"] for d in scores["details"]["DC"]] == [0.0, 1.0, None]
    validate({**BOOKS, "scores": scores}, "qa_instance")


def test_task_well_formed_ratings_are_normalized(recorded_llm):
    reply = json.dumps({"question_quality": {"reason": "clear", "score": 5},
                        "scenario_realism": {"reason": "plausible", "score": 4},
                        "tool_necessity": {"reason": "needs the db", "score": 1}})
    server = recorded_llm(replies=[reply])
    scores = run(judge_task, server, TASKS["task-81b0"], tools=SERVER["tools"])
    assert (scores["question_quality"], scores["scenario_realism"], scores["tool_necessity"]) == (1.0, 0.75, 0.0)
    assert scores["details"]["scenario_realism"] == {"rating": 4.0, "reason": "plausible"}
    material = server.chat_requests[0]["messages"][1]["content"]
    assert "- read_query(query: string): Execute a SELECT query" in material
    assert "in order: list_tables, describe_table, read_query" in material
    assert threshold_failure(scores, {"question_quality": 0.5, "scenario_realism": 0.5}) is None
    assert threshold_failure(scores, {"question_quality": 0.5, "tool_necessity": 0.5}) == \
        "below threshold: tool_necessity 0 < 0.5"


def test_task_partially_valid_and_out_of_range(recorded_llm):
    reply = json.dumps({"question_quality": {"score": 4}, "scenario_realism": {"score": 7}})
    scores = run(judge_task, recorded_llm(replies=[reply]), TASKS["task-trivial"])
    assert scores["question_quality"] == 0.75
    assert scores["scenario_realism"] is None and "score 7 is not one of" in scores["judge_errors"]["scenario_realism"]
    assert scores["tool_necessity"] is None and scores["judge_errors"]["tool_necessity"].startswith(
        "no 'tool_necessity' in the reply")
    assert threshold_failure(scores, {"question_quality": 0.5}) is None  # only thresholded dimensions matter
    validate({**TASKS["task-trivial"], "scores": scores}, "task")
    assert threshold_failure(scores, {"tool_necessity": 0.1}).startswith("unscored: tool_necessity (no 'tool_")


def test_task_malformed_reply_scores_nothing(recorded_llm):
    scores = run(judge_task, recorded_llm(replies=["Great task, 5/5 on everything!"]), TASKS["task-81b0"],
                 attempts=2)
    assert [scores[d] for d in ("question_quality", "scenario_realism", "tool_necessity")] == [None, None, None]
    assert all(e.startswith("unparseable reply") for e in scores["judge_errors"].values())


def test_task_judge_falls_back_when_the_endpoint_refuses_json_schema(recorded_llm):
    refusal = Failure(status=400, body='{"error": {"message": "response_format is not supported"}}')
    reply = "Sure!\n```json\n" + json.dumps({name: {"score": 3} for name in
                                             ("question_quality", "scenario_realism", "tool_necessity")}) + "\n```"
    server = recorded_llm(replies=[reply], failures=[refusal, refusal])  # json_schema, then json_object, refused
    scores = run(judge_task, server, TASKS["task-81b0"])
    assert [scores[d] for d in ("question_quality", "scenario_realism", "tool_necessity")] == [0.5, 0.5, 0.5]
    first, second, third = server.chat_requests
    assert [request.get("response_format", {}).get("type") for request in (first, second, third)] == \
        ["json_schema", "json_object", None]  # then prompt + parse
    assert "(no tool list given)" in third["messages"][1]["content"]
    assert requests_for(server, "task_quality") == [first, second, third]
