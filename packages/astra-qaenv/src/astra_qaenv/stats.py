"""Dataset statistics and plots in the style of paper A.1.2 (Figures 11–13).

Works on Q–A instances, environments and RL samples alike: domains, scenario types, sub-questions
per sample (the paper's "reasoning hops": 28,794 sub-questions / 6,596 samples = 4.37), hop levels
(DAG depth), tool calls per sample (sub-questions that need a tool), and the share of steps that
can run in parallel (steps sharing their hop level with another step).
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from astra_core.extras import require

from astra_qaenv.trace import dag_levels, parallelizable_ids, scenario_of, structural_problems


def trace_of(record: dict) -> list[dict] | None:
    if "decomposition_trace" in record:
        return record["decomposition_trace"]
    if "instance" in record:
        return record["instance"]["decomposition_trace"]
    if "job" in record:
        return [{"_uuid": j.get("id", i), "dependency": j.get("dependency"), "needs_tool": j.get("needs_tool", True),
                 "hop_level": j.get("hop_level")} for i, j in enumerate(record["job"], start=1)]
    return None


def _spread(values: list[int]) -> dict:
    if not values:
        return {"mean": 0, "median": 0, "min": 0, "max": 0}
    return {"mean": round(statistics.fmean(values), 2), "median": statistics.median(values), "min": min(values),
            "max": max(values)}


def summarize(records: list[dict]) -> dict:
    domains, scenarios, languages = Counter(), Counter(), Counter()
    hops, depths, calls = [], [], []
    steps = tool_steps = parallel_steps = 0
    skipped = 0
    for record in records:
        trace = trace_of(record)
        if not trace or structural_problems(trace):
            skipped += 1
            continue
        instance = record.get("instance") or record
        domains[record.get("domain") or instance.get("domain") or "unknown"] += 1
        scenarios[record.get("scenario_type") or instance.get("scenario_type") or scenario_of(trace)] += 1
        if record.get("language"):
            languages[record["language"]] += 1
        hops.append(len(trace))
        depths.append(max(dag_levels(trace).values()))
        needing = sum(1 for s in trace if s.get("needs_tool", True))
        calls.append(needing)
        steps += len(trace)
        tool_steps += needing
        parallel_steps += len(parallelizable_ids(trace))
    return {
        "samples": len(hops), "skipped": skipped,
        "domains": dict(domains.most_common()), "scenario_types": dict(scenarios.most_common()),
        "sub_questions": steps, "sub_questions_per_sample": _spread(hops),
        "sub_questions_per_sample_histogram": dict(sorted(Counter(hops).items())),
        "hop_levels_per_sample": _spread(depths), "hop_levels_histogram": dict(sorted(Counter(depths).items())),
        "tool_calls_per_sample": _spread(calls), "tool_calls_histogram": dict(sorted(Counter(calls).items())),
        "tool_sub_question_share": round(tool_steps / steps, 4) if steps else 0.0,
        "parallelizable_step_share": round(parallel_steps / steps, 4) if steps else 0.0,
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
        fig, ax = plt.subplots(figsize=(6, 3.6))
        ax.bar([str(k) for k in histogram], [100 * v / total for v in histogram.values()], color="#55A868")
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
