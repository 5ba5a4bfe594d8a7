"""The self-evolving engine's agents, one by one, on the bundled shop domain in real jailed
astra-sandbox sessions. LLM replies are RECORDED (the `recorded_llm` fixture, a real HTTP server)
so parsing and control flow are deterministic; the tools, states and the checker are real."""

import json

import pytest
from astra_core.llm import LLMClient, LLMConfig
from astra_core.schema import validate
from astra_toolgraph import data
from astra_toolgraph.evolve import (
    AgentFailed,
    EvolveConfig,
    check_trajectory,
    domain_of,
    generate_plans,
    reflect,
    roll_out,
    synthesize_task,
    verify_task,
    verify_trajectory,
)
from astra_toolgraph.evolve.export import rl_sample_record, user_sft_record
from astra_toolgraph.evolve.tasks import precheck
from evolve_support import PLAN, REFLECTION, TASK, TRAJECTORY_FAIL, engine_replies

pytestmark = pytest.mark.nsjail


@pytest.fixture(scope="module")
def domain():
    return domain_of(data.sample_domain())


def run(coro):
    import asyncio

    return asyncio.run(coro)


def client(server) -> LLMClient:
    return LLMClient(LLMConfig(base_url=server.base_url, max_retries=0))


async def with_client(server, fn):
    async with client(server) as llm:
        return await fn(llm)


def test_plans_are_generated_one_after_another_with_earlier_ones_in_context(recorded_llm, domain):
    server = recorded_llm(replies=[json.dumps(PLAN), json.dumps({**PLAN, "focus": "Cancelling orders"})])
    plans = run(with_client(server, lambda llm: generate_plans(llm, domain, 2)))
    assert [p["focus"] for p in plans] == ["Buying coffee", "Cancelling orders"]
    assert plans[0]["stream"] == plans[0]["id"] and plans[1]["iteration"] == 0
    assert "Buying coffee" in server.requests[1]["messages"][1]["content"]  # the first plan is in context
    for plan in plans:
        validate(plan, "plan")


def test_an_unparseable_plan_reply_is_noted_and_no_plan_at_all_fails(recorded_llm, domain):
    server = recorded_llm(replies=["not json"] * 2 + [json.dumps(PLAN)])
    [plan] = run(with_client(server, lambda llm: generate_plans(llm, domain, 2)))
    assert plan["meta"]["plans"]["failed"] and plan["meta"]["plans"]["index"] == 1
    with pytest.raises(AgentFailed):
        run(with_client(recorded_llm(replies=["no"]), lambda llm: generate_plans(llm, domain, 1)))


def test_a_plan_that_fails_after_the_last_good_one_is_noted_too(recorded_llm, domain):
    server = recorded_llm(replies=[json.dumps(PLAN)] + ["not json"] * 2)
    [plan] = run(with_client(server, lambda llm: generate_plans(llm, domain, 2)))
    assert plan["meta"]["plans"]["index"] == 0 and plan["meta"]["plans"]["failed"][0].startswith("plan 1:")


@pytest.mark.parametrize(("bad", "why"), [
    ({"focus": "<task category>"}, "template text"),
    ({"synthesis_plan": "TODO: describe how to gather information here with tools"}, "template text"),
    ({"synthesis_plan": "Buy coffee."}, "too thin"),
    ({"focus": "the task category, in one line"}, "repeats the instructions"),
    ({"evaluation_rules": "Tasks should be good and conversations should be fine."}, "no [ACCEPT] or [REJECT]"),
])
def test_a_plan_that_is_template_text_or_too_thin_is_not_a_plan(recorded_llm, domain, bad, why):
    server = recorded_llm(replies=[json.dumps({**PLAN, **bad}), json.dumps(PLAN)])
    [plan] = run(with_client(server, lambda llm: generate_plans(llm, domain, 2)))
    assert plan["meta"]["plans"]["index"] == 1 and why in plan["meta"]["plans"]["failed"][0]


STRUCTURED = {"focus": {"category": "Buying coffee", "complexity": "multi-step", "user_style": "direct"},
              "synthesis_plan": PLAN["synthesis_plan"],
              "evaluation_rules": [{"kind": "ACCEPT", "rule": "Tasks within stock and balance."},
                                   {"kind": "REJECT", "rule": "Tasks that cannot be checked"}]}


def test_a_structured_plan_reply_becomes_the_plan_text_and_is_checked_like_text(recorded_llm, domain):
    empty_category = {**STRUCTURED, "focus": {**STRUCTURED["focus"], "category": " "}}
    empty_rule = {**STRUCTURED, "evaluation_rules": [*STRUCTURED["evaluation_rules"], {"kind": "REJECT", "rule": ""}]}
    server = recorded_llm(replies=[json.dumps(empty_category), json.dumps(empty_rule), json.dumps(STRUCTURED)])
    [plan] = run(with_client(server, lambda llm: generate_plans(llm, domain, 3)))
    assert plan["focus"] == "Buying coffee (multi-step, direct user)"
    assert plan["evaluation_rules"] == "[ACCEPT] Tasks within stock and balance. [REJECT] Tasks that cannot be checked."
    failed = plan["meta"]["plans"]["failed"]
    assert "focus is too thin" in failed[0] and "empty rule" in failed[1]
    schema = server.requests[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["evaluation_rules"]["anyOf"][0]["minItems"] == 2  # tagged rules, guided first


def make_plan(domain):
    from astra_toolgraph.evolve.plans import plan_record

    return plan_record("plan-x", domain.id, "plan-x", 0, PLAN, domain.record, [])


def test_a_synthesized_task_explores_then_carries_its_expected_state(recorded_llm, domain):
    server = recorded_llm(replies=[engine_replies()])
    config = EvolveConfig(explore_turns=1, judge_tasks=True)
    task = run(with_client(server, lambda llm: synthesize_task(llm, make_plan(domain), domain, 0, config)))
    validate(task, "task")
    assert task["synthesis"]["executions"] == [{"turn": 0, "tool": "list_products", "ok": True}]
    assert task["user"]["private_info"] == "email: ada@example.com"
    # the replayed order is the checker: stock 2 -> 0, balance 20 -> 5, a new pending order
    assert task["expected_state"]["products"]["P3"]["stock"] == 0
    assert task["expected_state"]["customers"]["C1"]["balance"] == 5.0
    assert task["expected_state"]["orders"]["O3"]["status"] == "pending"
    verified = run(with_client(server, lambda llm: verify_task(llm, make_plan(domain), task, config)))
    assert verified["verification"] == {"verdict": "PASS", "by": "judge",
                                        "rationale": "Feasible: 2 coffees cost 15, within the balance of 20."}
    assert "place_order" in server.requests[-1]["messages"][1]["content"]  # the judge sees the replay


def test_a_blank_user_instruction_fails_the_precheck():
    """A hand-written seed task with a whitespace question would otherwise PASS and be rolled out with
    whitespace as the user's first message."""
    task = {"question": " \n\t", "synthesis": {"replay": [], "changes_state": True}}
    assert precheck(task) == "the user instruction is empty"
    assert precheck({**task, "question": ""}) == "the user instruction is empty"
    assert precheck({**task, "question": "Order two coffees for C1."}) is None


def test_a_task_whose_expected_action_fails_to_replay_fails_before_any_judge(recorded_llm, domain):
    impossible = {**TASK, "expected_actions": [{"name": "place_order", "arguments": {
        "customer_id": "C2", "product_id": "P3", "quantity": 2}}]}  # balance 5 < 15
    server = recorded_llm(replies=[lambda body: json.dumps(impossible) if body.get("response_format")
                                   else engine_replies()(body)])
    config = EvolveConfig(explore_turns=1)
    task = run(with_client(server, lambda llm: synthesize_task(llm, make_plan(domain), domain, 0, config)))
    asked = len(server.requests)
    verified = run(with_client(server, lambda llm: verify_task(llm, make_plan(domain), task, config)))
    assert verified["verification"]["verdict"] == "FAIL" and verified["verification"]["by"] == "precheck"
    assert "balance" in verified["verification"]["rationale"]
    assert len(server.requests) == asked


def synthesized(recorded_llm, domain):
    server = recorded_llm(replies=[engine_replies()])
    config = EvolveConfig(explore_turns=1)
    task = run(with_client(server, lambda llm: synthesize_task(llm, make_plan(domain), domain, 0, config)))
    return {**task, "verification": {"verdict": "PASS", "rationale": "ok", "by": "judge"}}


def test_the_checker_accepts_the_expected_state_and_rejects_another_with_the_diff(recorded_llm, domain):
    task = synthesized(recorded_llm, domain)
    assert check_trajectory(task, task["expected_state"], []) == {"reward": 1.0, "diff": []}
    initial = data.sample_domain()
    import asyncio

    async def untouched():
        async with domain.episode() as episode:
            return await episode.state()

    state = asyncio.run(untouched())
    check = check_trajectory(task, state, [])
    assert check["reward"] == 0.0
    paths = {entry["path"]: entry for entry in check["diff"]}
    assert paths["products.P3.stock"]["expected"] == 0 and paths["products.P3.stock"]["actual"] == 2
    assert paths["orders.O3"]["kind"] == "missing"
    assert initial["id"] == domain.id


def test_an_expected_answer_counts_only_when_said_not_when_reasoned_about(recorded_llm, domain):
    task = {**synthesized(recorded_llm, domain), "expected_answer": "42 units"}
    reasoned = [{"role": "assistant", "content": "<think>maybe 42 units?</think>I could not find it."},
                {"role": "assistant", "content": "The stock is 42 units?\n</think>\n\nI do not know."}]  # R1-style
    said = [{"role": "assistant", "content": [{"type": "text", "text": "There are 42 units left."}]}]
    assert check_trajectory(task, task["expected_state"], reasoned) == {"reward": 0.0, "diff": [], "answer_given": False}
    assert check_trajectory(task, task["expected_state"], said) == {"reward": 1.0, "diff": [], "answer_given": True}


def test_a_rollout_with_the_user_simulator_reaches_the_expected_state_and_is_accepted(recorded_llm, domain):
    task = synthesized(recorded_llm, domain)
    server = recorded_llm(replies=[engine_replies()])
    config = EvolveConfig(max_turns=6)

    async def go(llm):
        trajectory = await roll_out(llm, llm, task, domain, config)
        return await verify_trajectory(llm, make_plan(domain), task, trajectory, config)

    trajectory = run(with_client(server, go))
    validate(trajectory, "trajectory")
    roles = [m["role"] for m in trajectory["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "user"]
    assert trajectory["user_stop"] == "###STOP###" and trajectory["finish_reason"] == "user_stop"
    assert trajectory["state_check"] == {"reward": 1.0, "diff": []}
    assert trajectory["verification"]["verdict"] == "SUCCESS" and trajectory["verification"]["checker"] is True
    # the user simulator never sees tool traffic, and sees the assistant as its interlocutor
    user_requests = [r for r in server.requests if "Play this customer" in r["messages"][0]["content"]]
    assert len(user_requests) == 2
    assert all(m["role"] != "tool" for r in user_requests for m in r["messages"])
    assert user_requests[1]["messages"][-1] == {"role": "user", "content": "Your order is placed."}

    sft = user_sft_record(trajectory)
    validate(sft, "trajectory")
    assert sft["messages"][-1] == {"role": "assistant", "content": "Thanks! ###STOP###"}
    assert sft["messages"][2]["content"].startswith("I'd like two bags")
    assert sft["meta"]["source_verdict"] == "SUCCESS"
    sample = rl_sample_record(task, domain.record, trajectory["messages"][1]["content"])
    validate(sample, "rl_sample")
    assert sample["reward"]["kind"] == "state" and sample["user"] == task["user"]


def test_the_question_opening_starts_every_rollout_with_the_tasks_question(recorded_llm, domain):
    task = {**synthesized(recorded_llm, domain), "question": "Two bags of coffee for ada@example.com, please."}
    server = recorded_llm(replies=[engine_replies()])
    config = EvolveConfig(max_turns=6, user_opening="question")

    trajectory = run(with_client(server, lambda llm: roll_out(llm, llm, task, domain, config)))
    assert trajectory["messages"][1] == {"role": "user", "content": task["question"]}
    assert trajectory["state_check"]["reward"] == 1.0 and trajectory["user_stop"] == "###STOP###"
    user_requests = [r for r in server.requests if "Play this customer" in r["messages"][0]["content"]]
    assert len(user_requests) == 1  # only the reply after the assistant's answer; the opening was not asked
    with pytest.raises(ValueError, match="user_opening"):
        EvolveConfig(user_opening="greeting")


def test_a_failed_rollout_is_rejected_with_the_diff_and_an_attribution(recorded_llm, domain):
    task = synthesized(recorded_llm, domain)
    server = recorded_llm(replies=[engine_replies(assistant_acts=False, trajectory_verdict=TRAJECTORY_FAIL)])
    config = EvolveConfig(max_turns=4, max_user_turns=1)

    async def go(llm):
        trajectory = await roll_out(llm, llm, task, domain, config)
        return await verify_trajectory(llm, make_plan(domain), task, trajectory, config)

    trajectory = run(with_client(server, go))
    assert trajectory["state_check"]["reward"] == 0.0
    assert {"products.P3.stock", "customers.C1.balance", "orders.O3"} <= {d["path"] for d in
                                                                        trajectory["state_check"]["diff"]}
    verification = trajectory["verification"]
    assert verification["verdict"] == "FAIL" and verification["attribution"] == "TRAJECTORY"
    assert verification["rationale"].startswith("the final state differs")
    with pytest.raises(Exception, match="not accepted"):
        user_sft_record(trajectory)
    exported_anyway = user_sft_record(trajectory, require_accepted=False)  # --all: the record says it failed
    assert exported_anyway["meta"]["source_verdict"] == "FAIL"


def test_reflection_rewrites_both_plans_and_keeps_the_failures_in_history(recorded_llm, domain):
    plan = make_plan(domain)
    task = {"id": "t1", "plan_id": plan["id"], "verification": {"verdict": "FAIL", "rationale": "12 > stock 10"}}
    trajectory = {"id": "r1", "plan_id": plan["id"],
                  "verification": {"verdict": "FAIL", "rationale": "never ordered", "attribution": "TRAJECTORY"}}
    server = recorded_llm(replies=[json.dumps(REFLECTION)])
    revised = run(with_client(server, lambda llm: reflect(llm, plan, [task], [trajectory], ["task synthesis: bad"])))
    validate(revised, "plan")
    assert revised["iteration"] == 1 and revised["stream"] == plan["stream"] and revised["id"] == "plan-x-k1"
    assert revised["synthesis_plan"] == REFLECTION["synthesis_plan"]
    assert revised["evaluation_rules"] == REFLECTION["evaluation_rules"]
    [entry] = revised["history"]
    assert entry["synthesis_plan"] == PLAN["synthesis_plan"] and entry["analysis"] == REFLECTION["analysis"]
    assert [f["stage"] for f in entry["failures"]] == ["task_synthesis", "task_verification", "trajectory_verification"]
    assert entry["outcome"]["tasks"] == 2 and entry["outcome"]["trajectories_succeeded"] == 0
    prompt = server.requests[0]["messages"][1]["content"]
    assert "12 > stock 10" in prompt and "[TRAJECTORY]" in prompt
    with pytest.raises(AgentFailed):
        run(with_client(recorded_llm(replies=["nope"]), lambda llm: reflect(llm, plan, [task], [trajectory])))


def test_task_schema_has_one_alternative_per_tool_with_its_required_arguments(domain):
    from astra_toolgraph.evolve import prompts
    from jsonschema import Draft202012Validator

    schema = Draft202012Validator(prompts.task_schema(domain.tools))
    task = {"user_instruction": "u", "private_info": "p", "specification": "s", "expected_answer": "",
            "expected_actions": [{"name": "cancel_order", "arguments": {"order_id": "O1"}},
                                 {"name": "list_products", "arguments": {}}]}
    assert schema.is_valid(task)
    task["expected_actions"][0]["arguments"] = {}  # a required argument missing: the precheck's old failure
    assert not schema.is_valid(task)
    task["expected_actions"][0] = {"name": "order_id", "arguments": {"order_id": "O1"}}  # not a tool
    assert not schema.is_valid(task)
    task["expected_actions"] = []
    assert not schema.is_valid(task)
    assert prompts.TASK_SCHEMA["properties"]["expected_actions"]["items"]["properties"]["name"] == {"type": "string"}


def test_task_schema_moves_the_tools_defs_to_its_root_so_refs_resolve():
    from astra_toolgraph.evolve import prompts
    from jsonschema import Draft202012Validator

    book = {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "required": ["flights"], "$defs": {"Flight": {
            "type": "object", "required": ["number"], "properties": {"number": {"type": "string"}}}},
        "properties": {"flights": {"type": "array", "items": {"$ref": "#/$defs/Flight"}}}}}}
    schema = Draft202012Validator(prompts.task_schema([book]))
    task = {"user_instruction": "u", "private_info": "p", "specification": "s", "expected_answer": "",
            "expected_actions": [{"name": "book", "arguments": {"flights": [{"number": "HAT001"}]}}]}
    assert schema.is_valid(task)
    task["expected_actions"][0]["arguments"]["flights"] = [{}]
    assert not schema.is_valid(task)
