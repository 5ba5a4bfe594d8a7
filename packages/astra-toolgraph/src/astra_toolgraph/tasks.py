"""Task construction and augmentation (paper §2.1.3).

Construction: chain-conditioned tasks (a verified chain -> requests whose solution follows it)
and server-only tasks (the server's tools -> broader requests). Augmentation rewrites a task
along diversity, complexity and persona; a rewrite is kept only if it is in the same language
as the original and (by an LLM check) keeps its intent. Scoring is `astra-reward judge-task`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from astra_core.config import check, knob
from astra_core.llm import LLMClient, StructuredOutputError
from astra_core.reasoning import without_reasoning
from astra_core.records import new_record, stable_id
from astra_core.stage import Rejected, require_text

from astra_toolgraph import prompts
from astra_toolgraph.language import detect_language
from astra_toolgraph.replies import questions_from_text

PERSONAS = (
    "a novice who explains their situation at length and is unsure of the terms",
    "an expert who writes tersely and uses precise jargon",
    "a busy professional who writes one short line",
    "a verbose user who adds background and politeness",
    "a non-native speaker writing simple sentences",
    "a cautious user who asks for confirmation of each result",
)
AXES = ("diversity", "complexity", "persona")


@dataclass
class TaskConfig:
    per_chain: int = knob(1, "Chain-conditioned tasks per chain.", minimum=1)
    per_server: int = knob(2, "Server-only tasks per server.", minimum=1)
    min_words: int = knob(4, "Shorter generated questions are discarded.", minimum=1)


@dataclass
class AugmentConfig:
    axes: list[str] = knob(list(AXES), "Rewrite axes: diversity, complexity, persona.")
    keep_original: bool = knob(True, "Output the original task too (the augmented set is T ∪ A(T)).")
    check_language: bool = knob(True, "Drop a rewrite whose language differs from the original's.",
                                flag="language-check")
    check_intent: bool = knob(True, "Drop a rewrite an LLM judges to change the intent.", flag="intent-check")
    personas: list[str] = knob(list(PERSONAS), "Personas the persona axis draws from.")
    seed: int = knob(0, "Seed of the persona draws.", flag="persona-seed")
    attempts: int = knob(3, "Intent-check replies tried before an unparseable verdict drops the rewrite.",
                         minimum=1)

    def validate(self) -> None:
        check(not set(self.axes) - set(AXES), "axes", f"unknown {sorted(set(self.axes) - set(AXES))}; "
                                                      f"choose from {', '.join(AXES)}")


def task_record(parent: dict, server_id: str, question: str, *, origin: str, chain: list[str] | None,
                parent_task: str | None = None) -> dict:
    record_id = stable_id(parent["id"], question, origin, prefix="task-")
    return new_record(record_id, parent=parent, server_id=server_id, question=question.strip(), chain=chain,
                      origin=origin, parent_id=parent_task, language=detect_language(question))


def _usable(questions: list, min_words: int) -> list[str]:
    seen, out = set(), []
    for q in questions:
        if isinstance(q, str) and len(q.split()) >= min_words and q.strip() not in seen:
            seen.add(q.strip())
            out.append(q.strip())
    return out


async def _questions(llm: LLMClient, messages: list[dict], min_words: int, what: str) -> list[str]:
    text = without_reasoning((await llm.chat(messages)).content)  # a reasoning model's thoughts are no tasks
    questions = _usable(questions_from_text(text, min_words), min_words)
    if not questions:
        raise Rejected(f"{what}: the reply held no request of at least {min_words} words: {text[:160]!r}")
    return questions


async def chain_tasks(llm: LLMClient, chain: dict, server: dict, config: TaskConfig) -> list[dict]:
    questions = await _questions(llm, prompts.chain_tasks(server, chain["tools"], config.per_chain, chain.get("task")),
                                 config.min_words, "chain-conditioned tasks")
    return [task_record(chain, server["id"], q, origin="chain", chain=chain["tools"])
            for q in questions[:config.per_chain]]


async def server_tasks(llm: LLMClient, server: dict, config: TaskConfig) -> list[dict]:
    questions = await _questions(llm, prompts.server_tasks(server, config.per_server), config.min_words,
                                 "server-only tasks")
    return [task_record(server, server["id"], q, origin="server", chain=None) for q in questions[:config.per_server]]


async def augment_task(llm: LLMClient, task: dict, config: AugmentConfig) -> list[dict]:
    """The original (if kept) plus its accepted rewrites; rejected rewrites are noted in meta.augment.

    A task whose question is empty or only whitespace is malformed input (there is no request to rewrite)."""
    require_text(task, "question", "a task is a user's request, and there is nothing to rewrite")
    language = task.get("language") or detect_language(task["question"])
    rng = random.Random(stable_id(config.seed, task["id"]))
    kept, dropped = [], []
    for axis in config.axes:
        persona = rng.choice(config.personas) if axis == "persona" else None
        candidate, problem = await _rewrite(llm, task["question"], axis, persona, language)
        if problem is None and config.check_language and detect_language(candidate) != language:
            problem = f"language changed: {detect_language(candidate)} != {language}"
        if problem is None and candidate == task["question"].strip():
            problem = "the rewrite is identical to the original"
        if problem is None and config.check_intent:
            problem = await _intent_problem(llm, task["question"], candidate, config.attempts)
        if problem:
            dropped.append({"axis": axis, "question": candidate, "reason": problem})
            continue
        variant = task_record(task, task["server_id"], candidate, origin=f"augment:{axis}", chain=task.get("chain"),
                              parent_task=task["id"])
        if persona:
            variant["persona"] = persona
        kept.append(variant)
    if not config.keep_original and not kept:
        raise Rejected("augment: every rewrite was dropped: " + "; ".join(f"{d['axis']}: {d['reason']}"
                                                                          for d in dropped))
    original = {**task, "meta": {**task["meta"], "augment": {"variants": len(kept), "dropped": dropped}}}
    return ([original] if config.keep_original else []) + kept


async def _rewrite(llm: LLMClient, question: str, axis: str, persona: str | None,
                   language: str) -> tuple[str | None, str | None]:
    """(rewritten question, None), or (None, why there is none)."""
    said = without_reasoning((await llm.chat(prompts.augment(question, axis, persona, language))).content)
    text = next(iter(questions_from_text(said, 3)), "")  # the first request-like line
    return (text, None) if text else (None, f"no usable rewrite in the reply {said[:120]!r}")


async def _intent_problem(llm: LLMClient, original: str, rewrite: str, attempts: int) -> str | None:
    try:
        verdict, _ = await llm.chat_json(prompts.intent_check(original, rewrite), prompts.INTENT_SCHEMA, name="intent",
                                         attempts=attempts)
    except StructuredOutputError as exc:
        return f"intent check unusable ({exc})"
    return None if verdict["same_intent"] else f"intent changed: {verdict.get('reason', '')}"
