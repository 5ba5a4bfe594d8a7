"""The reward ablation of the ASTRA paper (section 4.2, Figure 7) at CPU scale: GRPO from the same SFT
checkpoint with the F1 reward, recall only and precision only, the same data, seed and budget.

The paper reports recall-only inflating tool calls and turns, precision-only collapsing them, and F1
staying stable. This script draws tool calls and turns per trajectory over training and held-out F1
over steps for the three, and prints whether each direction reproduces here. Same on-disk layout as
learning.py (shared SFT and evaluations under OUT); the same command continues a killed run.
A finished arm's metrics and held-out evaluation are kept in benchmarks/results/learning_runs/
(committed: OUT does not outlive a machine), so the arms can be run one machine session at a time. They
are combined only when they started from the same SFT checkpoint (its weights' sha256 is checked; SFT
with the same seed and threads on CPU should reproduce it bit for bit).

    nice .venv/bin/python benchmarks/learning_rewards.py --out out/learning | tee benchmarks/results/learning_rewards.txt
    (writes OUT/learning_rewards.png)
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path

from learning_recipe import (
    ABLATION_BUDGET,
    ARCHIVE,
    Recipe,
    archived_evaluate,
    command_line,
    grpo_seconds,
    load_average,
    open_pool,
    paired_interval,
    plot_curves,
    prepare,
    read_metrics,
    run_arm,
    sft_once,
    write_config,
)

VARIANTS = ("f1", "recall", "precision")


def main() -> None:
    base, out = command_line(__doc__, **ABLATION_BUDGET)
    arms = {variant: dataclasses.replace(base, reward=variant) for variant in VARIANTS}
    write_config(out, "learning_rewards", arms)
    data = prepare(out / "data", base)
    train, held_out, gold_train, held = data.train, data.held_out, data.gold_train, data.held
    cache = out / "evaluations.json"
    runs, finals, curves = {}, {}, {}
    with open_pool(base) as pool:
        sft_dir = sft_once(out / "sft", gold_train, held, base)
        sft = archived_evaluate(sft_dir, held_out, base, pool, cache, ARCHIVE)
        for variant, recipe in arms.items():
            runs[variant], finals[variant], curves[variant] = run_arm(
                out, sft_dir, sft, train, held_out, recipe, pool, cache, archive=ARCHIVE)

    report(sft, finals, runs, curves, base, len(held_out))
    plot_curves(runs, curves, out / "learning_rewards.png",
                f"Reward ablation: GRPO from one SFT checkpoint with F1, recall-only, precision-only "
                f"(SmolLM2-135M, CPU, {base.grpo_steps} steps)")
    (out / "results.learning_rewards.json").write_text(json.dumps(
        {"sft": sft, "final": finals, "held_out_f1_by_step": curves,
         "training": {v: trend(runs[v]) for v in VARIANTS}}, indent=1))


def trend(run: Path) -> dict:
    """Tool calls and turns per training rollout: mean of the first and of the last quarter of steps."""
    rows = read_metrics(run)
    quarter = max(1, len(rows) // 4)
    pick = {"calls": "rollout/tool_calls_mean", "turns": "rollout/turns_mean"}
    return {f"{name}_{end}": statistics.fmean(r[metric] for r in part)
            for name, metric in pick.items() for end, part in (("first", rows[:quarter]), ("last", rows[-quarter:]))}


def report(sft: dict, finals: dict, runs: dict, curves: dict, recipe: Recipe, held_out: int) -> None:
    print(f"held-out: {held_out} samples x {recipe.episodes} episodes; every arm {recipe.grpo_steps} GRPO steps of "
          f"{recipe.batch} prompts x {recipe.group} episodes from the same SFT checkpoint, seed {recipe.seed}")
    print(f"{'reward':<10} {'F1':>6} {'95% interval of the change vs SFT':>36} {'calls':>6} {'turns':>6} "
          f"{'train calls first->last':>24} {'train turns first->last':>24} {'GRPO min':>8}")
    print(f"{'(SFT)':<10} {sft['f1']:>6.3f} {'':>36} {sft['tool_calls']:>6.2f} {sft['turns']:>6.2f}")
    trends = {}
    for variant, final in finals.items():
        change, t = paired_interval(sft, final), trend(runs[variant])
        trends[variant] = t
        print(f"{variant:<10} {final['f1']:>6.3f} {change['mean']:>+14.3f} [{change['low']:+.3f}, {change['high']:+.3f}]"
              f"{'':>4} {final['tool_calls']:>6.2f} {final['turns']:>6.2f} "
              f"{t['calls_first']:>11.2f} -> {t['calls_last']:<9.2f} {t['turns_first']:>11.2f} -> {t['turns_last']:<9.2f}"
              f" {grpo_seconds(runs[variant]) / 60:>8.1f}")
    print("held-out F1 by step: " + "; ".join(
        f"{v} " + " ".join(f"{s}:{f:.3f}" for s, f in sorted(curves[v].items())) for v in finals))
    direction = {
        "recall-only inflates tool calls (paper)": trends["recall"]["calls_last"] > trends["f1"]["calls_last"],
        "precision-only cuts tool calls (paper)": trends["precision"]["calls_last"] < trends["f1"]["calls_last"],
        "F1 ends with the best held-out F1": finals["f1"]["f1"] >= max(f["f1"] for f in finals.values()),
    }
    for claim, holds in direction.items():
        print(f"{claim}: {'reproduced' if holds else 'NOT reproduced'} here")
    print(f"load average at the end {load_average()}")


if __name__ == "__main__":
    sys.exit(main())
