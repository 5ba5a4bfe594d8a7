"""Does GRPO learn, clearly and quickly? SmolLM2-135M-Instruct (the embedded default) on astra-qaenv's
programmatic environments, on CPU: held-out F1 of base -> SFT -> SFT+GRPO, the paired change per
held-out sample with its 95% interval, and the GRPO wall time.

SmolLM2 does not call tools zero-shot, so the recipe is the paper's: a short SFT warm start on gold
trajectories (`astra-qaenv export --gold-trajectories`), then online multi-turn GRPO from the SFT
weights. Held-out samples are never trained on; each policy is sampled as in training (temperature
1, several episodes per sample). Every phase is kept on disk: the same command continues a killed
run. Settings, command and commit are written to OUT/config.learning.json.

    nice .venv/bin/python benchmarks/learning.py --out out/learning | tee benchmarks/results/learning.txt
    (writes OUT/learning.png: GRPO training curves and held-out F1 over steps; OUT/results.learning.json)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from learning_recipe import (
    Recipe,
    cached_evaluate,
    command_line,
    grpo_seconds,
    load_average,
    open_pool,
    paired_interval,
    plot_curves,
    prepare,
    run_arm,
    sft_once,
    weights_by_step,
    write_config,
)


def main() -> None:
    recipe, out = command_line(__doc__)
    write_config(out, "learning", {"sft+grpo": recipe})
    started = time.time()
    data = prepare(out / "data", recipe)
    train, held_out, gold_train, held = data.train, data.held_out, data.gold_train, data.held
    print(f"data: {len(train)} training samples ({recipe.mixing} distractors), {len(held_out)} held-out "
          f"({recipe.eval_mixing} distractors), {len(gold_train)} gold trajectories for SFT "
          f"({recipe.sft_mixing} distractors) "
          f"(programmatic KB, max {recipe.max_hops} hops)")

    cache = out / "evaluations.json"
    with open_pool(recipe) as pool:
        sft_dir = sft_once(out / "sft", gold_train, held, recipe)
        results = {"sft": cached_evaluate(sft_dir, held_out, recipe, pool, cache)}
        run, results["sft+grpo"], curve = run_arm(out, sft_dir, results["sft"], train, held_out, recipe, pool, cache)
        by_step = {step: cached_evaluate(weights, held_out, recipe, pool, cache)
                   for step, weights in weights_by_step(run).items()}  # evaluated by run_arm: read from the cache
        results = {"base": cached_evaluate(None, held_out, recipe, pool, cache), **results}

    report(results, recipe, len(held_out), run, started)
    report_steps(results["sft"], by_step, run)
    plot_curves({"SFT+GRPO": run}, {"SFT+GRPO": curve}, out / "learning.png",
                f"GRPO after SFT, SmolLM2-135M on CPU: {recipe.batch} prompts x {recipe.group} episodes per step, "
                f"lr {recipe.grpo_lr:g}")
    (out / "results.learning.json").write_text(json.dumps({**results, "held_out_f1_by_step": curve}, indent=1))


def report_steps(sft: dict, by_step: dict[int, dict], run: Path) -> None:
    """The paired change against SFT at every evaluated GRPO step, with the GRPO wall time up to it."""
    for step, evaluation in sorted(by_step.items()):
        change = paired_interval(sft, evaluation)
        print(f"  after GRPO step {step:>3} ({grpo_seconds(run, step) / 60:5.1f} min of GRPO): held-out F1 "
              f"{evaluation['f1']:.3f}, change {change['mean']:+.3f} [{change['low']:+.3f}, {change['high']:+.3f}]; "
              f"{change['better']} better, {change['worse']} worse")


def report(results: dict, recipe: Recipe, held_out: int, run: Path, started: float) -> None:
    print(f"held-out: {held_out} samples x {recipe.episodes} episodes, temperature 1")
    print(f"{'policy':<10} {'F1':>6} {'recall':>7} {'precision':>9} {'turns':>6} {'calls':>6} "
          f"{'call-rate':>9} {'format-ok':>9} {'wrong-tool':>10}")
    for name, r in results.items():
        print(f"{name:<10} {r['f1']:>6.3f} {r['recall']:>7.3f} {r['precision']:>9.3f} {r['turns']:>6.2f} "
              f"{r['tool_calls']:>6.2f} {r['episodes_with_a_call']:>9.2f} {r['format_validity']:>9.3f} "
              f"{r['wrong_tool_rate']:>10.3f}")
    change = paired_interval(results["sft"], results["sft+grpo"])
    print(f"SFT+GRPO vs SFT, paired over {change['n']} held-out samples: F1 {change['mean']:+.3f}, "
          f"95% interval [{change['low']:+.3f}, {change['high']:+.3f}]; {change['better']} samples better, "
          f"{change['worse']} worse")
    seconds = grpo_seconds(run)
    print(f"GRPO: {recipe.grpo_steps} steps in {seconds / 60:.1f} min of wall time; whole run "
          f"{(time.time() - started) / 60:.1f} min this invocation; load average at the end {load_average()} "
          f"on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    sys.exit(main())
