"""Rollouts on a real MCP server (mcp-server-sqlite over stdio) and on the stateful emulator.
The policy's replies here are recorded (a real loopback HTTP server); the embedded model runs in
test_end_to_end.py."""

import asyncio
import json
import math
import sqlite3

import pytest
from astra_core import validate
from astra_core.llm import LLMClient, LLMConfig
from astra_toolgraph.emulator import EmulatorConfig, ToolEmulator
from astra_toolgraph.mcp_client import ServerPool
from astra_toolgraph.normalize import normalize_source
from astra_toolgraph.rollout import RolloutConfig, rollout
from toolgraph_helpers import invoke, read_jsonl, sqlite_source, write_jsonl


def call(name, arguments, call_id):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def task(server_id, question="Keep track of my pets.", task_id="task-1"):
    return {"id": task_id, "server_id": server_id, "question": question, "meta": {"provenance": []}}


def llm_client(server):
    return LLMClient(LLMConfig(base_url=server.base_url, model="recorded", max_retries=0))


@pytest.fixture(scope="module")
def sqlite_server(tmp_path_factory):
    db = tmp_path_factory.mktemp("db") / "pets.db"
    (server,) = asyncio.run(normalize_source(sqlite_source(db)))
    return server, db


def test_real_calls_on_a_deployed_server_in_parallel(sqlite_server, recorded_llm, tmp_path):
    server, db = sqlite_server
    llm = recorded_llm(replies=[
        {"content": None, "tool_calls": [call("create_table", {"query": "CREATE TABLE pets (name TEXT, kind TEXT)"},
                                              "c1")]},
        {"content": None, "tool_calls": [
            call("write_query", {"query": "INSERT INTO pets VALUES ('Rex', 'dog')"}, "c2"),
            call("write_query", {"query": "INSERT INTO pets VALUES ('Tom', 'cat')"}, "c3")]},
        {"content": None, "tool_calls": [call("read_query", {"query": "SELECT name FROM pets ORDER BY name"}, "c4"),
                                         call("drop_everything", {}, "c5")]},
        "You have two pets: Rex and Tom.",
    ])
    servers = write_jsonl(tmp_path / "servers.jsonl", [server])
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [task(server["id"])])
    out = tmp_path / "trajectories.jsonl"
    invoke("rollout", tasks, "--servers", servers, "--base-url", llm.base_url, "--model", "recorded",
           "--tool-choice", "first-required", "--server-log", tmp_path / "server.log", "-o", out)
    (trajectory,) = read_jsonl(out)
    validate(trajectory, "trajectory")
    tool_messages = {m["tool_call_id"]: m["content"] for m in trajectory["messages"] if m["role"] == "tool"}
    assert "Rex" in tool_messages["c4"] and "Tom" in tool_messages["c4"]  # the real database answered
    assert tool_messages["c5"] == "Error: unknown tool 'drop_everything'"
    assert trajectory["messages"][-1] == {"role": "assistant", "content": "You have two pets: Rex and Tom."}
    meta = trajectory["meta"]["rollout"]
    assert meta["backend"] == "mcp" and meta["finish_reason"] == "no_tool_call" and meta["tool_calls"] == 5
    assert meta["tool_choice"] == {"mode": "first-required", "forced_turns": [0]}
    assert [r["tool_choice"] for r in llm.chat_requests] == ["required", "auto", "auto", "auto"]
    assert "output_schema" not in json.dumps(llm.chat_requests[0]["tools"])  # stripped before the endpoint
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT count(*) FROM pets").fetchone()[0] == 2


def test_max_turns_cuts_an_episode_that_keeps_calling(sample_servers, recorded_llm):
    server = next(s for s in sample_servers if s["id"] == "order-desk")
    listing = {"content": None, "tool_calls": [call("list_customer_orders", {"customer_email": "a@b.c"}, "c")]}
    llm = recorded_llm(replies=[listing, '{"orders": []}', listing])

    async def go():
        async with llm_client(llm) as client:
            return await rollout(client, task("order-desk"), server, ServerPool(),
                                 RolloutConfig(max_turns=2, tool_choice="required",
                                               emulator=EmulatorConfig(failure_rate=0.0)))

    trajectory = asyncio.run(go())
    meta = trajectory["meta"]["rollout"]
    assert meta["finish_reason"] == "max_turns" and meta["turns"] == 2 and meta["tool_choice"]["forced_turns"] == [0, 1]
    assert [m["role"] for m in trajectory["messages"]] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert trajectory["messages"][-1]["content"] == '{"orders": []}'  # the repeated read answered from the session
    assert len(llm.chat_requests) == 3


def order_desk(sample_servers):
    return next(s for s in sample_servers if s["id"] == "order-desk")


def test_the_emulator_keeps_session_history_and_checks_arguments(sample_servers, recorded_llm):
    # the first reply as a reasoning model served without a reasoning parser writes it: its thoughts are not output
    llm = recorded_llm(replies=['<think>An order id like A-7 fits.</think>\n```json\n{"order_id": "A-7", "total": 12.5}\n```',
                                '{"status": "shipped", "eta": "Friday"}'])

    async def go():
        async with llm_client(llm) as client:
            emulator = ToolEmulator(client, order_desk(sample_servers), "session-1", EmulatorConfig(failure_rate=0.0))
            created = await emulator.call("create_order", {"product_id": "p1", "quantity": 2, "customer_email": "a@b.c"})
            status = await emulator.call("get_order_status", {"order_id": "A-7"})
            again = await emulator.call("get_order_status", {"order_id": "A-7"})
            invalid = await emulator.call("create_order", {"product_id": "p1", "quantity": 0, "customer_email": "a"})
            return created, status, again, invalid, emulator.history

    created, status, again, invalid, history = asyncio.run(go())
    assert created[0].content == '{"order_id": "A-7", "total": 12.5}'
    assert again[0].content == status[0].content  # a repeated read returns what it returned before
    assert len(llm.chat_requests) == 2
    assert 'create_order({"product_id": "p1"' in llm.chat_requests[1]["messages"][1]["content"]
    assert '-> {"order_id": "A-7", "total": 12.5}' in llm.chat_requests[1]["messages"][1]["content"]
    assert not invalid[0].ok and invalid[0].content.startswith("Error: invalid arguments: quantity")
    assert [h["ok"] for h in history] == [True, True, False]


def test_injected_failures_follow_the_rate_and_the_seed(sample_servers):
    server = order_desk(sample_servers)
    config = EmulatorConfig(failure_rate=0.2, seed=11)
    draws = [ToolEmulator(None, server, f"s{i}", config)._injected_failure(k) for i in range(500) for k in range(10)]
    failed = [d for d in draws if d is not None]
    # Hoeffding: |rate - 0.2| < sqrt(ln(2 / 1e-9) / (2 n)) with probability 1 - 1e-9.
    assert abs(len(failed) / len(draws) - 0.2) < math.sqrt(math.log(2e9) / (2 * len(draws)))
    assert {kind for kind, _ in failed} == {"timeout", "unreachable"}
    again = [ToolEmulator(None, server, f"s{i}", config)._injected_failure(k) for i in range(500) for k in range(10)]
    assert again == draws
    assert all(ToolEmulator(None, server, "s", EmulatorConfig(failure_rate=0.0))._injected_failure(k) is None
               for k in range(100))


def test_a_doc_only_rollout_records_injected_failures(sample_servers, recorded_llm):
    server = order_desk(sample_servers)
    search = call("search_products", {"keyword": "cable"}, "c1")
    llm = recorded_llm(replies=[{"content": None, "tool_calls": [search]}, "Found nothing, sorry."])

    async def go(rate):
        async with llm_client(llm) as client:
            return await rollout(client, task("order-desk", "Find me a cable."), server, ServerPool(),
                                 RolloutConfig(emulator=EmulatorConfig(failure_rate=rate)))

    failed = asyncio.run(go(1.0))
    (execution,) = failed["meta"]["rollout"]["executions"]
    assert execution["backend"] == "emulator" and execution["injected_failure"] and not execution["ok"]
    assert failed["messages"][3]["content"].startswith("Error: ")
    assert failed["meta"]["rollout"]["emulator"] == {"failure_rate": 1.0, "seed": 0}


@pytest.mark.parametrize(("question", "what"), [("", "empty"), ("  \n\t ", "only whitespace")])
def test_rollout_refuses_a_task_without_a_question_as_malformed_input(sample_servers, recorded_llm, tmp_path,
                                                                       question, what):
    """A blank question was rolled out (the policy asked to act on nothing, LLM calls spent on it). It is malformed
    input naming `question`, as in augment: the run stops naming file, line and record, or --skip-bad sends it to
    --rejects before any LLM request; a valid task is still rolled out. The policy's reply is recorded."""
    from astra_toolgraph.cli import main
    from click.testing import CliRunner

    llm = recorded_llm(replies=["You have no open orders."])
    servers = write_jsonl(tmp_path / "servers.jsonl", [order_desk(sample_servers)])
    good = task("order-desk", "Which of my orders are still open?", task_id="t-good")
    inputs = write_jsonl(tmp_path / "tasks.jsonl", [task("order-desk", question, task_id="t-blank"), good])
    args = ["rollout", str(inputs), "--servers", str(servers), "--base-url", llm.base_url, "--model", "recorded",
            "--concurrency", "1"]
    stopped = CliRunner().invoke(main, args)
    assert stopped.exit_code == 1, stopped.output
    assert f"{inputs}:1: record 't-blank': field question: the question is {what}" in stopped.stderr
    assert llm.chat_requests == []
    out, rejects = tmp_path / "out.jsonl", tmp_path / "rejects.jsonl"
    result = CliRunner().invoke(main, [*args, "--skip-bad", "-o", str(out), "--rejects", str(rejects)])
    assert result.exit_code == 0, result.output
    assert "read 2 · wrote 1 from 1 · rejected 1" in result.stderr
    (trajectory,) = read_jsonl(out)
    assert trajectory["meta"]["parent_id"] == "t-good" and validate(trajectory, "trajectory")
    (reject,) = read_jsonl(rejects)
    assert reject["id"] == "t-blank" and reject["source"] == f"{inputs}:1"
    assert reject["reason"].startswith(f"malformed: {inputs}:1: record 't-blank': field question: the question is "
                                       f"{what}")
    assert len(llm.chat_requests) == 1 and good["question"] in str(llm.chat_requests[0]["messages"])


def test_a_server_that_sends_arguments_as_an_object_and_no_call_ids_still_makes_a_valid_trajectory(
        sample_servers, recorded_llm):
    """Some OpenAI-compatible servers send tool-call arguments as an object and leave out call ids: the client hands
    the arguments on as JSON text, the rollout numbers the calls."""
    listing = {"content": None, "tool_calls": [{"type": "function", "function": {
        "name": "list_customer_orders", "arguments": {"customer_email": "a@b.c"}}}]}
    llm = recorded_llm(replies=[listing, '{"orders": []}', "You have no orders."])

    async def go():
        async with llm_client(llm) as client:
            return await rollout(client, task("order-desk"), order_desk(sample_servers), ServerPool(),
                                 RolloutConfig(max_turns=3, emulator=EmulatorConfig(failure_rate=0.0)))

    trajectory = asyncio.run(go())
    validate(trajectory, "trajectory")
    [called] = trajectory["messages"][2]["tool_calls"]
    assert called["id"] == "call_0_0" and json.loads(called["function"]["arguments"]) == {"customer_email": "a@b.c"}
    assert trajectory["messages"][3] == {"role": "tool", "tool_call_id": "call_0_0", "content": '{"orders": []}'}
