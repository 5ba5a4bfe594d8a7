"""`merge`: intra-instance sub-environment merging (paper §2.2.4).

1. Homogeneous sub-question identification: sub-environments whose sub-questions share an intent
   and differ only in parameter values (the weather in two cities) form a group. Programmatic lookups
   group exactly by their tool; others are grouped by the LLM.
2. Database expansion: per group, one member (chosen at random) is the base; every other member is
   inserted into it by extending its data: table lookups by the union of their rows, LLM-written tools
   by an LLM rewrite plus a new call statement. After each insertion every call the tool must answer
   runs again in the sandbox; an insertion that breaks any call is undone and that member keeps a tool
   of its own (the environment stays valid, and the merge log says why).
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass

from astra_core.config import knob
from astra_core.llm import LLMClient, StructuredOutputError
from astra_core.records import stable_id

from astra_qaenv import prompts
from astra_qaenv.build import assemble
from astra_qaenv.compose import tool_name, unique_names
from astra_qaenv.envsynth import EnvSynthConfig, call_problems, function_code, statement
from astra_qaenv.lookup import MergeConflict, merge_rows, render_lookup
from astra_qaenv.verify import Call, Verifier, all_ok, failures, static_problems


@dataclass(frozen=True)
class MergeConfig(EnvSynthConfig):
    """Knobs of `astra-qaenv merge`."""

    grouping: str = knob("auto", "Homogeneous groups: auto = lookups by tool and the rest by the LLM; name; llm.",
                         choices=("auto", "name", "llm"))
    seed: int = knob(0, "Seed of each group's base choice.", flag="merge-seed")


def _is_lookup(subenv: dict) -> bool:
    return subenv.get("source", {}).get("kind") == "lookup"


def _name_key(subenv: dict) -> tuple:
    params = sorted(subenv["tool"]["function"].get("parameters", {}).get("properties", {}))
    return (subenv.get("base_name", tool_name(subenv)), tuple(params))


def _by_name(indices: list[int], subenvs: list[dict]) -> list[list[int]]:
    groups: dict[tuple, list[int]] = {}
    for i in indices:
        groups.setdefault(_name_key(subenvs[i]), []).append(i)
    return list(groups.values())


async def _by_llm(indices: list[int], subenvs: list[dict], questions: dict[str, str], llm: LLMClient,
                  config: MergeConfig, log: list[str]) -> list[list[int]]:
    if len(indices) < 2:
        return [[i] for i in indices]
    owner = {str(c["sub_id"]): i for i in indices for c in subenvs[i]["calls"]}
    steps = "\n".join(f"{sub}. {questions.get(sub, '')}" for sub in owner)
    try:
        reply, _ = await llm.chat_json([{"role": "user", "content": prompts.GROUP.format(steps=steps)}],
                                       prompts.GROUP_SCHEMA, name="homogeneous_groups",
                                       attempts=config.json_attempts)
    except StructuredOutputError as exc:
        log.append(f"grouping: LLM reply unusable ({exc}); no LLM-grouped merges")
        return [[i] for i in indices]
    groups, placed = [], set()
    for cluster in reply["clusters"]:
        members = []
        for sub in map(str, cluster["_uuids"]):
            if sub not in owner:
                log.append(f"grouping: the LLM named unknown sub-question {sub}; ignored")
            elif owner[sub] in placed:
                log.append(f"grouping: the LLM put sub-question {sub} in two groups; kept in the first")
            elif owner[sub] not in members:
                members.append(owner[sub])
        placed |= set(members)
        if members:
            groups.append(members)
    groups += [[i] for i in indices if i not in placed]
    return groups


async def group_subenvs(env: dict, llm: LLMClient | None, config: MergeConfig, log: list[str]) -> list[list[int]]:
    subenvs = env["subenvs"]
    questions = {str(s["_uuid"]): s["sub_question"] for s in env["instance"]["decomposition_trace"]}
    everything = list(range(len(subenvs)))
    if config.grouping == "name":
        return _by_name(everything, subenvs)
    if config.grouping == "llm":
        return await _by_llm(everything, subenvs, questions, llm, config, log)
    lookups = [i for i in everything if _is_lookup(subenvs[i])]
    others = [i for i in everything if not _is_lookup(subenvs[i])]
    llm_groups = await _by_llm(others, subenvs, questions, llm, config, log) if llm else [[i] for i in others]
    return _by_name(lookups, subenvs) + llm_groups


def _retarget(calls: list[dict], name: str) -> list[dict]:
    return [{**c, "tool": name} for c in calls]


def _check(verifier: Verifier, code: str, calls: list[dict]):
    return verifier.check(code, [Call(c["sub_id"], c["tool"], c["arguments"], c["expected"]) for c in calls])


async def _insert_lookup(base: dict, member: dict, verifier: Verifier) -> tuple[dict | None, str]:
    try:
        source = merge_rows(base["source"], member["source"])
    except MergeConflict as exc:
        return None, f"tables conflict: {exc}"
    calls = base["calls"] + _retarget(member["calls"], tool_name(base))
    code = render_lookup(source, base["impl"])
    checks = await asyncio.to_thread(_check, verifier, code, _retarget(calls, base["impl"]))  # the code alone
    if not all_ok(checks):
        return None, "re-verification failed: " + failures(checks)
    return {**base, "source": source, "code": code, "calls": calls}, "merged by table union"


async def _insert_llm(base: dict, member: dict, questions: dict[str, str], llm: LLMClient, verifier: Verifier,
                      config: MergeConfig) -> tuple[dict | None, str]:
    tool = base["tool"]["function"]
    name = base["impl"]
    covered = "\n".join(f"- {statement({'name': name, 'arguments': c['arguments']})} -> {c['expected']!r}"
                        for c in base["calls"])
    outcomes = []
    for new_call in member["calls"]:
        question = questions.get(str(new_call["sub_id"]), "")
        for attempt in range(1, config.attempts + 1):
            text = prompts.MERGE.format(tool=json.dumps({**tool, "name": name}), code=base["code"], calls=covered,
                                        question=question, answer=new_call["expected"], other_code=member["code"],
                                        name=name)
            try:
                reply, _ = await llm.chat_json([{"role": "user", "content": text}], prompts.MERGE_SCHEMA,
                                               name="merge_insertion", attempts=config.json_attempts)
            except StructuredOutputError as exc:
                outcomes.append(f"attempt {attempt}: LLM reply unusable ({exc})")
                continue
            code = function_code(reply["function"])
            call = reply["call"]
            problems = call_problems(call, {**tool, "name": name}) + static_problems(code, [name])
            if problems:
                outcomes.append(f"attempt {attempt}: " + "; ".join(problems))
                continue
            calls = base["calls"] + [{**new_call, "tool": name, "arguments": call["arguments"]}]
            checks = await asyncio.to_thread(_check, verifier, code, _retarget(calls, name))
            if all_ok(checks):
                base = {**base, "code": code, "calls": _retarget(calls, tool_name(base))}
                break
            outcomes.append(f"attempt {attempt}: re-verification failed: " + failures(checks))
        else:
            return None, "; ".join(outcomes)
    return base, "merged by LLM data expansion"


async def merge_environment(env: dict, llm: LLMClient | None, verifier: Verifier, config: MergeConfig) -> dict:
    """environment -> environment with homogeneous sub-environments merged (all calls re-verified)."""
    log: list[str] = []
    subenvs = env["subenvs"]
    questions = {str(s["_uuid"]): s["sub_question"] for s in env["instance"]["decomposition_trace"]}
    groups = await group_subenvs(env, llm, config, log)
    merged: list[dict] = []
    for group in groups:
        rng = random.Random(stable_id(config.seed, env["id"], group))
        order = list(group)
        base = subenvs[order.pop(rng.randrange(len(order)))]
        separate = []
        for index in order:
            member = subenvs[index]
            if _is_lookup(base) and _is_lookup(member) and _name_key(base) == _name_key(member):
                result, how = await _insert_lookup(base, member, verifier)
            elif llm is not None:
                result, how = await _insert_llm(base, member, questions, llm, verifier, config)
            else:
                result, how = None, "needs an LLM to rewrite the implementation"
            subs = ", ".join(str(c["sub_id"]) for c in member["calls"])
            if result is None:
                separate.append(member)
                log.append(f"sub-question(s) {subs} kept their own tool {tool_name(member)}: {how}")
            else:
                base = result
                log.append(f"sub-question(s) {subs}: {tool_name(member)} -> {tool_name(base)} ({how})")
        merged += [base, *separate]
    if len(merged) == len(subenvs):
        return {**env, "merge": {"groups": _group_ids(groups, subenvs), "log": log, "tools_before": len(subenvs),
                                 "tools_after": len(subenvs)}}
    merged = unique_names(merged)  # a group whose base was `x_2` gives its tool back the plain name `x`
    code, verified = await asyncio.to_thread(assemble, merged, verifier)
    return {**env, "tools": [s["tool"] for s in merged], "code": code, "verified_calls": verified, "subenvs": merged,
            "merge": {"groups": _group_ids(groups, subenvs), "log": log, "tools_before": len(subenvs),
                      "tools_after": len(merged)}}


def _group_ids(groups: list[list[int]], subenvs: list[dict]) -> list[list]:
    return [[c["sub_id"] for i in group for c in subenvs[i]["calls"]] for group in groups]
