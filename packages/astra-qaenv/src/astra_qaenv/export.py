"""`export`: environments -> RL samples (and gold trajectories for the SFT warm start).

An `rl_sample` holds everything one GRPO episode needs: the system and user prompt, the tools shown
to the policy (the environment's plus irrelevant ones, shuffled), the environment code, and the job
(every sub-Q–A pair) the F1 reward checks (paper Eq. 29–31).

A gold trajectory solves the sample with the environment's verified calls: one assistant turn per
hop level (the calls of a level in parallel), the sandbox's real observations, then the final answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from astra_core.jsonl import MalformedLine, iter_raw_lines, parse_line
from astra_core.records import new_record, stable_id
from astra_core.stage import Rejected
from astra_reward import contains_answer, f1_reward

from astra_qaenv.export_config import ExportConfig, MixingConfig  # noqa: F401 - their home before
from astra_qaenv.mixing import ToolPool, dedup_tools, distractors, shuffled_tools
from astra_qaenv.prompts import SYSTEM_PROMPT
from astra_qaenv.trace import by_level, dag_levels, step_id


def pool_entries(records: Iterable[dict]) -> Iterable[tuple[dict, str]]:
    """(tool, domain) from environments, tool servers, RL samples, trajectories or bare tool rows."""
    for record in records:
        domain = record.get("domain") or (record.get("instance") or {}).get("domain") or "unknown"
        if record.get("type") == "function" and "function" in record:
            yield record, domain
            continue
        hidden = set(record.get("distractors") or [])  # an rl_sample's distractors belong to other domains
        if record.get("subenvs"):  # an environment: its tools under their own names (`x`, not the `x_2` of a clash)
            for subenv in record["subenvs"]:
                tool = subenv["tool"]
                name = subenv.get("base_name") or tool["function"]["name"]
                yield {**tool, "function": {**tool["function"], "name": name}}, domain
            continue
        for tool in record.get("tools") or []:
            if tool.get("type") == "function" and tool["function"]["name"] not in hidden:
                yield tool, domain


def load_pool(paths: list[str], *, kind: str | None = None, skip_bad: bool = False) -> ToolPool:
    """The unique tools of the records in `paths` (of `kind` when given). A malformed line stops it unless
    `skip_bad`: a stage reading the same files rejects them itself."""
    tools, domains = dedup_tools(pool_entries(_records(paths, kind, skip_bad)))
    return ToolPool(tools, domains)


def _records(paths: list[str], kind: str | None, skip_bad: bool) -> Iterable[dict]:
    for source, lineno, raw in iter_raw_lines(paths):
        try:
            yield parse_line(source, lineno, raw, kind).record
        except MalformedLine:
            if not skip_bad:
                raise


def job_of(instance: dict) -> list[dict]:
    """The job (Eq. 29): every sub-Q–A pair, with its place in the DAG (for statistics and curricula)."""
    trace = instance["decomposition_trace"]
    levels = dag_levels(trace)
    return [{"id": s["_uuid"], "question": s["sub_question"], "answer": s["sub_answer"],
             "needs_tool": bool(s.get("needs_tool", True)), "hop_level": levels[step_id(s)],
             "dependency": s.get("dependency")} for s in trace]


def export_sample(env: dict, pool: ToolPool, config: ExportConfig) -> dict:
    instance = env["instance"]
    own = env["tools"]
    own_names = [t["function"]["name"] for t in own]
    domain = env.get("domain") or instance.get("domain") or "unknown"
    seed = int(stable_id(config.seed, env["id"], length=8), 16)
    mix = distractors(pool, own_names, [domain], config, seed)
    extra = [pool.tools[pool.index[name]] for name in mix["names"]]
    messages = [{"role": "system", "content": config.system_prompt or SYSTEM_PROMPT},
                {"role": "user", "content": instance["main_question"]}]
    return new_record(f"rl-{env['id'].removeprefix('env-')}", parent=env, messages=messages,
                      tools=shuffled_tools(own, extra, seed), distractors=mix["names"],
                      environment={"code": env["code"], "requirements": env.get("requirements") or []},
                      job=job_of(instance), reward={"kind": config.reward}, user=None, domain=domain,
                      scenario_type=instance.get("scenario_type"), instance_id=env.get("instance_id"),
                      final_answer=instance.get("final_answer"), mixing=mix)


def gold_trajectory(sample: dict, env: dict) -> dict:
    """A trajectory that solves `sample` with the environment's verified calls and real observations."""
    verified = {str(c["sub_id"]): c for c in env.get("verified_calls") or []}
    messages = [dict(m) for m in sample["messages"]]
    n = 0
    for level in by_level(env["instance"]["decomposition_trace"]):
        steps = [s for s in level if s.get("needs_tool", True)]
        if not steps:
            continue
        missing = [step_id(s) for s in steps if step_id(s) not in verified]
        if missing:
            raise Rejected(f"gold trajectory: no verified call for sub-question(s) {', '.join(missing)}")
        calls, results = [], []
        for step in steps:
            n += 1
            call = verified[step_id(step)]
            call_id = f"call_{n}"
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": call["tool"], "arguments": json.dumps(call["arguments"],
                                                                                     ensure_ascii=False)}})
            results.append({"role": "tool", "tool_call_id": call_id, "name": call["tool"],
                            "content": call["observation"]})
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages.extend(results)
    messages.append({"role": "assistant", "content": final_message(env["instance"])})
    return new_record(f"gold-{sample['id']}", parent=sample, task_id=sample["id"], messages=messages,
                      tools=sample["tools"], origin="gold")


def solvable(sample: dict, env: dict) -> dict:
    """The gold trajectory, checked to earn the full F1 reward (paper Eq. 31) on the sample's job.

    A sample its own verified calls cannot fully solve would give the policy an unreachable target,
    so it is rejected with the reward's verdict.
    """
    trajectory = gold_trajectory(sample, env)
    result = f1_reward(sample["job"], trajectory["messages"])
    if result.reward < 1.0:
        unsolved = [str(j["id"]) for j in sample["job"] if j["id"] not in result.solved_ids]
        raise Rejected(f"gold trajectory earns F1 {result.reward:.2f} < 1 (sub-questions {', '.join(unsolved)} not "
                       f"solved by {result.calls} verified calls)")
    trajectory["scores"] = {"f1": result.reward, "recall": result.recall, "precision": result.precision}
    return trajectory


def final_message(instance: dict) -> str:
    """The final answer; tool-free sub-answers it does not state are appended so the reward finds them."""
    text = instance["final_answer"]
    missing = [s for s in instance["decomposition_trace"]
               if not s.get("needs_tool", True) and not contains_answer(text, s["sub_answer"])]
    for step in missing:
        text += f"\n{step['sub_question']} {step['sub_answer']}"
    return text
