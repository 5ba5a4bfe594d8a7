"""LLM environment synthesis for one sub-task (paper §2.2.3).

1. tool specification from (q_i, a_i, d_i);
2. complexity scaling of the spec (more parameters, wider enums);
3. an invocation statement for q_i;
4. a standard-library Python implementation from the spec, the Q–A pair and the call;
then the call runs in the sandbox: the sub-environment is accepted only when the observation
contains a_i. Otherwise synthesis restarts from step 3, up to `attempts` times.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass

from astra_core.config import knob
from astra_core.llm import LLMClient, StructuredOutputError

from astra_qaenv import prompts
from astra_qaenv.trace import step_id
from astra_qaenv.verify import Call, Verifier, static_problems


@dataclass(frozen=True)
class EnvSynthConfig:
    """Knobs of LLM environment synthesis (flags of `build-env` and `merge`)."""

    attempts: int = knob(3, "Implementation attempts per sub-task, each restarting from the invocation statement.",
                         minimum=1)
    scaling: bool = knob(True, "Complexity-scale generated tool specs.")
    json_attempts: int = knob(2, "Replies tried per LLM step until one matches its JSON schema.",
                              minimum=1)


class SubEnvFailed(Exception):
    """No sub-environment for this sub-task; the message says why (every attempt's outcome)."""


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "…"


async def _ask(llm: LLMClient, what: str, text: str, schema: dict, config: EnvSynthConfig) -> dict:
    try:
        reply, _ = await llm.chat_json([{"role": "user", "content": text}], schema, name=what,
                                       attempts=config.json_attempts)
    except StructuredOutputError as exc:
        raise SubEnvFailed(f"{what}: LLM reply does not match the schema ({exc}); last reply: "
                           f"{_clip(exc.last_reply or '')!r}") from None
    return reply


def spec_problems(tool: dict) -> list[str]:
    from jsonschema import Draft202012Validator  # imported when used: it costs a command's start-up
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(tool["parameters"])
    except SchemaError as exc:
        return [f"parameters are not a valid JSON schema: {exc.message}"]
    unknown = [p for p in tool["parameters"].get("required", []) if p not in tool["parameters"]["properties"]]
    return [f"required parameter {p!r} is not among its properties" for p in unknown]


def call_problems(call: dict, tool: dict) -> list[str]:
    from jsonschema import Draft202012Validator

    if call["name"] != tool["name"]:
        return [f"the call names {call['name']!r}, not the tool {tool['name']!r}"]
    errors = Draft202012Validator(tool["parameters"]).iter_errors(call["arguments"])
    return [f"arguments {json.dumps(call['arguments'])} break the parameters: {e.message}" for e in errors][:3]


def _context(step: dict, trace: list[dict]) -> str:
    deps = {str(d) for d in step.get("dependency") or []}
    known = [f"- {s['sub_question']} -> {s['sub_answer']}" for s in trace if step_id(s) in deps]
    return ("Answers it builds on:\n" + "\n".join(known) + "\n") if known else ""


def _scaled_ok(original: dict, scaled: dict) -> str | None:
    """Why a scaled spec cannot replace the original (None when it can)."""
    if scaled.get("name") != original["name"]:
        return f"renamed the tool to {scaled.get('name')!r}"
    for name in original["parameters"].get("required", []):
        before = original["parameters"]["properties"].get(name, {}).get("type")
        after = scaled["parameters"]["properties"].get(name)
        if after is None:
            return f"dropped the required parameter {name!r}"
        if before and after.get("type") != before:
            return f"changed the type of {name!r}"
    problems = spec_problems(scaled)
    return "; ".join(problems) if problems else None


def function_code(text: str) -> str:
    """The code of an implementation reply (models often wrap it in a Markdown fence)."""
    fenced = re.search(r"```(?:python)?\s*\n(.*?)```", text, re.DOTALL)
    return (fenced.group(1) if fenced else text).strip() + "\n"


def statement(call: dict) -> str:
    """A Python call statement for display: `get_capital(country='Norway')`."""
    return f"{call['name']}(" + ", ".join(f"{k}={v!r}" for k, v in call["arguments"].items()) + ")"


async def synthesize_subenv(llm: LLMClient, verifier: Verifier, step: dict, trace: list[dict],
                            config: EnvSynthConfig) -> dict:
    """A verified sub-environment for one sub-task, or SubEnvFailed with every attempt's outcome."""
    question, answer, context = step["sub_question"], step["sub_answer"], _context(step, trace)
    where = f"sub-question {step_id(step)}"
    log: list[dict] = []
    reply = await _ask(llm, "tool_spec", prompts.TOOL_SPEC.format(question=question, answer=answer, context=context),
                       prompts.TOOL_SPEC_SCHEMA, config)
    tool = reply["tool"]
    problems = spec_problems(tool)
    if problems:
        raise SubEnvFailed(f"{where}: tool spec {tool['name']!r}: {'; '.join(problems)}")
    if config.scaling:
        try:
            scaled = (await _ask(llm, "complexity_scaling", prompts.SCALING.format(tool=json.dumps(tool)),
                                 prompts.TOOL_SPEC_SCHEMA, config))["tool"]
            why_not = _scaled_ok(tool, scaled)
        except SubEnvFailed as exc:
            why_not = str(exc)
        log.append({"step": "complexity_scaling", "outcome": why_not or "accepted"})
        if why_not is None:
            tool = scaled
    failures: list[str] = []
    for attempt in range(1, config.attempts + 1):
        outcome = await _attempt(llm, verifier, tool, question, answer, context, step, config)
        log.append({"attempt": attempt, **outcome})
        if outcome["outcome"] == "verified":
            return {"tool": {"type": "function", "function": tool}, "impl": tool["name"], "code": outcome["code"],
                    "source": {"kind": "llm", "log": log},
                    "calls": [{"sub_id": step["_uuid"], "tool": tool["name"], "arguments": outcome["call"]["arguments"],
                               "expected": answer}]}
        failures.append(f"attempt {attempt}: {outcome['outcome']}")
    raise SubEnvFailed(f"{where} ({question!r} -> {answer!r}): no implementation reproduced the answer in "
                       f"{config.attempts} attempt(s): " + "; ".join(failures))


async def _attempt(llm, verifier, tool, question, answer, context, step, config) -> dict:
    """One pass from the invocation statement: call -> implementation -> sandbox check."""
    try:
        reply = await _ask(llm, "call_statement", prompts.CALL.format(tool=json.dumps(tool), question=question,
                                                                      context=context, name=tool["name"]),
                           prompts.CALL_SCHEMA, config)
        call = reply["call"]
        problems = call_problems(call, tool)
        if problems:
            return {"outcome": "call statement: " + "; ".join(problems), "call": call}
        pairs = f"- Q: {question}\n  A: {answer}"
        reply = await _ask(llm, "implementation", prompts.IMPLEMENT.format(
            tool=json.dumps(tool), pairs=pairs, call=statement(call), name=tool["name"]), prompts.IMPLEMENT_SCHEMA,
            config)
    except SubEnvFailed as exc:
        return {"outcome": str(exc)}
    code = function_code(reply["function"])
    problems = static_problems(code, [tool["name"]])
    if problems:
        return {"outcome": "implementation: " + "; ".join(problems), "call": call, "code": code}
    check = (await asyncio.to_thread(verifier.check, code, [Call(step["_uuid"], tool["name"], call["arguments"],
                                                                 answer)]))[0]
    if check.ok:
        return {"outcome": "verified", "call": call, "code": code, "observation": check.observation}
    return {"outcome": "sandbox: " + check.reason(), "call": call, "code": code}
