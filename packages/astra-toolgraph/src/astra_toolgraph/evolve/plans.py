"""Diversified plan generation (AReaL-SEA §4.1-4.2): N synthesis-evaluation plan pairs per domain,
generated one after the other with the earlier ones in context so they cover different categories."""

from __future__ import annotations

import re

from astra_core.llm import LLMClient, StructuredOutputError
from astra_core.records import new_record, stable_id

from astra_toolgraph.evolve import prompts
from astra_toolgraph.evolve.domains import Domain


class AgentFailed(Exception):
    """An agent's reply could not be used (e.g. not the JSON asked for); the reason says why."""


def as_text(fields: dict) -> dict:
    """A plan reply with a structured focus ({category, complexity, user_style}) and tagged rules
    ([{kind, rule}]) as the plan's text fields ("category (complexity, style user)", "[ACCEPT] rule. ...")."""
    fields = dict(fields)
    focus = fields.get("focus")
    if isinstance(focus, dict):
        category = str(focus.get("category", "")).strip()
        fields["focus"] = f"{category} ({focus.get('complexity')}, {focus.get('user_style')} user)" if category else ""
    rules = fields.get("evaluation_rules")
    if isinstance(rules, list):
        fields["evaluation_rules"] = " ".join(
            f"[{r.get('kind')}] {str(r.get('rule', '')).strip().rstrip('.')}." for r in rules)
    return fields


def plan_record(plan_id: str, domain_id: str, stream: str, iteration: int, fields: dict, parent: dict,
                history: list[dict]) -> dict:
    return new_record(plan_id, parent=parent, domain_id=domain_id, stream=stream, iteration=iteration,
                      focus=str(fields.get("focus", "")).strip(), synthesis_plan=str(fields["synthesis_plan"]).strip(),
                      evaluation_rules=str(fields["evaluation_rules"]).strip(), history=history)


PLACEHOLDER = re.compile(r"<[^<>\n]{1,40}>|\{[A-Za-z_ ]{1,30}\}|\[(?:insert|your|placeholder|todo|tbd)[^\]]*\]"
                         r"|\b(?:TODO|TBD|lorem ipsum)\b", re.IGNORECASE)
MIN_WORDS = {"focus": 2, "synthesis_plan": 8, "evaluation_rules": 6}


def plan_problem(fields: dict) -> str | None:
    """Why a plan reply is not a plan (template text, instructions echoed back, too thin to act on), or None."""
    for key, least in MIN_WORDS.items():
        text = str(fields.get(key, "")).strip()
        if PLACEHOLDER.search(text):
            return f"{key} is template text ({PLACEHOLDER.search(text).group(0)!r})"
        if len(text.split()) < least:
            return f"{key} is too thin to act on ({len(text.split())} words, at least {least})"
        if text.lower() in prompts.PLAN_SYSTEM.lower():
            return f"{key} repeats the instructions instead of planning"
    if not re.search(r"\[(ACCEPT|REJECT)\]", str(fields["evaluation_rules"])):
        return "evaluation_rules has no [ACCEPT] or [REJECT] rule"
    if re.search(r"\[(ACCEPT|REJECT)\]\s*\.?\s*(\[|$)", str(fields["evaluation_rules"])):
        return "evaluation_rules has an empty rule"
    return None


async def generate_plans(llm: LLMClient, domain: Domain, count: int, *, max_tokens: int = 512) -> list[dict]:
    """`count` iteration-0 plan records for `domain`; a plan whose reply does not parse is not retried, and
    every plan of the domain notes all the failed ones (`meta.plans.failed`), a failure after the last
    good plan included."""
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
        fields = as_text(fields)
        problem = plan_problem(fields)
        if problem:
            failed.append(f"plan {index}: {problem}")
            continue
        plan_id = stable_id(domain.id, index, prefix="plan-")
        record = plan_record(plan_id, domain.id, plan_id, 0, fields, domain.record, [])
        record["meta"]["plans"] = {"index": index, "failed": failed}
        plans.append(record)
    if not plans:
        raise AgentFailed(f"no usable plan ({'; '.join(failed)})")
    return plans
