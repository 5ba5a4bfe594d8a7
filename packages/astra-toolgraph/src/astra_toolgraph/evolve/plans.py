"""Diversified plan generation (AReaL-SEA §4.1-4.2): N synthesis-evaluation plan pairs per domain,
generated one after the other with the earlier ones in context so they cover different categories."""

from __future__ import annotations

from astra_core.llm import LLMClient, StructuredOutputError
from astra_core.records import new_record, stable_id

from astra_toolgraph.evolve import prompts
from astra_toolgraph.evolve.domains import Domain


class AgentFailed(Exception):
    """An agent's reply could not be used (e.g. not the JSON asked for); the reason says why."""


def plan_record(plan_id: str, domain_id: str, stream: str, iteration: int, fields: dict, parent: dict,
                history: list[dict]) -> dict:
    return new_record(plan_id, parent=parent, domain_id=domain_id, stream=stream, iteration=iteration,
                      focus=str(fields.get("focus", "")).strip(), synthesis_plan=str(fields["synthesis_plan"]).strip(),
                      evaluation_rules=str(fields["evaluation_rules"]).strip(), history=history)


async def generate_plans(llm: LLMClient, domain: Domain, count: int, *, max_tokens: int = 512) -> list[dict]:
    """`count` iteration-0 plan records for `domain`; a plan whose reply does not parse is noted in
    the next plans' meta (`meta.plans.failed`) and not retried."""
    plans: list[dict] = []
    failed: list[str] = []
    for index in range(count):
        messages = prompts.plan_messages(domain.description, domain.tools, domain.example_tasks, plans)
        try:
            fields, _ = await llm.chat_json(messages, prompts.PLAN_SCHEMA, name="plan", attempts=2,
                                            max_tokens=max_tokens)
        except StructuredOutputError as exc:
            failed.append(f"plan {index}: {exc}")
            continue
        plan_id = stable_id(domain.id, index, prefix="plan-")
        record = plan_record(plan_id, domain.id, plan_id, 0, fields, domain.record, [])
        record["meta"]["plans"] = {"index": index, "failed": list(failed)}
        plans.append(record)
    if not plans:
        raise AgentFailed(f"no plan reply parsed ({'; '.join(failed)})")
    return plans
