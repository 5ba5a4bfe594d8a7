"""Recorded LLM replies for the self-evolving engine's agents, dispatched on what each request asks
for (the JSON schema's name, the tools offered, who speaks), so one recorded server plays every agent."""

from __future__ import annotations

import json

PLAN = {"focus": "Buying coffee", "synthesis_plan": "Look up a customer and the coffee stock; the user buys coffee.",
        "evaluation_rules": "[ACCEPT] tasks within stock and balance. [REJECT] tasks that cannot be checked."}
TASK = {"user_instruction": "I want to buy two bags of coffee.", "private_info": "email: ada@example.com",
        "specification": "Find the customer by email, then place an order of 2 x P3.",
        "expected_actions": [{"name": "place_order", "arguments": {"customer_id": "C1", "product_id": "P3",
                                                                   "quantity": 2}}],
        "expected_answer": ""}
TASK_PASS = {"verdict": "PASS", "rationale": "Feasible: 2 coffees cost 15, within the balance of 20."}
TRAJECTORY_FAIL = {"verdict": "FAIL", "rationale": "The assistant never placed the order.", "attribution": "TRAJECTORY"}
TRAJECTORY_OK = {"verdict": "SUCCESS", "rationale": "The order was placed.", "attribution": "NONE"}
REFLECTION = {"analysis": "The assistant did not act on the request.",
              "synthesis_plan": "Look up a customer and the stock; the user states the product and quantity up front.",
              "evaluation_rules": "[ACCEPT] tasks naming product and quantity. [REJECT] vague requests."}


def call(name: str, arguments: dict, call_id: str = "call_1") -> dict:
    return {"content": None, "tool_calls": [{"id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def schema_name(body: dict) -> str | None:
    return ((body.get("response_format") or {}).get("json_schema") or {}).get("name")


def is_user_simulator(body: dict) -> bool:
    return "Play this customer" in body["messages"][0]["content"]


def engine_replies(*, assistant_acts: bool = True, trajectory_verdict: dict = TRAJECTORY_OK):
    """A reply function for the recorded server: every agent of one stream iteration."""

    def reply(body: dict):
        name = schema_name(body)
        if name is not None:
            return json.dumps({"plan": PLAN, "task": TASK, "task_verdict": TASK_PASS,
                               "trajectory_verdict": trajectory_verdict, "reflection": REFLECTION}[name])
        if is_user_simulator(body):
            spoken = sum(m["role"] == "assistant" for m in body["messages"])
            return "I'd like two bags of coffee, my email is ada@example.com." if spoken == 0 else "Thanks! ###STOP###"
        if body.get("tools") and "create a realistic" in body["messages"][0]["content"]:
            return call("list_products", {})
        if body.get("tools"):  # the assistant
            done = sum(1 for m in body["messages"] if m["role"] == "tool")
            if assistant_acts and done == 0:
                return call("find_customer", {"email": "ada@example.com"})
            if assistant_acts and done == 1:
                return call("place_order", {"customer_id": "C1", "product_id": "P3", "quantity": 2}, "call_2")
            return "Your order is placed." if assistant_acts else "Sorry, I cannot help."
        raise AssertionError(f"unexpected request: {body['messages'][0]['content'][:80]}")

    return reply
