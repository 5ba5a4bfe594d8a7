"""Each judge end to end against the real embedded model (SmolLM2-135M over HTTP).

The tiny model rarely writes the JSON asked for: these tests assert that the path is real and
that every score is either on its scale or documented-missing (null with a judge_errors entry),
never a quality level. max_tokens is kept small: the model generates ~10–20 tokens/s here.

The task judge (one request) runs by default; the trajectory judge (5 requests) and the Q–A judge
(4 requests) take minutes on a shared 2-core machine and are marked slow: they exercise the same
client → endpoint → parsing path on more judgments. A long per-request timeout keeps a slow CPU
server from being flooded by client retries of requests it is still computing.
"""

import json

import pytest
from astra_reward.cli import main
from click.testing import CliRunner

pytestmark = pytest.mark.llm

FAST = ["--max-tokens", "24", "--attempts", "1", "--max-chars", "300", "--timeout", "1800", "--max-retries", "1"]
META = {"provenance": []}
TRAJECTORY = {
    "id": "tiny-trajectory", "meta": META,
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                                 "parameters": {"type": "object", "properties": {
                                                     "city": {"type": "string"}}}}}],
    "messages": [{"role": "user", "content": "Is it warm in Oslo?"},
                 {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                     "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "{\"temp_c\": 3}"},
                 {"role": "assistant", "content": "No: it is 3 °C in Oslo."}]}
QA_INSTANCE = {"id": "tiny-qa", "meta": META, "main_question": "What is the capital of Norway?",
               "final_answer": "Oslo", "decomposition_trace": [
                   {"_uuid": 1, "hop_level": 1, "sub_question": "What is the capital of Norway?", "is_parallel": False,
                    "dependency": None, "sub_answer": "Oslo"}]}
TASK = {"id": "tiny-task", "meta": META, "server_id": "weather", "question": "Will it rain in Oslo tomorrow?"}


def judged(command: str, record: dict) -> dict:
    result = CliRunner().invoke(main, [command, *FAST], input=json.dumps(record) + "\n")
    assert result.exit_code == 0, result.output
    (out,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert out["meta"]["provenance"][-1]["model"]  # the endpoint's model name was recorded
    return out["scores"]


def assert_well_formed(scores: dict, scales: dict[str, tuple], aggregate: str | None) -> None:
    skipped = scores.get("not_applicable", [])
    for dimension, scale in scales.items():
        value = scores[dimension]
        if value is None:
            assert dimension in skipped or scores["judge_errors"].get(dimension), dimension
        else:
            assert any(abs(value - point) < 1e-9 for point in scale), (dimension, value)
            assert dimension not in scores["judge_errors"]
    if aggregate:
        missing = [d for d in scales if d not in skipped and scores[d] is None]
        assert (scores[aggregate] is None) == bool(missing)
        if scores[aggregate] is not None:
            assert 0.0 <= scores[aggregate] <= 1.0


@pytest.mark.slow
def test_trajectory_judge_end_to_end(llm_env):
    scores = judged("judge-trajectory", TRAJECTORY)
    levels = (0.0, 0.25, 0.5, 0.75, 1.0)
    assert_well_formed(scores, {"QU": levels, "QP": levels, "TCU": (), "TCP": (), "TCS": (1.0,), "TC": (0.0, 1.0),
                                "FA": levels}, "overall")
    assert list(scores["not_applicable"]) == ["TCU", "TCP"] and scores["TCS"] == 1.0


@pytest.mark.slow
def test_qa_judge_end_to_end(llm_env):
    scores = judged("judge-qa", QA_INSTANCE)
    assert_well_formed(scores, {d: (0.0, 1.0) for d in ("DC", "SA", "SR", "TC")}, "QS")


def test_task_judge_end_to_end(llm_env):
    scores = judged("judge-task", TASK)
    assert_well_formed(scores, {d: (0.0, 0.25, 0.5, 0.75, 1.0) for d in
                                ("question_quality", "scenario_realism", "tool_necessity")}, None)
