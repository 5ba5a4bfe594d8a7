"""`build-env`: one verified environment per validated Q–A instance (paper §2.2.3).

Every sub-question that needs a tool gets a sub-environment: the programmatic lookup it carries
(`tool_source`), or one synthesized by the LLM with sandbox verification and retries. Tool-free
sub-questions (allowed only at leaves) get none. The sub-environments are composed into one module
and every call is run again against that module in the sandbox; the observations become the
record's `verified_calls`.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass

from astra_core.config import knob
from astra_core.llm import LLMClient
from astra_core.records import new_record
from astra_core.stage import Rejected

from astra_qaenv.compose import calls_of, compose_module, unique_names
from astra_qaenv.envsynth import EnvSynthConfig, SubEnvFailed, synthesize_subenv
from astra_qaenv.lookup import render_lookup
from astra_qaenv.trace import step_id
from astra_qaenv.verify import Verifier, all_ok, failures


@dataclass(frozen=True)
class BuildConfig(EnvSynthConfig):
    """Knobs of `astra-qaenv build-env`."""

    source: str = knob("auto", "auto: use a sub-question's programmatic tool_source when it has one; llm: always "
                               "synthesize.", choices=("auto", "llm"))


_IDENTIFIER = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}  # becomes a Python name in the tool's code
TOOL_SOURCE = {
    "type": "object",
    "description": "A programmatic sub-question's lookup table (astra-qaenv programmatic), rendered into its tool.",
    "required": ["tool", "param", "field", "rows"],
    "properties": {
        "kind": {"const": "lookup"},
        "tool": {"allOf": [{"$ref": "https://astra-toolkit.dev/schemas/common.json#/$defs/tool"},
                           {"properties": {"function": {"properties": {"name": _IDENTIFIER}}}}]},
        "param": _IDENTIFIER, "field": {"type": "string"}, "noun": {"type": "string"}, "rows": {"type": "object"},
    },
}
BUILD_INPUT = {
    "title": "qa_instance",
    "description": "A validated qa_instance; a sub-question built from its programmatic tool_source carries the "
                   "call that the tool must answer (tool_call).",
    "allOf": [{"$ref": "https://astra-toolkit.dev/schemas/qa_instance.json"}],
    "properties": {"decomposition_trace": {"items": {"properties": {
        "tool_source": TOOL_SOURCE,
        "tool_call": {"type": "object", "required": ["name", "arguments"],
                      "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}}}},
        "dependentRequired": {"tool_source": ["tool_call"]}}}},
}


def lookup_subenv(step: dict) -> dict:
    source = step["tool_source"]
    name = source["tool"]["function"]["name"]
    return {"tool": copy.deepcopy(source["tool"]), "impl": name, "code": render_lookup(source), "source": source,
            "calls": [{"sub_id": step["_uuid"], "tool": step["tool_call"]["name"],
                       "arguments": step["tool_call"]["arguments"], "expected": step["sub_answer"]}]}


def slim_instance(instance: dict) -> dict:
    """What later stages need of the instance (the trace without the tool sources they came with)."""
    keep = ("id", "domain", "scenario_type", "main_question", "final_answer", "scores")
    trace = [{k: v for k, v in s.items() if k not in ("tool_source", "tool_call")}
             for s in instance["decomposition_trace"]]
    return {**{k: instance[k] for k in keep if k in instance}, "decomposition_trace": trace}


def assemble(subenvs: list[dict], verifier: Verifier) -> tuple[str, list[dict]]:
    """Compose the module and verify every call against it; Rejected when any call fails."""
    code = compose_module(subenvs)
    calls = sorted(calls_of(subenvs), key=lambda c: (0, c.sub_id, "") if isinstance(c.sub_id, int) else (1, 0, str(c.sub_id)))
    checks = verifier.check(code, calls)
    if not all_ok(checks):
        raise Rejected("composed environment: " + failures(checks))
    return code, [check.verified() for check in checks]


def environment_record(instance: dict, subenvs: list[dict], code: str, verified: list[dict]) -> dict:
    return new_record(f"env-{instance['id']}", parent=instance, instance_id=instance["id"],
                      domain=instance.get("domain") or "general", tools=[s["tool"] for s in subenvs], code=code,
                      requirements=[], verified_calls=verified, subenvs=subenvs, instance=slim_instance(instance))


async def build_environment(instance: dict, llm: LLMClient | None, verifier: Verifier, config: BuildConfig) -> dict:
    """Validated qa_instance -> environment whose every tool call is verified in the sandbox.

    A sub-environment (tool + code) per sub-question that needs a tool, composed into one module; every
    call must return its sub-answer."""
    trace = instance["decomposition_trace"]
    unvalidated = [step_id(s) for s in trace if not isinstance(s.get("needs_tool"), bool)]
    if unvalidated:
        raise Rejected(f"not validated: sub-question(s) {', '.join(unvalidated)} have no needs_tool flag "
                       "(run astra-qaenv validate first)")
    tool_steps = [s for s in trace if s["needs_tool"]]
    if not tool_steps:
        raise Rejected("no sub-question needs a tool, so there is no environment to build")

    async def one(step: dict) -> dict:
        if config.source == "auto" and step.get("tool_source"):
            return lookup_subenv(step)
        if llm is None:
            raise SubEnvFailed(f"sub-question {step_id(step)} has no tool_source and no LLM is configured")
        return await synthesize_subenv(llm, verifier, step, trace, config)

    results = await asyncio.gather(*(one(s) for s in tool_steps), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, SubEnvFailed):
            raise result
    failed = [str(r) for r in results if isinstance(r, SubEnvFailed)]
    if failed:
        raise Rejected("environment synthesis: " + " | ".join(failed))
    subenvs = unique_names(results)
    code, verified = await asyncio.to_thread(assemble, subenvs, verifier)
    return environment_record(instance, subenvs, code, verified)
