"""Dataset statistics and plots in the style of paper A.1.2 (Figures 11–13).

Works on Q–A instances, environments and RL samples alike: domains, scenario types, sub-questions
per sample (the paper's "reasoning hops": 28,794 sub-questions / 6,596 samples = 4.37), hop levels
(DAG depth), tool calls per sample (sub-questions that need a tool), and the share of steps that
can run in parallel (steps sharing their hop level with another step).

A figure a record cannot give (an environment without its instance has no sub-question count, an rl_sample
whose job carries no dependencies no hop levels) leaves that record out of that figure only: `samples` in a
spread says how many samples it is over.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from astra_core.extras import require
from astra_core.stage import Rejected

from astra_qaenv.trace import dag_levels, parallelizable_ids, scenario_of, structural_problems

_SCHEMAS = "https://astra-toolkit.dev/schemas/"
_LABEL = {"type": ["string", "null"]}
_TRACE = {"$ref": _SCHEMAS + "qa_instance.json#/properties/decomposition_trace"}

STATS_INPUT = {
    "title": "qa_instance, environment or rl_sample",
    "description": "A record with a decomposition_trace is read as a qa_instance, one with messages, job or reward as "
                   "an rl_sample (its job items may carry hop_level and dependency), one with instance_id, code, "
                   "verified_calls or instance as an environment (its `instance`, when build-env wrote one, is the "
                   "Q–A instance it came from), any other as a qa_instance that lacks its decomposition_trace.",
    "type": "object",
    "properties": {"domain": _LABEL, "scenario_type": _LABEL, "language": _LABEL},
    "if": {"required": ["decomposition_trace"]},
    "then": {"$ref": _SCHEMAS + "qa_instance.json"},
    "else": {
        "if": {"anyOf": [{"required": ["messages"]}, {"required": ["job"]}, {"required": ["reward"]}]},
        "then": {"allOf": [{"$ref": _SCHEMAS + "rl_sample.json"}, {"properties": {"job": {"items": {"properties": {
            "hop_level": {"type": "integer", "minimum": 1},
            "dependency": {"type": ["array", "null"], "items": {"type": ["integer", "string"]}}}}}}}]},
        "else": {
            "if": {"anyOf": [{"required": [key]} for key in ("instance_id", "code", "verified_calls", "instance")]},
            "then": {"allOf": [{"$ref": _SCHEMAS + "environment.json"}, {"properties": {"instance": {
                "type": ["object", "null"],
                "properties": {"domain": _LABEL, "scenario_type": _LABEL, "decomposition_trace": _TRACE}}}}]},
            "else": {"$ref": _SCHEMAS + "qa_instance.json"},  # none of the three: say what a qa_instance lacks
        },
    },
}


@dataclass
class Profile:
    """What one record tells about its sample; None where the record does not say (left out of that figure)."""

    domain: str
    scenario: str | None = None
    language: str | None = None
    sub_questions: int | None = None
    hop_levels: int | None = None
    tool_calls: int | None = None
    parallelizable: int | None = None  # steps sharing their hop level with another step


def _job_trace(job: list[dict]) -> list[dict]:
    """An rl_sample's job as trace steps (hop levels only where the items carry them)."""
    return [{"_uuid": j.get("id", i), "dependency": j.get("dependency"), "needs_tool": j.get("needs_tool", True),
             **({"hop_level": j["hop_level"]} if "hop_level" in j else {})} for i, j in enumerate(job, start=1)]


def profile(record: dict) -> Profile:
    """The figures of one valid qa_instance / environment / rl_sample (see STATS_INPUT); Rejected when its
    decomposition is not a well-formed DAG."""
    instance = record.get("instance") or {}
    trace, where, dag = None, "decomposition_trace", True
    if "decomposition_trace" in record:
        trace = record["decomposition_trace"]
    elif "decomposition_trace" in instance:
        trace, where = instance["decomposition_trace"], "instance.decomposition_trace"
    elif "job" in record:
        trace, where = _job_trace(record["job"]), "job"
        dag = any("dependency" in j for j in record["job"])  # without them, the job's order says nothing of its DAG
    out = Profile(domain=record.get("domain") or instance.get("domain") or "unknown",
                  scenario=record.get("scenario_type") or instance.get("scenario_type"),
                  language=record.get("language"))
    if trace is None:
        if "verified_calls" in record:  # an environment without its instance: one verified call per tool step
            out.tool_calls = len(record["verified_calls"])
        return out
    out.sub_questions = len(trace)
    out.tool_calls = sum(1 for step in trace if step.get("needs_tool", True))
    if not trace or not dag:
        return out
    problems = structural_problems(trace, optional_levels=where == "job")
    if problems:
        raise Rejected(f"invalid {where}: {'; '.join(problems)}")
    out.hop_levels = max(dag_levels(trace).values())
    out.parallelizable = len(parallelizable_ids(trace))
    out.scenario = out.scenario or scenario_of(trace)
    return out


def _spread(values: list[int]) -> dict:
    if not values:
        return {"mean": 0, "median": 0, "min": 0, "max": 0, "samples": 0}
    return {"mean": round(statistics.fmean(values), 2), "median": statistics.median(values), "min": min(values),
            "max": max(values), "samples": len(values)}


def summarize(records: list[dict]) -> dict:
    """The dataset figures of valid records (Rejected for a malformed decomposition, see `profile`)."""
    return summarize_profiles([profile(record) for record in records])


def summarize_profiles(profiles: list[Profile]) -> dict:
    """Every figure over the samples whose records give it (`samples` in a spread says how many)."""
    domains = Counter(p.domain for p in profiles)
    scenarios = Counter(p.scenario for p in profiles if p.scenario)
    languages = Counter(p.language for p in profiles if p.language)
    hops = [p.sub_questions for p in profiles if p.sub_questions is not None]
    depths = [p.hop_levels for p in profiles if p.hop_levels is not None]
    calls = [p.tool_calls for p in profiles if p.tool_calls is not None]
    with_calls = [p for p in profiles if p.sub_questions and p.tool_calls is not None]
    with_dag = [p for p in profiles if p.sub_questions and p.parallelizable is not None]
    steps_with_calls = sum(p.sub_questions for p in with_calls)
    steps_with_dag = sum(p.sub_questions for p in with_dag)
    return {
        "samples": len(profiles),
        "domains": dict(domains.most_common()), "scenario_types": dict(scenarios.most_common()),
        "sub_questions": sum(hops), "sub_questions_per_sample": _spread(hops),
        "sub_questions_per_sample_histogram": dict(sorted(Counter(hops).items())),
        "hop_levels_per_sample": _spread(depths), "hop_levels_histogram": dict(sorted(Counter(depths).items())),
        "tool_calls_per_sample": _spread(calls), "tool_calls_histogram": dict(sorted(Counter(calls).items())),
        "tool_sub_question_share": round(sum(p.tool_calls for p in with_calls) / steps_with_calls, 4)
        if steps_with_calls else 0.0,
        "parallelizable_step_share": round(sum(p.parallelizable for p in with_dag) / steps_with_dag, 4)
        if steps_with_dag else 0.0,
        **({"languages": dict(languages)} if languages else {}),
    }


def pyplot():
    """matplotlib.pyplot on the Agg backend; MissingExtra naming the `plots` extra when matplotlib is absent."""
    matplotlib = require("matplotlib", extra="astra-qaenv[plots]", needed_by="astra-qaenv stats --plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(summary: dict, outdir: str | Path) -> list[Path]:
    """PNG figures of a summary; returns the files written."""
    plt = pyplot()

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    total = max(summary["samples"], 1)

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        written.append(out / name)

    top = list(summary["domains"].items())[:20]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(top) + 1.2))
    ax.barh([d for d, _ in reversed(top)], [100 * n / total for _, n in reversed(top)], color="#4C72B0")
    ax.set_xlabel("% of samples")
    ax.set_title("Top domains")
    save(fig, "domains.png")

    fig, ax = plt.subplots(figsize=(5.5, 4))
    names = list(summary["scenario_types"])
    _pie(ax, [summary["scenario_types"][n] for n in names], names)
    ax.set_title("Scenario types")
    save(fig, "scenario_types.png")

    for key, name, title, xlabel in (
            ("tool_calls_histogram", "tool_calls.png", "Tool calls per sample", "tool calls"),
            ("sub_questions_per_sample_histogram", "hops.png", "Sub-questions (hops) per sample", "sub-questions"),
            ("hop_levels_histogram", "hop_levels.png", "Hop levels (DAG depth) per sample", "hop levels")):
        histogram = summary[key]
        counted = max(sum(histogram.values()), 1)  # the samples that give this figure
        fig, ax = plt.subplots(figsize=(6, 3.6))
        ax.bar([str(k) for k in histogram], [100 * v / counted for v in histogram.values()], color="#55A868")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("% of samples")
        ax.set_title(title)
        save(fig, name)

    share = summary["parallelizable_step_share"]
    fig, ax = plt.subplots(figsize=(4.5, 3.6))
    _pie(ax, [share, 1 - share] if summary["sub_questions"] else [], ["parallelizable", "serial"],
         colors=["#DD8452", "#8172B3"])
    ax.set_title("Steps by execution")
    save(fig, "parallelizable.png")
    return written


def _pie(ax, values: list, labels: list[str], **kwargs) -> None:
    if not sum(values):
        ax.text(0.5, 0.5, "no data", ha="center", va="center")
        ax.axis("off")
        return
    ax.pie(values, labels=labels, autopct="%1.1f%%", startangle=90, **kwargs)
