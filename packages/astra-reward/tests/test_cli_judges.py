"""`astra-reward judge-*` commands over the bundled records, with recorded judge replies.

Replies are recorded and served by a real loopback HTTP server (`recorded_llm`); the commands run
in-process through click.
"""

import json

import pytest
from astra_core.schema import validate
from astra_reward.bundled import data_path
from astra_reward.cli import main
from click.testing import CliRunner
from judge_replies import router, score

DATA = data_path()
GOOD_TRAJECTORY = {"query_understanding": score(1), "query_planning": score(1), "round_understanding": score(1),
                   "round_planning": score(1), "answer_correlation": score(1), "answer_faithfulness": score(0.5),
                   # the sloppy trajectory repeats a call and calls an undefined tool
                   "tool_conciseness": lambda body: json.dumps(
                       {"calls": [{"index": i, "score": 0 if "get_forecast" in body["messages"][1]["content"]
                                   and i % 2 == 0 else 1} for i in range(1, 5)]})}


def invoke(server, *args):
    result = CliRunner().invoke(main, [*map(str, args), "--base-url", server.base_url, "--max-retries", "0"])
    return result, [json.loads(line) for line in result.stdout.splitlines()]


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_judge_trajectory_adds_scores_and_filters(recorded_llm, tmp_path):
    server = recorded_llm(replies=[router(GOOD_TRAJECTORY)])
    rejects = tmp_path / "rejects.jsonl"
    result, records = invoke(server, "judge-trajectory", DATA / "trajectories.jsonl", "--min-score", "0.9",
                             "--rejects", rejects, "--max-tokens", "300")
    assert result.exit_code == 0, result.output
    (kept,) = records
    assert kept["id"] == "traj-geo-good" and kept["scores"]["overall"] >= 0.9
    validate(kept, "trajectory")
    step = kept["meta"]["provenance"][-1]
    assert step["command"] == "astra-reward judge-trajectory" and step["model"] == "recorded"
    (rejected,) = read(rejects)
    assert rejected["id"] == "traj-weather-sloppy" and rejected["reason"].startswith("below min score: overall")
    assert all(body["max_tokens"] == 300 for body in server.chat_requests)
    assert "llm: " in result.stderr and "requests" in result.stderr


def test_unscored_records_are_rejected_with_the_reason(recorded_llm, tmp_path):
    server = recorded_llm(replies=["cannot say"])
    rejects = tmp_path / "rejects.jsonl"
    result, records = invoke(server, "judge-trajectory", DATA / "trajectories.jsonl", "--min-score", "0",
                             "--attempts", "1", "--rejects", rejects)
    assert result.exit_code == 0 and records == []
    reasons = [r["reason"] for r in read(rejects)]
    assert all(reason.startswith("unscored: no overall; judge output unusable for QU (unparseable reply")
               for reason in reasons)
    # Without --min-score the record is kept with its documented-missing scores.
    _, records = invoke(server, "judge-trajectory", DATA / "trajectories.jsonl", "--attempts", "1")
    assert [r["scores"]["overall"] for r in records] == [None, None]
    assert all("QU" in r["scores"]["judge_errors"] for r in records)

    # Re-judging replaces an earlier run's errors; scores from elsewhere are kept.
    rescored = tmp_path / "rescored.jsonl"
    rescored.write_text("".join(json.dumps({**r, "scores": {**r["scores"], "human": 1}}) + "\n" for r in records))
    _, again = invoke(recorded_llm(replies=[router(GOOD_TRAJECTORY)]), "judge-trajectory", rescored)
    assert all(r["scores"]["judge_errors"] == {} and r["scores"]["human"] == 1 for r in again)


def test_judge_qa_command(recorded_llm, tmp_path):
    def items(body):
        ids = [1, 2, 3] if "Tolkien" in body["messages"][1]["content"] else [1, 2]
        return json.dumps({"items": [{"id": i, "score": 1} for i in ids]})
    server = recorded_llm(replies=[router({"qa_dependency_consistency": items, "qa_atomicity": items,
                                           "qa_sequential_rationality": items, "qa_task_completeness": score(1)})])
    rejects = tmp_path / "rejects.jsonl"
    result, records = invoke(server, "judge-qa", DATA / "qa_instances.jsonl", "--min-score", "1",
                             "--rejects", rejects)
    assert result.exit_code == 0, result.output
    assert [(r["id"], r["scores"]["QS"]) for r in records] == [("qa-geo-7", 1.0)]
    (rejected,) = read(rejects)  # the structural SR check lowers qa-books-3
    assert rejected["id"] == "qa-books-3" and rejected["record"]["scores"]["SR"] < 1
    validate(records[0], "qa_instance")


def test_judge_qa_refuses_a_dependency_on_a_missing_sub_question_before_judging(recorded_llm, tmp_path):
    """A decomposition whose dependency names a sub-question it does not have breaks the qa_instance kind
    (astra_core.invariants): with --skip-bad it goes to --rejects naming line and field, and no judge is asked
    about it; the valid instance beside it is scored. Judge replies are recorded."""
    def items(body):
        return json.dumps({"items": [{"id": i, "score": 1} for i in (1, 2)]})
    server = recorded_llm(replies=[router({"qa_dependency_consistency": items, "qa_atomicity": items,
                                           "qa_sequential_rationality": items, "qa_task_completeness": score(1)})])
    good = json.loads((DATA / "qa_instances.jsonl").read_text().splitlines()[0])
    dangling = {**json.loads(json.dumps(good)), "id": "qa-dangling", "main_question": "How tall is Mount Valdor?"}
    dangling["decomposition_trace"][1]["dependency"] = [7]
    inputs, rejects = tmp_path / "qa.jsonl", tmp_path / "rejects.jsonl"
    inputs.write_text(json.dumps(dangling) + "\n" + json.dumps(good) + "\n")
    result, records = invoke(server, "judge-qa", inputs, "--skip-bad", "--rejects", rejects)
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in records] == [good["id"]]
    (rejected,) = read(rejects)
    assert rejected["id"] == "qa-dangling" and rejected["source"] == f"{inputs}:1"
    assert rejected["reason"].startswith(f"malformed: {inputs}:1: record 'qa-dangling': field "
                                         "decomposition_trace[1].dependency: not a valid qa_instance: sub-question 2 "
                                         "depends on 7, which no sub-question of the decomposition has")
    assert server.chat_requests and not any("Valdor" in json.dumps(body) for body in server.chat_requests)


def test_judge_task_thresholds_and_servers(recorded_llm, tmp_path):
    def ratings(body):
        trivial = "2 + 2" in body["messages"][1]["content"]
        values = (4, 3, 1) if trivial else (5, 4, 5)
        return json.dumps({name: {"score": v} for name, v in
                           zip(("question_quality", "scenario_realism", "tool_necessity"), values, strict=True)})
    server = recorded_llm(replies=[ratings])
    rejects = tmp_path / "rejects.jsonl"
    result, records = invoke(server, "judge-task", DATA / "tasks.jsonl", "--servers", DATA / "servers.jsonl",
                             "--min-score", "0.5", "--min-tool-necessity", "0.75", "--rejects", rejects)
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in records] == ["task-81b0"]
    (rejected,) = read(rejects)
    assert rejected["reason"] == "below threshold: tool_necessity 0 < 0.75"
    assert all("list_tables" in body["messages"][1]["content"] for body in server.chat_requests)
    validate(records[0], "task")

    # A task whose server is not in --servers is rejected, not judged blind.
    task = json.loads((DATA / "tasks.jsonl").read_text().splitlines()[0])
    task["server_id"] = "elsewhere"
    single = tmp_path / "t.jsonl"
    single.write_text(json.dumps(task) + "\n")
    invoke(server, "judge-task", single, "--servers", DATA / "servers.jsonl", "--rejects", rejects)
    assert read(rejects)[0]["reason"] == "no server: 'elsewhere' is not in --servers"


@pytest.mark.parametrize(("question", "what"), [("", "empty"), ("  \n\t ", "only whitespace")])
def test_judge_task_refuses_a_task_without_a_question_as_malformed_input(recorded_llm, tmp_path, question, what):
    """A blank question was judged (LLM calls spent rating nothing). It is malformed input naming `question`, as in
    astra-toolgraph augment: with --skip-bad it goes to --rejects naming line and field before any judge request;
    the valid task beside it is judged. Judge replies are recorded."""
    ratings = json.dumps({name: {"score": 5} for name in ("question_quality", "scenario_realism", "tool_necessity")})
    server = recorded_llm(replies=[ratings])
    good = json.loads((DATA / "tasks.jsonl").read_text().splitlines()[0])
    inputs, rejects = tmp_path / "tasks.jsonl", tmp_path / "rejects.jsonl"
    inputs.write_text(json.dumps({**good, "id": "t-blank", "question": question}) + "\n" + json.dumps(good) + "\n")
    result, records = invoke(server, "judge-task", inputs, "--servers", DATA / "servers.jsonl", "--concurrency", "1",
                             "--skip-bad", "--rejects", rejects)
    assert result.exit_code == 0, result.output
    assert "read 2 · wrote 1 from 1 · rejected 1" in result.stderr
    assert [r["id"] for r in records] == [good["id"]]
    (rejected,) = read(rejects)
    assert rejected["id"] == "t-blank" and rejected["source"] == f"{inputs}:1"
    assert rejected["reason"].startswith(f"malformed: {inputs}:1: record 't-blank': field question: the question is "
                                         f"{what}")
    assert len(server.chat_requests) == 1 and good["question"] in server.chat_requests[0]["messages"][1]["content"]
