"""Chain verification (paper §2.1.2): inter-tool dependencies and task-chain coherence.

Dependency check (no LLM): walking the chain in order, every required argument of every call
must be supported, either by an output field of an earlier call (name/type/description match,
as for schema edges) or by the task: any value a user can state (a name, a path, a query) is
supported by the task; an opaque identifier (an id, a token, a cursor) is supported only by an
earlier call or by a concrete value in the task text.

Coherence check (LLM): a chain with a task is judged for whether the task is well posed and the
chain plausibly solves it; a chain without one (a walk) is back-translated with the paper's
Example Prompt 1 ("is the chain valid; what query does it serve?"), and the query becomes its task.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from astra_core.config import knob
from astra_core.llm import LLMClient, StructuredOutputError
from astra_core.stage import Rejected

from astra_toolgraph import prompts
from astra_toolgraph.dependency import (
    MATCH_THRESHOLD,
    is_identifier,
    match_score,
    output_fields,
    required_inputs,
)

LITERAL_ID = re.compile(r"\b(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{3,}\b")


@dataclass
class VerifyConfig:
    dependency: bool = knob(True, "Run the LLM-free dependency check.")
    coherence: bool = knob(True, "Run the LLM task-chain coherence check.")
    match_threshold: float = knob(MATCH_THRESHOLD, "Least field->parameter match score of a dependency.",
                                   minimum=0, maximum=1)
    attempts: int = knob(3, "Judge replies tried per chain (an unparseable one is shown the error) before the "
                            "chain is rejected.", minimum=1)


def dependency_check(server: dict, chain: list[str], task: str | None,
                     threshold: float = MATCH_THRESHOLD) -> dict:
    """{"ok", "supports": [{tool, param, source}], "unsupported": [{tool, param, why}]}."""
    by_name = {t["function"]["name"]: t for t in server["tools"]}
    supports, unsupported = [], []
    for position, name in enumerate(chain):
        tool = by_name.get(name)
        if tool is None:
            unsupported.append({"tool": name, "param": None, "why": "the server has no such tool"})
            continue
        for param in required_inputs(tool):
            source = _earlier_source(by_name, chain[:position], param, threshold)
            if source is None and is_identifier(param):
                if task and LITERAL_ID.search(task):
                    source = "task (a concrete value)"
                else:
                    unsupported.append({"tool": name, "param": param.name,
                                        "why": "an identifier that no earlier call produces and the task does not give"})
                    continue
            supports.append({"tool": name, "param": param.name, "source": source or "task"})
    return {"ok": not unsupported, "supports": supports, "unsupported": unsupported}


def _earlier_source(by_name: dict, earlier: list[str], param, threshold: float) -> str | None:
    best, where = 0.0, None
    for producer in reversed(earlier):
        for field in output_fields(by_name[producer]) if producer in by_name else []:
            score = match_score(field, param, producer)
            if score >= threshold and score > best:
                best, where = score, f"{producer}.{field.path if field.path != 'inferred' else field.name}"
    return where


async def coherence_check(llm: LLMClient, server: dict, chain: list[str], task: str | None, attempts: int = 3) -> dict:
    """{"ok", "method", ...}: the judge's verdict, or the back-translated query for a chain without a task."""
    try:
        if task:
            verdict, _ = await llm.chat_json(prompts.task_chain_coherence(server, task, chain),
                                             prompts.COHERENCE_SCHEMA, name="coherence", attempts=attempts)
            return {"ok": bool(verdict["coherent"]), "method": "judge", "reason": verdict.get("reason", "")}
        verdict, _ = await llm.chat_json(prompts.chain_to_query(server, chain), prompts.BACK_TRANSLATION_SCHEMA,
                                         name="back_translation", attempts=attempts)
    except StructuredOutputError as exc:
        raise Rejected(f"coherence: the judge's reply is unusable ({exc})") from None
    query = (verdict.get("query") or "").strip()
    return {"ok": bool(verdict["valid"]) and bool(query), "method": "back-translation", "query": query}


async def verify_chain(llm: LLMClient | None, chain: dict, server: dict, config: VerifyConfig) -> dict:
    """The chain with `verification` filled in, or Rejected with the failed check."""
    verification = dict(chain.get("verification") or {})
    task = chain.get("task")
    if config.dependency:
        verdict = dependency_check(server, chain["tools"], task, config.match_threshold)
        verification["dependency"] = verdict
        if not verdict["ok"]:
            problems = "; ".join(f"{u['tool']}.{u['param']}: {u['why']}" for u in verdict["unsupported"])
            raise Rejected(f"dependency: {problems}")
    if config.coherence:
        if llm is None:
            raise ValueError("the coherence check needs an LLM client")
        verdict = await coherence_check(llm, server, chain["tools"], task, config.attempts)
        verification["coherence"] = verdict
        if not verdict["ok"]:
            raise Rejected("coherence: " + (verdict.get("reason") or "the chain serves no sensible task"))
        if not task and verdict.get("query"):
            task = verdict["query"]
    return {**chain, "task": task, "verification": verification}
