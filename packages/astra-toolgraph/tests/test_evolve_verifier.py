"""The verification agents' own tool-calling loop (AReaL-SEA §4.3) on the bundled shop domain, in real
jailed astra-sandbox sessions. The verifier's LLM replies are RECORDED (a real loopback HTTP server
answering in order) so the loop's control flow is deterministic: which turns call tools, when the
budget stops it, what the verdict request holds. The tools, their results and the states are real."""

import asyncio
import json

import pytest
from astra_core.llm import LLMClient, LLMConfig
from astra_toolgraph import data
from astra_toolgraph.evolve import (
    EvolveConfig,
    domain_of,
    roll_out,
    synthesize_task,
    verify_task,
    verify_trajectory,
)
from astra_toolgraph.evolve.plans import plan_record
from click.testing import CliRunner
from evolve_support import PLAN, call, engine_replies

pytestmark = pytest.mark.nsjail

TASK_OK = {"rationale": "Ada (C1) exists with balance 20 and coffee P3 has stock 2: the order is possible.",
           "verdict": "PASS"}
BLAME_TASK = {"rationale": "Coffee stock is 2 and the task asks for 2: possible; the assistant never ordered.",
              "verdict": "FAIL", "attribution": "TRAJECTORY"}


@pytest.fixture(scope="module")
def domain():
    return domain_of(data.sample_domain())


def plan_of(domain):
    return plan_record("plan-x", domain.id, "plan-x", 0, PLAN, domain.record, [])


def ask(server, fn):
    async def go():
        async with LLMClient(LLMConfig(base_url=server.base_url, max_retries=0)) as llm:
            return await fn(llm)

    return asyncio.run(go())


def task_of(recorded_llm, domain):
    server = recorded_llm(replies=[engine_replies()])
    return ask(server, lambda llm: synthesize_task(llm, plan_of(domain), domain, 0, EvolveConfig(explore_turns=1)))


def test_the_task_verifier_investigates_the_domain_then_gives_a_verdict_with_every_call_kept(recorded_llm, domain):
    task = task_of(recorded_llm, domain)
    server = recorded_llm(replies=[call("find_customer", {"email": "ada@example.com"}),
                                   call("list_products", {}, "call_2"),
                                   "I have checked the customer and the stock.",
                                   json.dumps(TASK_OK)])
    config = EvolveConfig(verify_calls=4)
    verified = ask(server, lambda llm: verify_task(llm, plan_of(domain), task, config, domain))
    verification = verified["verification"]
    assert (verification["verdict"], verification["by"]) == ("PASS", "agent")
    assert verification["rationale"] == TASK_OK["rationale"]
    investigation = verification["investigation"]
    assert investigation["budget"] == 4 and investigation["exhausted"] is False  # it stopped on its own
    assert [(c["turn"], c["tool"], c["ok"]) for c in investigation["calls"]] == [
        (0, "find_customer", True), (1, "list_products", True)]
    assert "Ada Lovelace" in investigation["calls"][0]["observation"]  # real results from the sandbox
    assert json.loads(investigation["calls"][0]["arguments"]) == {"email": "ada@example.com"}
    requests = server.chat_requests
    assert [r.get("tool_choice") for r in requests[:3]] == ["required", "auto", "auto"]  # first-required
    assert {t["function"]["name"] for t in requests[0]["tools"]} == domain.tool_names
    assert "at most 4 calls" in requests[0]["messages"][0]["content"]
    verdict_request = requests[-1]
    assert verdict_request["response_format"]["json_schema"]["name"] == "task_verdict" and "tools" not in verdict_request
    tool_results = [m["content"] for m in verdict_request["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 2 and "coffee" in tool_results[1]  # the verdict sees what it found


def test_the_budget_stops_a_verifier_that_keeps_calling_tools(recorded_llm, domain):
    task = task_of(recorded_llm, domain)
    two_calls = {"content": None, "tool_calls": [
        call("get_order", {"order_id": "O1"}, "a")["tool_calls"][0], call("list_products", {}, "b")["tool_calls"][0]]}
    server = recorded_llm(replies=[two_calls, two_calls, json.dumps(TASK_OK)])
    verified = ask(server, lambda llm: verify_task(llm, plan_of(domain), task, EvolveConfig(verify_calls=3), domain))
    investigation = verified["verification"]["investigation"]
    assert investigation["exhausted"] is True
    assert [c["tool"] for c in investigation["calls"]] == ["get_order", "list_products", "get_order"]
    assert len(server.chat_requests) == 3  # two tool turns (the second cut to one call), then the verdict
    last_turn = [m for m in server.chat_requests[-1]["messages"] if m["role"] == "assistant"][-1]
    assert len(last_turn["tool_calls"]) == 1  # the call over the budget was neither run nor kept


def test_a_write_by_the_trajectory_verifier_stays_in_its_disposable_episode(recorded_llm, domain):
    task = {**task_of(recorded_llm, domain), "verification": {"verdict": "PASS", "rationale": "ok", "by": "judge"}}
    config = EvolveConfig(max_turns=2, max_user_turns=1, verify_calls=2)
    rollout_server = recorded_llm(replies=[engine_replies(assistant_acts=False)])
    trajectory = ask(rollout_server, lambda llm: roll_out(llm, llm, task, domain, config))
    assert trajectory["state_check"]["reward"] == 0.0  # the assistant never ordered
    server = recorded_llm(replies=[call("place_order", {"customer_id": "C1", "product_id": "P3", "quantity": 2}),
                                   "The order is possible.", json.dumps(BLAME_TASK)])
    verified = ask(server, lambda llm: verify_trajectory(llm, plan_of(domain), task, trajectory, config, domain))
    [write] = verified["verification"]["investigation"]["calls"]
    assert write["tool"] == "place_order" and write["ok"] and "O3" in write["observation"]  # it really ran

    async def fresh_state():
        async with domain.episode() as episode:
            return await episode.state()

    state = asyncio.run(fresh_state())
    assert "O3" not in state["orders"] and state["products"]["P3"]["stock"] == 2  # the domain is untouched
    assert verified["final_state"] == trajectory["final_state"] and "O3" not in verified["final_state"]["orders"]
    assert task["expected_state"]["orders"]["O3"]["status"] == "pending"  # the checker's state is its own
    verification = verified["verification"]
    assert (verification["verdict"], verification["attribution"], verification["judge"]) == ("FAIL", "TRAJECTORY",
                                                                                             "FAIL")
    assert verification["rationale"].startswith("the final state differs")


def test_a_budget_of_zero_is_the_single_judge_call(recorded_llm, domain):
    task = task_of(recorded_llm, domain)
    server = recorded_llm(replies=[json.dumps(TASK_OK)])
    verified = ask(server, lambda llm: verify_task(llm, plan_of(domain), task, EvolveConfig(verify_calls=0), domain))
    assert verified["verification"]["by"] == "judge" and "investigation" not in verified["verification"]
    [request] = server.chat_requests
    assert "tools" not in request and request["messages"][-1]["content"].endswith("Verdict as JSON:")


def test_the_verify_commands_take_the_budget_from_the_config_and_need_the_domain(recorded_llm, tmp_path):
    from astra_toolgraph.cli import main

    (tmp_path / "domain.jsonl").write_text(json.dumps(data.sample_domain()) + "\n")
    runner = CliRunner()
    plan = runner.invoke(main, ["evolve", "sample-domain", "--what", "plan"]).output
    (tmp_path / "plan.jsonl").write_text(plan)
    seed = runner.invoke(main, ["evolve", "sample-domain", "--what", "tasks"]).output.splitlines()[1]
    (tmp_path / "seed.jsonl").write_text(seed + "\n")
    (tmp_path / "evolve.yaml").write_text("verify_calls: 1\n")
    server = recorded_llm(replies=[call("get_order", {"order_id": "O1"}), json.dumps(TASK_OK)])
    result = runner.invoke(main, ["evolve", "verify-tasks", str(tmp_path / "seed.jsonl"), "--plans",
                                  str(tmp_path / "plan.jsonl"), "--domains", str(tmp_path / "domain.jsonl"),
                                  "--config", str(tmp_path / "evolve.yaml"), "--base-url", server.base_url],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [task] = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    [lookup] = task["verification"]["investigation"]["calls"]
    assert lookup["tool"] == "get_order" and "pending" in lookup["observation"]
    assert task["verification"]["investigation"]["exhausted"] is True
    help_text = runner.invoke(main, ["evolve", "verify", "--help"]).output
    assert "--verify-calls" in help_text and "--verify-tool-choice" in help_text


@pytest.mark.llm
@pytest.mark.slow
def test_the_task_verification_agent_runs_its_loop_on_the_embedded_model(llm_env, tmp_path):
    """SmolLM2 as the verification agent of the hand-written cancel task, with a budget of one call:
    its forced first call runs in the sandbox and is kept, then a verdict with a rationale. Asserts the
    record, not the quality of the verdict. Slow: two guided requests took minutes on the shared 2-core
    machine; the recorded-reply tests above cover the loop by default."""
    from astra_toolgraph.cli import main

    runner = CliRunner()
    (tmp_path / "domain.jsonl").write_text(json.dumps(data.sample_domain()) + "\n")
    (tmp_path / "plan.jsonl").write_text(runner.invoke(main, ["evolve", "sample-domain", "--what", "plan"]).output)
    seed = runner.invoke(main, ["evolve", "sample-domain", "--what", "tasks"]).output.splitlines()[1]
    (tmp_path / "seed.jsonl").write_text(seed + "\n")
    result = runner.invoke(main, ["evolve", "verify-tasks", str(tmp_path / "seed.jsonl"), "--plans",
                                  str(tmp_path / "plan.jsonl"), "--domains", str(tmp_path / "domain.jsonl"),
                                  "--verify-calls", "1", "--agent-max-tokens", "48", "-o", str(tmp_path / "out.jsonl"),
                                  "--rejects", str(tmp_path / "rejects.jsonl")],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    tasks = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    rejects = [json.loads(line) for line in (tmp_path / "rejects.jsonl").read_text().splitlines()]
    assert len(tasks) + len(rejects) == 1  # a verdict, or why the agent's verdict was not taken
    for reject in rejects:
        assert reject["reason"].startswith("task verification: ")
    for task in tasks:
        verification = task["verification"]
        assert verification["by"] == "agent" and verification["verdict"] in ("PASS", "FAIL")
        [first] = verification["investigation"]["calls"]  # tool_choice first-required: one call, the whole budget
        assert first["tool"] in {t["function"]["name"] for t in data.sample_domain()["tools"]} and first["observation"]
        assert verification["investigation"]["exhausted"] is True
