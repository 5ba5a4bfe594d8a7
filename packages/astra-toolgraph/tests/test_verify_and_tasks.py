"""Chain verification, task construction and augmentation. LLM replies here are recorded (served by a
real loopback HTTP server, `recorded_llm`); the embedded model runs in test_end_to_end.py."""

import asyncio
import json

import pytest
from astra_core.llm import LLMClient, LLMConfig
from astra_core.stage import Rejected
from astra_toolgraph.chains import SynthesisConfig, synthesize_chains
from astra_toolgraph.tasks import AugmentConfig, TaskConfig, augment_task, chain_tasks, server_tasks
from astra_toolgraph.verify import VerifyConfig, dependency_check, verify_chain
from toolgraph_helpers import invoke, read_jsonl, write_jsonl


def order_desk(sample_servers):
    return next(s for s in sample_servers if s["id"] == "order-desk")


def chain(tools, task=None):
    return {"id": "c1", "server_id": "order-desk", "tools": tools, "task": task, "origin": "walk",
            "meta": {"provenance": []}}


def run(coro_fn, server):
    async def go():
        async with LLMClient(LLMConfig(base_url=server.base_url, model="recorded", max_retries=0)) as llm:
            return await coro_fn(llm)
    return asyncio.run(go())


def test_dependency_check_needs_identifiers_from_earlier_calls(sample_servers):
    server = order_desk(sample_servers)
    good = dependency_check(server, ["search_products", "create_order", "get_order_status"], None)
    assert good["ok"]
    sources = {(s["tool"], s["param"]): s["source"] for s in good["supports"]}
    assert sources[("create_order", "product_id")] == "search_products.products[].product_id"
    assert sources[("create_order", "customer_email")] == "task"
    assert sources[("get_order_status", "order_id")] == "create_order.order_id"
    bad = dependency_check(server, ["get_order_status", "create_order"], None)
    assert not bad["ok"] and [(u["tool"], u["param"]) for u in bad["unsupported"]] == [
        ("get_order_status", "order_id"), ("create_order", "product_id")]
    # A task that states the concrete id supports it.
    assert dependency_check(server, ["get_order_status"], "Where is my order A-1042?")["ok"]


def test_back_translation_gives_a_walk_its_task(sample_servers, recorded_llm):
    llm = recorded_llm(replies=['{"valid": true, "query": "Buy a USB cable and tell me when it arrives."}'])
    verified = run(lambda c: verify_chain(c, chain(["search_products", "create_order", "get_order_status"]),
                                          order_desk(sample_servers), VerifyConfig()), llm)
    assert verified["task"] == "Buy a USB cable and tell me when it arrives."
    assert verified["verification"]["coherence"]["method"] == "back-translation"
    assert verified["verification"]["dependency"]["ok"]
    assert "<ToolInvocationChain>" in llm.chat_requests[0]["messages"][1]["content"]


@pytest.mark.parametrize(("reply", "reason"), [
    ('{"coherent": false, "reason": "cancelling before ordering makes no sense"}', "coherence: cancelling before"),
    ("I think it is fine.", "coherence: the judge's reply is unusable"),
])
def test_incoherent_or_unjudgeable_chains_are_rejected(sample_servers, recorded_llm, reply, reason):
    llm = recorded_llm(replies=[reply])
    with pytest.raises(Rejected, match=reason):
        run(lambda c: verify_chain(c, chain(["list_customer_orders", "cancel_order"], "Cancel my last order"),
                                   order_desk(sample_servers), VerifyConfig()), llm)


def test_verify_command_sends_failures_to_rejects(sample_servers, tmp_path):
    servers = write_jsonl(tmp_path / "servers.jsonl", sample_servers)
    chains = write_jsonl(tmp_path / "chains.jsonl", [
        chain(["search_products", "create_order", "cancel_order"]), {**chain(["cancel_order"]), "id": "c2"}])
    rejects = tmp_path / "rejects.jsonl"
    result = invoke("verify-chains", chains, "--servers", servers, "--no-coherence", "--rejects", rejects)
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["c1"]
    (reject,) = read_jsonl(rejects)
    assert reject["id"] == "c2" and reject["reason"].startswith("dependency: cancel_order.order_id")


def test_chain_and_server_tasks_from_numbered_lines(sample_servers, recorded_llm):
    server = order_desk(sample_servers)
    llm = recorded_llm(replies=[
        "Here are the requests:\n1. Order two USB-C cables for ana@example.com and tell me when they arrive.\n2. ok",
        "1. Find me a cheap phone case and order one for bo@example.com.\n- Which of my orders (cy@example.com) "
        "are still open?\n3. Cancel everything"])
    walked = {**chain(["search_products", "create_order", "get_order_status"]), "task": "Order a cable"}
    from_chain = run(lambda c: chain_tasks(c, walked, server, TaskConfig(per_chain=2)), llm)
    from_server = run(lambda c: server_tasks(c, server, TaskConfig(per_server=2)), llm)
    assert [t["question"] for t in from_chain] == [
        "Order two USB-C cables for ana@example.com and tell me when they arrive."]
    assert from_chain[0]["chain"] == walked["tools"] and from_chain[0]["origin"] == "chain"
    assert from_chain[0]["meta"]["parent_id"] == "c1" and from_chain[0]["language"] == "en"
    assert [t["origin"] for t in from_server] == ["server", "server"] and from_server[0]["chain"] is None
    assert "It serves a task like: Order a cable" in llm.chat_requests[0]["messages"][1]["content"]


def test_a_reasoning_models_thoughts_are_not_taken_for_tasks_rewrites_or_chains(sample_servers, recorded_llm):
    """Recorded replies of a reasoning model served without a reasoning parser: its <think> lines are long enough
    to pass for requests, and were taken as tasks (and as a rewrite) before the reply's own lines."""
    server = order_desk(sample_servers)
    thinking = ("<think>\nThe user wants two requests that use the order tools for real customers.\n"
                "Maybe something about cables and delivery dates would work well here.\n</think>\n")
    llm = recorded_llm(replies=[thinking + "1. Order two USB-C cables for ana@example.com and tell me when they "
                                           "arrive.\n2. Which of my orders (cy@example.com) are still open?"])
    tasks = run(lambda c: server_tasks(c, server, TaskConfig(per_server=2)), llm)
    assert [t["question"] for t in tasks] == [
        "Order two USB-C cables for ana@example.com and tell me when they arrive.",
        "Which of my orders (cy@example.com) are still open?"]
    task = {"id": "t1", "server_id": "s", "question": "Which tables does my database have?", "language": "en",
            "chain": None, "meta": {"provenance": []}}
    rewrite = "I should make it sound more polite and less direct than the original question.\n</think>\n\n" \
              "Could you list every table in my database, please?"  # R1-style: the block opened in the prompt
    llm = recorded_llm(replies=[rewrite, '{"same_intent": true, "reason": "same goal"}'])
    _, variant = run(lambda c: augment_task(c, task, AugmentConfig(axes=("diversity",))), llm)
    assert variant["question"] == "Could you list every table in my database, please?"
    # chains read from a reply that is not JSON: only the lines after the reasoning name the chains
    prose = ("<think>search_products then create_order, or get_order_status then cancel_order?</think>\n"
             "- search_products, then create_order, then get_order_status")
    chains = run(lambda c: synthesize_chains(c, server, SynthesisConfig(), seed=0), recorded_llm(replies=[prose]))
    assert [(c["tools"], c["parse"]) for c in chains] == [
        (["search_products", "create_order", "get_order_status"], "text")]


def test_augmentation_keeps_language_and_intent(recorded_llm):
    task = {"id": "t1", "server_id": "s", "question": "Which tables does my database have?", "language": "en",
            "chain": None, "meta": {"provenance": []}}
    llm = recorded_llm(replies=[
        "Could you list every table in my database, please?",   # diversity rewrite
        '{"same_intent": true, "reason": "same goal"}',
        "¿Qué tablas tiene mi base de datos y cuántas filas tiene la más grande?",  # complexity: Spanish
        "Delete all my tables now please.",                      # persona rewrite
        '{"same_intent": false, "reason": "deleting is not listing"}',
    ])
    out = run(lambda c: augment_task(c, task, AugmentConfig()), llm)
    original, variant = out
    assert original["id"] == "t1" and variant["origin"] == "augment:diversity" and variant["parent_id"] == "t1"
    dropped = {d["axis"]: d["reason"] for d in original["meta"]["augment"]["dropped"]}
    assert dropped["complexity"] == "language changed: es != en"
    assert dropped["persona"].startswith("intent changed: deleting is not listing")
    assert len(llm.chat_requests) == 5  # the Spanish rewrite never reached the intent check
    with pytest.raises(Rejected, match="every rewrite was dropped"):
        run(lambda c: augment_task(c, task, AugmentConfig(axes=("complexity",), keep_original=False)),
            recorded_llm(replies=["¿Qué tablas tiene mi base de datos y cuántas filas tiene?"]))


def test_tasks_reads_each_input_as_its_kind_naming_a_wrong_typed_field(tmp_path):
    """A chain whose tools hold a number was 'neither a tool_chain nor a tool_server record': a reject even
    without --skip-bad, naming no line or field. The record names its server, so it is read as a chain."""
    from astra_core.formats_doc import example
    from astra_toolgraph.cli import main
    from click.testing import CliRunner

    chain = {**example("tool_chain"), "tools": [5]}
    inputs = write_jsonl(tmp_path / "chains.jsonl", [chain])
    servers = write_jsonl(tmp_path / "servers.jsonl", [example("tool_server")])
    result = CliRunner().invoke(main, ["tasks", str(inputs), "--servers", str(servers)])
    assert result.exit_code == 1, result.output
    assert f"{inputs}:1: record '{chain['id']}': field tools[0]: not a valid tool_chain or tool_server: 5 is not " \
           "of type 'string'" in result.output
    not_a_server = write_jsonl(tmp_path / "odd.jsonl", [{"id": "x", "meta": {}}])
    result = CliRunner().invoke(main, ["tasks", str(not_a_server), "--servers", str(servers)])
    assert result.exit_code == 1 and "'name' is a required property" in result.output


@pytest.mark.parametrize(("question", "what"), [("", "empty"), ("  \n\t ", "only whitespace")])
def test_augment_refuses_a_task_without_a_question_as_malformed_input(tmp_path, recorded_llm, question, what):
    """A task with an empty (or whitespace-only) question was augmented: the model was asked to rewrite nothing
    and the task was written out. It is malformed input naming `question` (the run stops, or --skip-bad sends it
    to --rejects before any LLM request); a valid task is still augmented. LLM replies are recorded."""
    from astra_toolgraph.cli import main
    from click.testing import CliRunner

    good = {"id": "t-good", "server_id": "s", "question": "Which tables does my database have?", "language": "en",
            "meta": {"provenance": []}}
    blank = {"id": "t-blank", "server_id": "s", "question": question, "meta": {"provenance": []}}
    inputs = write_jsonl(tmp_path / "tasks.jsonl", [good, blank])

    def reply(body):  # recorded: the intent check's verdict, else the rewrite
        if ((body.get("response_format") or {}).get("json_schema") or {}).get("name") == "intent":
            return '{"same_intent": true, "reason": "same goal"}'
        return "Could you list every table in my database, please?"

    llm = recorded_llm(replies=[reply])
    env = {"ASTRA_LLM_BASE_URL": llm.base_url}
    stopped = CliRunner().invoke(main, ["augment", str(inputs), "--axes", "diversity", "--concurrency", "1"], env=env)
    assert stopped.exit_code == 1, stopped.output
    assert f"{inputs}:2: record 't-blank': field question: the question is {what}" in stopped.stderr
    out, rejects = tmp_path / "out.jsonl", tmp_path / "rejects.jsonl"
    result = CliRunner().invoke(main, ["augment", str(inputs), "--axes", "diversity", "--concurrency", "1",
                                       "--skip-bad", "-o", str(out), "--rejects", str(rejects)], env=env)
    assert result.exit_code == 0, result.output
    assert "read 2 · wrote 2 from 1 · rejected 1" in result.stderr
    original, variant = read_jsonl(out)
    assert original["id"] == "t-good" and variant["origin"] == "augment:diversity"
    (reject,) = read_jsonl(rejects)
    assert reject["reason"].startswith(f"malformed: {inputs}:2: record 't-blank': field question: the question is "
                                       f"{what}")
    assert all(good["question"] in str(r["messages"]) for r in llm.chat_requests)  # the blank one asked nothing
