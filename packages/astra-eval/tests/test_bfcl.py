"""BFCL v3 multi-turn: ground-truth replay, imperfect replay against bfcl-eval's own runner, a real endpoint.

The adapter runs in .venv-bfcl (bfcl-eval pins numpy 1.26.4); `astra-eval run bfcl` started from the
main environment hands over to it, exactly as a user's command would.
"""

from __future__ import annotations

import collections
import json
import re
import time
import urllib.request

import pytest
from eval_helpers import cli, helper, records

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")


def _replay_all(tmp_path, *limit: str) -> list[dict]:
    out = tmp_path / "oracle.jsonl"
    cli("run", "bfcl", "--oracle", *limit, "-o", str(out))
    return records(out)


def test_ground_truth_replay_scores_100_percent_on_all_four_categories(tmp_path):
    results = _replay_all(tmp_path, "--limit", "100")
    per_category = collections.Counter(r["category"] for r in results if r["success"])
    assert per_category == {category: 100 for category in CATEGORIES}
    assert all(r["details"]["checker"] == {"valid": True} for r in results)


@pytest.mark.slow
def test_ground_truth_replay_scores_100_percent_on_every_entry(tmp_path):
    results = _replay_all(tmp_path)
    assert collections.Counter(r["category"] for r in results if r["success"]) == {c: 200 for c in CATEGORIES}


def test_replay_with_calls_removed_scores_lower_and_exactly_as_bfcls_own_runner(tmp_path):
    out = tmp_path / "drop.jsonl"
    cli("run", "bfcl", "--oracle", "--oracle-drop-rate", "0.25", "--seed", "3", "--limit", "40", "-o", str(out))
    ours = records(out)
    theirs = helper("bfcl", "bfcl_own_runner.py", str(out), str(tmp_path / "scores"))
    for category in CATEGORIES:
        mine = [r for r in ours if r["category"] == category]
        assert len(mine) == 40
        accuracy = sum(r["success"] for r in mine) / len(mine)
        assert 0.0 < accuracy < 1.0  # some entries lost a call that mattered, some did not
        assert accuracy == pytest.approx(theirs[category]["accuracy"])
        assert sorted(r["item_id"] for r in mine if not r["success"]) == theirs[category]["failed"]


def _replay_reply(truth_by_first_message):
    """A recorded endpoint (real HTTP) that answers like a perfect model: the turn's ground-truth calls
    as OpenAI tool calls, then a text reply once their results are back."""
    import ast

    def reply(body):
        messages = body["messages"]
        turns = truth_by_first_message[messages[0]["content"]]
        turn = sum(m["role"] == "user" for m in messages) - 1
        if messages[-1]["role"] == "tool" or not turns[turn]:
            return "Done."
        names = {t["function"]["name"]: list(t["function"]["parameters"]["properties"]) for t in body["tools"]}
        calls = []
        for index, text in enumerate(turns[turn]):
            node = ast.parse(text, mode="eval").body
            arguments = {names[node.func.id][i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
            arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
            calls.append({"id": f"c{turn}_{index}", "type": "function",
                          "function": {"name": node.func.id, "arguments": json.dumps(arguments)}})
        return {"content": None, "tool_calls": calls}

    return reply


def test_endpoint_run_reveals_held_out_functions_and_scores_with_bfcl(tmp_path, recorded_llm):
    entry_id = "multi_turn_miss_func_0"
    truth = helper("bfcl", "bfcl_entry.py", "multi_turn_miss_func", entry_id)
    server = recorded_llm(replies=[_replay_reply({truth["first_message"]: truth["ground_truth"]})])
    out = tmp_path / "endpoint.jsonl"
    cli("run", "bfcl", "--category", "miss_func", "--ids", entry_id, "--base-url", server.base_url, "--seed", "5",
        "-o", str(out))
    (result,) = records(out)
    assert result["success"], result["details"]["checker"]
    assert result["meta"]["provenance"][-1]["model"] == "recorded"
    requests = server.chat_requests
    assert all(r["temperature"] == 0.6 and r["seed"] == 5 for r in requests)  # the paper's BFCL temperature
    held_turn = int(truth["held_out_turn"])
    first_at_turn = next(r for r in requests if sum(m["role"] == "user" for m in r["messages"]) == held_turn + 1)
    before = {t["function"]["name"] for t in requests[0]["tools"]}
    after = {t["function"]["name"] for t in first_at_turn["tools"]}
    assert set(truth["held_out"]) <= after and not set(truth["held_out"]) & before
    assert first_at_turn["messages"][-1]["content"].startswith("I have updated some more functions")


def test_model_that_never_calls_fails_every_turn_check(tmp_path, recorded_llm):
    server = recorded_llm(replies=["I cannot do that."])  # recorded text replies: no tool call ever
    out = tmp_path / "silent.jsonl"
    cli("run", "bfcl", "--category", "base", "--limit", "2", "--base-url", server.base_url, "-o", str(out))
    results = records(out)
    assert [r["success"] for r in results] == [False, False]
    assert all(r["details"]["checker"]["error_type"] == "multi_turn:empty_turn_model_response" for r in results)


@pytest.mark.llm
@pytest.mark.slow
def test_embedded_model_plays_a_bfcl_turn(tmp_path, llm_env):
    out = tmp_path / "embedded.jsonl"
    cli("run", "bfcl", "--category", "base", "--ids", "multi_turn_base_100", "--max-turns", "1", "--max-tokens", "8",
        "-o", str(out))
    (result,) = records(out)
    assert result["error"] is None
    assert [m["role"] for m in result["messages"][:2]] == ["user", "assistant"]
    assert result["success"] is False  # one of two turns played: BFCL scores it force-terminated


def test_with_no_endpoint_the_embedded_model_starts_before_the_hand_over(tmp_path, monkeypatch):
    # .venv-bfcl has no local model: the main environment starts it, and it stops when the run ends
    monkeypatch.delenv("ASTRA_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("ASTRA_LLM_MODEL", raising=False)
    out = tmp_path / "embedded.jsonl"
    done = cli("run", "bfcl", "--category", "base", "--ids", "multi_turn_base_100", "--max-turns", "1",
               "--max-tokens", "8", "-o", str(out))
    (result,) = records(out)
    assert result["error"] is None and [m["role"] for m in result["messages"][:2]] == ["user", "assistant"]
    [base_url] = re.findall(r"started the embedded model at (\S+)", done.stderr)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and serving(base_url):
        time.sleep(0.5)
    assert not serving(base_url), "the embedded model outlived the run"


def test_an_oracle_replay_with_no_endpoint_starts_no_model(tmp_path, monkeypatch):
    monkeypatch.delenv("ASTRA_LLM_BASE_URL", raising=False)
    done = cli("run", "bfcl", "--oracle", "--category", "base", "--limit", "1", "-o", str(tmp_path / "o.jsonl"))
    assert "embedded model" not in done.stderr and records(tmp_path / "o.jsonl")[0]["success"] is True


def serving(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=2):
            return True
    except OSError:
        return False
