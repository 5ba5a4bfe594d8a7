"""LLM Q–A synthesis (paper §2.2.1): knowledge rows -> decomposed Q–A instances.

Reads ASTRA's knowledge rows: `{"domain", "knowledge_corpus"}` (unconditional generation: the model
writes questions grounded in the corpus with a hop budget) and `{"question", "domain"}` (question-
conditional generation: the model answers and decomposes the given question). Replies use ASTRA's
`decomposition_trace` format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from astra_core.config import check, knob
from astra_core.invariants import unknown_dependencies
from astra_core.llm import LLMClient, StructuredOutputError
from astra_core.records import new_record, stable_id
from astra_core.stage import Rejected

from astra_qaenv import prompts
from astra_qaenv.trace import depth, structural_problems


@dataclass
class SynthesisConfig:
    """Knobs of `astra-qaenv synthesize`."""

    mode: str = knob("auto", "auto: rows with a `question` are decomposed, the others generate questions.",
                     choices=("auto", "conditional", "unconditional"))
    min_hops: int = knob(2, "Hop budget (hop levels) of unconditional generation, lower bound.",
                         minimum=1)
    max_hops: int = knob(4, "Hop budget, upper bound.", minimum=1)
    count: int = knob(2, "Instances asked per knowledge row (unconditional).", minimum=1)
    attempts: int = knob(3, "Replies tried per request until one parses against the schema.", minimum=1)
    max_corpus_chars: int = knob(6000, "Longer knowledge corpora are cut to this.", minimum=1)

    def validate(self) -> None:
        check(self.min_hops <= self.max_hops, "min_hops", f"{self.min_hops} is above max_hops {self.max_hops}")


def mode_of(row: dict, config: SynthesisConfig) -> str:
    if config.mode != "auto":
        return config.mode
    return "conditional" if row.get("question") else "unconditional"


def _messages(row: dict, mode: str, config: SynthesisConfig) -> tuple[list[dict], dict]:
    corpus = (row.get("knowledge_corpus") or "").strip()[: config.max_corpus_chars] or "(none: invent specific, plausible data)"
    domain = row.get("domain") or "general"
    if mode == "conditional":
        if not row.get("question"):
            raise Rejected("conditional synthesis needs a 'question' field in the knowledge row")
        text = prompts.CONDITIONAL.format(domain=domain, corpus=corpus, question=row["question"],
                                          question_json=json.dumps(row["question"])[1:-1])
        return [{"role": "user", "content": text}], prompts.INSTANCE_SCHEMA
    text = prompts.UNCONDITIONAL.format(domain=domain, corpus=corpus, min_hops=config.min_hops,
                                        max_hops=config.max_hops, count=config.count)
    return [{"role": "user", "content": text}], prompts.UNCONDITIONAL_SCHEMA


def normalize_instance(raw: dict) -> dict:
    """ASTRA's reply shape -> our qa_instance fields (answers as strings, `null` dependencies as None)."""
    trace = []
    for step in raw["decomposition_trace"]:
        clean = {key: step[key] for key in ("_uuid", "hop_level", "sub_question", "is_parallel", "dependency")}
        clean["sub_answer"] = str(step["sub_answer"])
        clean["dependency"] = list(step["dependency"]) if step.get("dependency") else None
        if "tool_necessity" in step:  # ASTRA's field name after its necessity check
            clean["needs_tool"] = bool(step["tool_necessity"])
        trace.append(clean)
    return {"scenario_type": raw["scenario_type"], "main_question": raw["main_question"].strip(),
            "final_answer": str(raw["final_answer"]).strip(), "decomposition_trace": trace}


def dependency_problem(instance: dict) -> str | None:
    """Why an instance the LLM wrote cannot be read further: a dependency naming a sub-question it does not have
    (it breaks the qa_instance kind, so as input to any stage it is malformed; here the LLM wrote it, so the
    instance is dropped)."""
    broken = [f"{field}: {message}" for field, message in unknown_dependencies(instance)]
    return "unknown dependency: " + "; ".join(broken) if broken else None


def budget_problem(instance: dict, config: SynthesisConfig) -> str | None:
    """Why an unconditional instance misses the hop budget (None when it fits or cannot be measured)."""
    if structural_problems(instance["decomposition_trace"]):
        return None  # `validate` reports broken structure with the full list of problems
    hops = depth(instance["decomposition_trace"])
    if not config.min_hops <= hops <= config.max_hops:
        return f"hop budget: the decomposition has {hops} hop level(s), outside {config.min_hops}-{config.max_hops}"
    return None


async def synthesize_row(llm: LLMClient, row: dict, config: SynthesisConfig) -> tuple[list[dict], list[tuple[dict, str]]]:
    """Instances for one knowledge row, and (instance, reason) pairs for the ones dropped."""
    mode = mode_of(row, config)
    messages, schema = _messages(row, mode, config)
    try:
        reply, _ = await llm.chat_json(messages, schema, name="qa_instances", attempts=config.attempts)
    except StructuredOutputError as exc:
        last = " ".join((exc.last_reply or "").split())[:300]
        raise Rejected(f"LLM reply is not a decomposition in ASTRA's format ({exc}); last reply: {last!r}") from None
    raws = reply if isinstance(reply, list) else [reply]
    kept: list[dict] = []
    dropped: list[tuple[dict, str]] = []
    for index, raw in enumerate(raws):
        body = normalize_instance(raw)
        if mode == "conditional":
            body["main_question"] = row["question"]
        record = new_record(stable_id(row["id"], mode, index, body["main_question"], prefix="qa-"), parent=None,
                            domain=row.get("domain") or "general", **body,
                            knowledge=row.get("knowledge_corpus") or None,
                            synthesis={"method": "llm", "mode": mode, "source": row["id"],
                                       "hop_budget": [config.min_hops, config.max_hops] if mode == "unconditional"
                                       else None})
        record["meta"]["parent_id"] = row["id"]
        problem = dependency_problem(body) or (budget_problem(body, config) if mode == "unconditional" else None)
        if problem:
            dropped.append((record, problem))
        else:
            kept.append(record)
    return kept, dropped
