#!/usr/bin/env python3
"""The short summary `make demo` prints at its end, built only from the files its steps wrote.

    scripts/demo_summary.py out/demo          # text on stdout

Per step: the records it read, wrote and rejected (from its JSONL files; a step that was skipped or
failed before writing says so), its time (from OUT/timings.tsv, written by scripts/demo), and the three
numbers a newcomer asks for: tool calls per episode of the SFT policy, the GRPO reward over the
training steps, and the benchmark scores of the eval step's ground-truth replays and model slices.
Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Step:
    name: str
    inputs: tuple[str, ...]  # globs under OUT: the records the step starts from
    in_noun: str
    outputs: tuple[str, ...]  # the records it ends with
    out_noun: str
    rejects: tuple[str, ...] = ()  # every record it dropped, each with its reason
    detail: str = ""  # name of a function OUT -> the out column, when a count alone says too little
    in_detail: str = ""  # the same for the in column, when the step's inputs are not JSONL records


EVOLVE_TASKS = ("evolve/tasks.jsonl", "evolve/more_tasks.jsonl", "evolve/agent_tasks.jsonl",
                "evolve/seed_verified.jsonl")
EVOLVE_TRAJECTORIES = ("evolve/trajectories.jsonl", "evolve/more_trajectories.jsonl",
                       "evolve/agent_trajectories.jsonl", "evolve/seed_verified_trajectories.jsonl")

STEPS = (
    Step("00-core", ("examples/*.jsonl",), "record kinds", ("examples/*.jsonl",), "validated"),
    Step("10-sandbox", ("sandbox/requests.jsonl",), "run_code requests", ("sandbox/results.jsonl",), "results",
         detail="sandbox_results"),
    Step("20-reward", ("reward/rollouts.f1.jsonl", "reward/states.match.jsonl", "reward/states.mismatch.jsonl"),
         "rollouts and states", ("reward/rollouts.kept.jsonl", "reward/states.match.jsonl"), "kept",
         ("reward/rollouts.low.jsonl", "reward/states.mismatch.jsonl")),
    Step("30-toolgraph", ("toolgraph/sources.jsonl",), "tool sources", ("toolgraph/trajectories.jsonl",),
         "trajectories", ("toolgraph/*rejects*.jsonl",)),
    Step("35-ray", ("toolgraph/graphs.jsonl", "toolgraph/tasks.input.jsonl"), "graphs and task sources",
         ("ray/walks.jsonl", "ray/tasks.jsonl"), "chains and tasks on Ray", ("ray/*.rejects.jsonl",)),
    Step("40-qaenv", ("qaenv/starts.jsonl",), "KB entities", ("qaenv/rl_samples.jsonl",), "RL samples",
         ("qaenv/rejects.*.jsonl",)),
    Step("45-openenv", ("openenv/served.jsonl",), "served samples", ("openenv/rollouts.jsonl",),
         "episodes over OpenEnv", ("openenv/rejects.jsonl",)),
    Step("50-grpo", ("grpo/sft_data.jsonl", "grpo/rl_data.jsonl"), "trajectories and RL samples",
         ("grpo/train_rollouts.jsonl", "grpo/rollouts.jsonl"), "episodes", ("grpo/rejects.*.jsonl",)),
    Step("51-async", ("grpo/rl_data.jsonl",), "RL samples", ("async/k*.rollouts.jsonl",),
         "episodes (k=0 and k=1)"),
    Step("52-families", ("families/model-families.md",), "", ("families/refused.txt",), "",
         in_detail="family_templates", detail="family_refusal"),
    Step("55-cp", ("cp/rl_data.jsonl",), "RL samples", ("cp/sft/metrics.jsonl", "cp/grpo/metrics.jsonl"),
         "CP=2 training steps", ("cp/rejects.*.jsonl",)),
    Step("60-eval", ("eval/*/*.jsonl",), "benchmark items", ("eval/*/*.jsonl",), "scored"),
    Step("70-evolve", ("evolve/domain.jsonl", "evolve/more_domains.jsonl"), "domains",
         EVOLVE_TASKS + EVOLVE_TRAJECTORIES, "tasks and trajectories", ("evolve/rejects.*.jsonl",),
         detail="evolve_verdicts"),
)


def files(out: Path, globs: tuple[str, ...]) -> list[Path]:
    return sorted({path for pattern in globs for path in out.glob(pattern) if path.is_file()})


def count(paths: list[Path]) -> int:
    return sum(1 for path in paths for line in path.open(encoding="utf-8", errors="replace") if line.strip())


def records(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    rows = []
    for line in path.open(encoding="utf-8"):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by an interrupted run: the others still count
    return rows


def timings(out: Path) -> dict[str, int]:
    """step -> seconds of its newest run (scripts/demo appends a line per step run)."""
    seconds = {}
    path = out / "timings.tsv"
    if path.is_file():
        for line in path.read_text().splitlines():
            step, _, value = line.partition("\t")
            if value.strip().isdigit():
                seconds[step] = int(value)
    return seconds


def step_rows(out: Path) -> list[list[str]]:
    seconds = timings(out)
    rows = []
    for step in STEPS:
        ins, outs, rejects = files(out, step.inputs), files(out, step.outputs), files(out, step.rejects)
        took = f"{seconds[step.name]} s" if step.name in seconds else ""
        if not ins and not outs:
            rows.append([step.name, "skipped (no outputs)", "", "", took])
            continue
        made = globals()[step.detail](out) if step.detail else f"{count(outs)} {step.out_noun}"
        took_in = globals()[step.in_detail](out) if step.in_detail else f"{count(ins)} {step.in_noun}"
        rows.append([step.name, took_in, made, str(count(rejects)), took])
    steps_total = sum(value for name, value in seconds.items() if name[:2].isdigit() and name[:2] <= "70")
    if steps_total:
        rows.append(["steps 00-70", "", "", "", duration(steps_total)])
    return rows


def duration(seconds: int) -> str:
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def verdicts(out: Path, globs: tuple[str, ...], accepted: str) -> tuple[int, int]:
    rows = [r for path in files(out, globs) for r in records(path)]
    return len(rows), sum((r.get("verification") or {}).get("verdict") == accepted for r in rows)


def sandbox_results(out: Path) -> str:
    """The results, and how many hostile snippets each selftest (as root, and without root) contained."""
    made = f"{count(files(out, ('sandbox/results.jsonl',)))} results"
    for name in ("selftest", "selftest_one_user"):
        table_text, log = (out / "sandbox" / f"{name}.txt", out / "sandbox" / f"{name}.log")
        found = re.search(r"(\d+)/(\d+) hostile snippets tried, (\d+) contained",
                          table_text.read_text() if table_text.is_file() else "")
        jail = re.search(r"in a jail of ([a-z ]+?) in", log.read_text() if log.is_file() else "")
        if found:
            made += f"; {found[3]}/{found[2]} hostile contained ({jail[1] if jail else 'no jail'})"
    return made


def evolve_verdicts(out: Path) -> str:
    tasks, passed = verdicts(out, EVOLVE_TASKS, "PASS")
    trajectories, succeeded = verdicts(out, EVOLVE_TRAJECTORIES, "SUCCESS")
    return f"{tasks} tasks ({passed} PASS), {trajectories} trajectories ({succeeded} SUCCESS)"


def family_templates(out: Path) -> str:
    """How many tool-capable chat templates the families table lists, and in how many reply formats."""
    path = out / "families" / "model-families.md"
    rows = [line.split(" | ") for line in path.read_text().splitlines() if line.startswith("| `") and ".jinja`" in line]
    return f"{len(rows)} templates, {len({row[1] for row in rows})} reply formats"


def family_refusal(out: Path) -> str:
    """Whether the template whose calls nothing reads was refused at start (the step fails if it was not)."""
    refused = out / "families" / "refused.txt"
    said = refused.read_text() if refused.is_file() else ""
    return "unreadable template refused at start" if "--response-template" in said else "no refusal written"


def table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    line = lambda row: "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))  # noqa: E731
    return [line(header).rstrip(), *(line(row).rstrip() for row in rows)]


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def tool_calls_after_sft(out: Path) -> str | None:
    """The SFT policy's episodes: GRPO's first step plays them before any update."""
    episodes = [r for r in records(out / "grpo/train_rollouts.jsonl") if "num_tool_calls" in r]
    if not episodes:
        return None
    first = min(r.get("step", 1) for r in episodes)
    calls = [r["num_tool_calls"] for r in episodes if r.get("step", 1) == first]
    with_call = sum(c > 0 for c in calls)
    return (f"{mean(calls):.2f} per episode ({with_call} of {len(calls)} episodes call a tool; "
            "GRPO step 1, the SFT policy)")


def grpo_reward(out: Path) -> str | None:
    steps = [s for s in records(out / "grpo/train/metrics.jsonl") if "rollout/reward_mean" in s]
    if not steps:
        return None
    first, last = steps[0], steps[-1]
    text = f"{first['rollout/reward_mean']:.3f} at step {first['step']} (before any update)"
    if last is not first:
        text += f" -> {last['rollout/reward_mean']:.3f} at step {last['step']}"
    replay = [r["reward"] for r in records(out / "grpo/rollouts.jsonl") if isinstance(r.get("reward"), int | float)]
    if replay:
        text += f"; the trained policy's replay {mean(replay):.3f} over {plural(len(replay), 'episode')}"
    return text


def benchmark_scores(run: Path) -> str | None:
    """'bfcl 100.0 (20 items), tau2 ...': mean score in percent per benchmark of one eval run directory."""
    by_benchmark: dict[str, list[float]] = {}
    for path in sorted(run.glob("*.jsonl")):
        for r in records(path):
            if isinstance(r.get("score"), int | float):
                by_benchmark.setdefault(r.get("benchmark") or path.stem, []).append(float(r["score"]))
    if not by_benchmark:
        return None
    return ", ".join(f"{name} {100 * mean(scores):.1f} ({plural(len(scores), 'item')})"
                     for name, scores in by_benchmark.items())


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("s" if n != 1 else "")


EVAL_RUNS = (("oracle", "ground-truth replays"), ("oracle_drop", "replays with 30% of BFCL calls left out"),
             ("seed0", "embedded model, seed 0"))


def headline(out: Path) -> list[str]:
    lines = []
    for label, value in (("tool calls after SFT", tool_calls_after_sft(out)), ("GRPO reward (F1)", grpo_reward(out))):
        lines.append(f"  {label + ':':24} {value or 'not run (no 50-grpo outputs)'}")
    scores = [(what, benchmark_scores(out / "eval" / name)) for name, what in EVAL_RUNS]
    scores = [(what, text) for what, text in scores if text]
    if not scores:
        lines.append(f"  {'benchmark scores:':24} not run (no 60-eval outputs)")
    for i, (what, text) in enumerate(scores):
        lines.append(f"  {'benchmark scores:' if i == 0 else '':24} {text}  [{what}]")
    return lines


def summary(out: Path) -> str:
    lines = ["== summary (from the files in " + str(out) + ")"]
    lines += table(step_rows(out), ["step", "in", "out", "rejected", "time"])
    lines.append("")
    lines += headline(out)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = Path(argv[0])
    if not out.is_dir():
        print(f"demo_summary: no such directory {out}", file=sys.stderr)
        return 1
    print(summary(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
