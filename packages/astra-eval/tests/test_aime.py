"""AIME: answer extraction, the two decoding settings, pass rates; plus the runner's resume/timeout/concurrency."""

from __future__ import annotations

import time

import pytest
from astra_core.testing import Failure, closed_port
from astra_eval.aime import SEED_STRIDE, extract_answer, grade, last_boxed, problems
from eval_helpers import cli, records


@pytest.mark.parametrize(("text", "answer"), [
    ("so the answer is \\boxed{25}.", 25),
    ("first \\boxed{3} then finally \\boxed{204}", 204),
    ("\\boxed{\\frac{1}{2}} no wait \\boxed{073}", 73),
    ("$\\boxed{1,000}$", 1000),
    ("\\boxed{\\text{ 33 }}", 33),
    ("\\fbox{12}", 12),
    ("The area is 14, so m+n = 116", 116),  # no box: the last integer
    ("It is \\boxed{x+1} and then 55", None),  # the boxed answer is final, and it is no integer
    ("I am not sure.", None),
    ("\\boxed{17.0}", 17),
    ("\\boxed{2.5}", None),
])
def test_answer_extraction(text, answer):
    assert extract_answer(text) == answer


def test_last_boxed_balances_braces():
    assert last_boxed("\\boxed{\\dfrac{m}{n}=\\frac{3}{4}}") == "\\dfrac{m}{n}=\\frac{3}{4}"
    assert last_boxed("\\boxed{unclosed") is None


def test_grading_compares_integers_and_data_is_complete():
    assert [s["correct"] for s in grade(["\\boxed{025}", "\\boxed{26}", "25"], "25")] == [True, False, True]
    assert len(problems("aime2024")) == 30 and len(problems("aime2025")) == 30


def test_run_uses_both_settings_and_averages_samples(tmp_path, recorded_llm):
    answers = {p["problem"][:60]: p["answer"] for year in ("aime2024", "aime2025") for p in problems(year).values()}

    def reply(body):  # recorded replies: right on top-k 20, wrong on top-k -1
        expected = next(a for start, a in answers.items() if body["messages"][0]["content"].startswith(start))
        return f"\\boxed{{{expected if body['top_k'] == 20 else int(expected) + 1}}}"

    server = recorded_llm(replies=[reply])
    out = tmp_path / "aime.jsonl"
    cli("run", "aime", "--limit", "2", "--samples", "1", "--seed", "11", "--base-url", server.base_url, "-o", str(out))
    results = records(out)
    assert len(results) == 8  # 2 years x 2 problems x 2 settings
    assert {(r["setting"], r["score"]) for r in results} == {("topk20", 1.0), ("topk-1", 0.0)}
    sampling = {(r["temperature"], r["top_p"], r["top_k"], r["n"], r["seed"]) for r in server.chat_requests}
    assert sampling == {(0.6, 0.95, 20, 1, 11), (0.6, 0.95, -1, 1, 11)}
    table = cli("summary", str(out)).stdout
    assert "AIME2024" in table and "50.00" in table  # final = mean of the two settings (100 and 0)


def test_an_endpoint_that_ignores_n_is_asked_again_for_the_samples_it_did_not_send(tmp_path, recorded_llm):
    """The recorded endpoint sends one choice whatever n asks (as llama.cpp's and TGI's servers do): the score is
    still the pass rate over --samples samples, from further requests with other seeds, not over the one sent."""
    expected = problems("aime2024")[next(iter(problems("aime2024")))]["answer"]
    server = recorded_llm(replies=[f"\\boxed{{{expected}}}", "\\boxed{-1}", f"\\boxed{{{expected}}}"])
    out = tmp_path / "aime.jsonl"
    cli("run", "aime", "--year", "aime2024", "--setting", "topk20", "--limit", "1", "--samples", "3", "--seed", "11",
        "--base-url", server.base_url, "-o", str(out))
    [result] = records(out)
    assert result["details"]["n"] == 3 and result["details"]["requests"] == 3
    assert [s["answer"] for s in result["details"]["samples"]] == [int(expected), -1, int(expected)]
    assert result["score"] == pytest.approx(2 / 3)
    assert [(r["n"], r["seed"]) for r in server.chat_requests] == [(3, 11), (2, 11 + SEED_STRIDE),
                                                                   (1, 11 + 2 * SEED_STRIDE)]


def test_resume_skips_finished_items_and_timeouts_are_recorded_as_failures(tmp_path, recorded_llm):
    slow = recorded_llm(failures=[Failure(status=200, sleep=3.0)] * 50)
    out = tmp_path / "aime.jsonl"
    cli("run", "aime", "--year", "aime2024", "--setting", "topk20", "--limit", "2", "--samples", "1",
        "--item-timeout", "0.5", "--max-retries", "0", "--base-url", slow.base_url, "-o", str(out))
    timed_out = records(out)
    assert len(timed_out) == 2 and all(r["error"].startswith("timeout") and r["score"] == 0 for r in timed_out)

    fast = recorded_llm(replies=["\\boxed{0}"])
    done = cli("run", "aime", "--year", "aime2024", "--setting", "topk20", "--limit", "3", "--samples", "1",
               "--base-url", fast.base_url, "-o", str(out), "--resume")
    assert "skipped 2 done (resume)" in done.stderr
    assert len(records(out)) == 3 and len(fast.chat_requests) == 1


def test_concurrency_limits_requests_in_flight(tmp_path, recorded_llm):
    def slow_reply(body):  # recorded reply, slow enough for requests to overlap
        time.sleep(0.2)
        return "\\boxed{1}"

    server = recorded_llm(replies=[slow_reply])
    out = tmp_path / "aime.jsonl"
    cli("run", "aime", "--limit", "4", "--samples", "1", "--concurrency", "2", "--base-url", server.base_url,
        "-o", str(out))
    assert len(records(out)) == 16
    assert server.max_in_flight == 2


@pytest.mark.llm
@pytest.mark.slow
def test_embedded_model_answers_aime_samples(tmp_path, llm_env):
    out = tmp_path / "embedded.jsonl"
    cli("run", "aime", "--year", "aime2024", "--limit", "1", "--samples", "2", "--max-tokens", "8", "-o", str(out))
    results = records(out)
    assert [r["setting"] for r in results] == ["topk20", "topk-1"]
    assert all(r["details"]["n"] == 2 and r["error"] is None for r in results)
    assert all(0.0 <= r["score"] <= 1.0 for r in results)


def test_an_endpoint_that_does_not_answer_stops_the_run_before_any_item(tmp_path):
    """A wrong --base-url with --model given (no model to look up): one line, exit 1, no item scored 0 for it."""
    port = closed_port()
    out = tmp_path / "aime.jsonl"
    done = cli("run", "aime", "--limit", "2", "--samples", "1", "--model", "m", "--max-retries", "0",
               "--base-url", f"http://127.0.0.1:{port}/v1", "-o", str(out), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"Error: http://127.0.0.1:{port}/v1/models: the endpoint "
                                                           "does not answer")
    assert not out.exists() or records(out) == []
