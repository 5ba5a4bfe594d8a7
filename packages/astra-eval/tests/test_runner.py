"""Every attempted item is scored; only malformed items are rejected; only astra-eval's own bugs fail the run."""

from __future__ import annotations

import asyncio
import json

import pytest
from astra_core.llm.client import LLMError
from astra_core.schema import RecordError
from astra_core.stage import StageOptions
from astra_eval import results
from astra_eval.errors import HarnessError, describe, raised_by_harness
from astra_eval.results import eval_result, make_item
from astra_eval.runner import run_items
from eval_helpers import records


def _raise(exc_type, message):
    raise exc_type(message)


def _astra_bug():
    return results.eval_result({}, success=True, score=1.0)  # KeyError inside astra_eval.results


def test_errors_are_the_items_unless_raised_by_astra_evals_own_code():
    def caught(fn):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            return exc
        raise AssertionError("no exception")

    assert raised_by_harness(caught(_astra_bug))
    assert not raised_by_harness(caught(lambda: json.loads('{"broken": ')))  # the model's bad arguments
    assert not raised_by_harness(caught(lambda: _raise(ValueError, "AssistantMessage must have either content")))
    assert not raised_by_harness(LLMError("HTTP 400: context length"))
    assert describe(LLMError("POST chat/completions failed: HTTP 400")) == \
        "endpoint: POST chat/completions failed: HTTP 400"
    assert describe(TimeoutError(), item_timeout=5) == "timeout: item did not finish within 5s"
    assert describe(ValueError("bad\nsecond line")) == "ValueError: bad"


def _run(tmp_path, run_item, items: list[dict], skip_bad: bool = True) -> tuple[list[dict], list[dict]]:
    inputs, out, rejects = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "rejects.jsonl"
    inputs.write_text("".join(json.dumps(item) + "\n" for item in items))
    options = StageOptions(inputs=(str(inputs),), output=str(out), rejects=str(rejects), skip_bad=skip_bad)
    try:
        run_items("astra-eval run test", options, run_item, concurrency=2, item_timeout=2.0, model="m", seed=None)
    finally:
        scored, rejected = records(out), records(rejects)
    return scored, rejected


def test_every_error_while_an_item_runs_is_scored_0_and_malformed_items_are_rejected(tmp_path):
    async def run_item(item: dict) -> dict:
        behaviour = item["item_id"]
        if behaviour == "model-error":
            json.loads('{"oops": ')
        if behaviour == "endpoint":
            raise LLMError("POST chat/completions failed: HTTP 400: maximum context length")
        if behaviour == "slow":
            await asyncio.sleep(10)
        return eval_result(item, success=True, score=1.0)

    good = [make_item("bfcl", "multi_turn_base", name, 0, None) for name in ("ok", "model-error", "endpoint", "slow")]
    malformed = {**make_item("bfcl", "multi_turn_base", "x", 0, None), "trial": "first"}
    scored, rejected = _run(tmp_path, run_item, [*good, malformed])
    by_task = {r["item_id"]: r for r in scored}
    assert set(by_task) == {"ok", "model-error", "endpoint", "slow"}  # every attempted item has its result
    assert by_task["ok"]["success"] and by_task["ok"]["error"] is None
    for name, kind in (("model-error", "JSONDecodeError: "), ("endpoint", "endpoint: "), ("slow", "timeout: ")):
        assert by_task[name]["success"] is False and by_task[name]["score"] == 0.0
        assert by_task[name]["error"].startswith(kind)
    assert [r["id"] for r in rejected] == [malformed["id"]]
    assert rejected[0]["reason"] == (f"malformed: {tmp_path / 'items.jsonl'}:5: record {malformed['id']!r}: "
                                     "field trial: must be int, got 'first'")
    with pytest.raises(RecordError, match=r"items\.jsonl:2: .*field trial: must be int"):  # as a malformed line
        _run(tmp_path, run_item, [good[0], malformed], skip_bad=False)


def test_a_bug_in_astra_eval_leaves_its_item_unscored_and_fails_the_run(tmp_path):
    async def run_item(item: dict) -> dict:
        if item["item_id"] == "bug":
            return _astra_bug()
        return eval_result(item, success=False, score=0.0)

    items = [make_item("bfcl", "multi_turn_base", name, 0, None) for name in ("fine", "bug")]
    with pytest.raises(HarnessError, match="1 items hit an error in astra-eval itself"):
        _run(tmp_path, run_item, items)
    assert [r["item_id"] for r in records(tmp_path / "out.jsonl")] == ["fine"]
    (reject,) = records(tmp_path / "rejects.jsonl")
    assert reject["record"]["item_id"] == "bug" and reject["reason"].startswith("error: KeyError")


def test_an_endpoint_that_does_not_answer_stops_the_run_unscored_and_resume_runs_the_rest(tmp_path):
    """An endpoint that refuses a request is the model's failure on that item (scored 0, above); one that does not
    answer at all (LLMUnavailable: no connection after every retry) is no evidence about the model: the run stops,
    nothing is scored 0 for it, and --resume runs what is left."""
    from astra_core.llm import LLMUnavailable
    from astra_core.stage import StageError

    down = {"now": True}

    async def run_item(item: dict) -> dict:
        if item["item_id"] == "c" and down["now"]:
            raise LLMUnavailable("http://127.0.0.1:9/v1/chat/completions: the endpoint does not answer")
        return eval_result(item, success=True, score=1.0)

    items = [make_item("bfcl", "multi_turn_base", name, 0, None) for name in "abcde"]
    with pytest.raises(StageError, match="the endpoint does not answer"):
        _run(tmp_path, run_item, items)
    scored = records(tmp_path / "out.jsonl")
    assert "c" not in {r["item_id"] for r in scored} and all(r["score"] == 1.0 for r in scored)
    assert records(tmp_path / "rejects.jsonl") == []
    down["now"] = False
    inputs, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    options = StageOptions(inputs=(str(inputs),), output=str(out), rejects=str(tmp_path / "rejects.jsonl"), resume=True)
    run_items("astra-eval run test", options, run_item, concurrency=2, item_timeout=2.0, model="m", seed=None)
    assert sorted(r["item_id"] for r in records(out)) == list("abcde")


def test_a_run_opens_one_client_per_endpoint_and_closes_them_all(monkeypatch):
    import asyncio

    from astra_core.llm.client import LLMClient, LLMConfig
    from astra_eval.runs import WithClient

    closed = []
    monkeypatch.setattr(LLMClient, "aclose", lambda self: asyncio.sleep(0, closed.append(self)))
    agent = LLMConfig(base_url="http://127.0.0.1:9/v1", model="agent")
    same_endpoint = LLMConfig(base_url="http://127.0.0.1:9/v1", model="agent", max_tokens=8)
    user = LLMConfig(base_url="http://127.0.0.1:9/v1", model="user")
    made = []

    def make(*clients):
        made.append(clients)

        async def run_item(item):
            return item

        return run_item

    async def run() -> None:
        with_clients = WithClient(make, agent, same_endpoint, user)
        assert [await with_clients({"id": "a"}), await with_clients({"id": "b"})] == [{"id": "a"}, {"id": "b"}]
        await with_clients.close()

    asyncio.run(run())
    (clients,) = made  # made once, on the first item
    assert clients[0] is clients[1] and clients[2] is not clients[0]  # the same endpoint and model share one
    assert sorted(map(id, closed)) == sorted({id(clients[0]), id(clients[2])})  # each closed once, at the end
