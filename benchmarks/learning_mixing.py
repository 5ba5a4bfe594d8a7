"""The irrelevant-tool mixing ablation of the ASTRA paper (sections 2.2 and 4.1, Figure 6) at CPU scale:
GRPO from one SFT checkpoint on RL samples with no distractor tools, random distractors from other
domains, and similarity-banded distractors (the paper's mixing); every arm is evaluated on the same
held-out samples with banded distractors (near-miss tools). Reported per arm: held-out F1 and the
wrong-tool call rate (well-formed calls that went to a mixed-in irrelevant tool).

Same on-disk layout as learning.py (shared SFT and evaluations under OUT); the same command continues
a killed run. A finished arm's metrics and held-out evaluation are kept in benchmarks/results/learning_runs/
(committed: OUT does not outlive a machine), so the arms can be run one machine session at a time. They
are combined only when they started from the same SFT checkpoint (its weights' sha256 is checked; SFT
with the same seed and threads on CPU should reproduce it bit for bit).

    nice .venv/bin/python benchmarks/learning_mixing.py --out out/learning | tee benchmarks/results/learning_mixing.txt
    (writes OUT/learning_mixing.png)
"""

from __future__ import annotations

import dataclasses
import json
import sys

from learning_recipe import (
    ABLATION_BUDGET,
    ARCHIVE,
    archived_evaluate,
    command_line,
    grpo_seconds,
    load_average,
    open_pool,
    paired_interval,
    plot_curves,
    prepare,
    run_arm,
    sft_once,
    write_config,
)

MIXINGS = ("none", "random", "bands")


def main() -> None:
    base, out = command_line(__doc__, eval_mixing="bands", **ABLATION_BUDGET)
    arms = {mixing: dataclasses.replace(base, mixing=mixing) for mixing in MIXINGS}
    write_config(out, "learning_mixing", arms)
    # SFT is the one of learning.py (gold trajectories of the training samples, its mixing); each arm
    # trains on the same samples with its own distractors, every arm is evaluated on banded held-out samples.
    data = prepare(out / "data", base)
    held_out, gold_train, held = data.held_out, data.gold_train, data.held
    cache = out / "evaluations.json"
    runs, finals, curves = {}, {}, {}
    with open_pool(base) as pool:
        sft_dir = sft_once(out / "sft", gold_train, held, base)
        sft = archived_evaluate(sft_dir, held_out, base, pool, cache, ARCHIVE)
        for mixing, recipe in arms.items():
            train = prepare(out / "data", recipe).train
            runs[mixing], finals[mixing], curves[mixing] = run_arm(
                out, sft_dir, sft, train, held_out, recipe, pool, cache, archive=ARCHIVE)

    print(f"held-out: {len(held_out)} samples with {base.eval_mixing} distractors x {base.episodes} episodes; every "
          f"arm {base.grpo_steps} GRPO steps of {base.batch} prompts x {base.group} episodes from one SFT checkpoint")
    print(f"{'training mix':<13} {'F1':>6} {'95% interval of the change vs SFT':>36} {'wrong-tool':>10} "
          f"{'calls':>6} {'GRPO min':>8}")
    print(f"{'(SFT)':<13} {sft['f1']:>6.3f} {'':>36} {sft['wrong_tool_rate']:>10.3f} {sft['tool_calls']:>6.2f}")
    for mixing, final in finals.items():
        change = paired_interval(sft, final)
        print(f"{mixing:<13} {final['f1']:>6.3f} {change['mean']:>+14.3f} [{change['low']:+.3f}, {change['high']:+.3f}]"
              f"{'':>4} {final['wrong_tool_rate']:>10.3f} {final['tool_calls']:>6.2f} "
              f"{grpo_seconds(runs[mixing]) / 60:>8.1f}")
    best = max(finals, key=lambda m: finals[m]["f1"])
    print(f"paper: bands > random > none on held-out F1; here the best arm is {best}: "
          + " > ".join(sorted(finals, key=lambda m: -finals[m]["f1"])))
    print(f"load average at the end {load_average()}")
    plot_curves(runs, curves, out / "learning_mixing.png",
                "Irrelevant-tool mixing ablation: GRPO on samples with no / random / banded distractors "
                f"(held-out: {base.eval_mixing})")
    (out / "results.learning_mixing.json").write_text(json.dumps(
        {"sft": sft, "final": finals, "held_out_f1_by_step": curves}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
