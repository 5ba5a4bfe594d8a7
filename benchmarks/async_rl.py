"""Asynchronous GRPO (issue 55): the same GRPO steps at max_staleness k = 0 (the synchronous loop), 1 and 2.

Two workloads, each from the same short SFT warm start of SmolLM2-135M-Instruct (the embedded default) on
astra-qaenv's programmatic environments (the demo's recipe, as benchmarks/learning.py):

  (a) rl-samples: the RL samples as the demo trains on them (jailed sandbox sessions, F1 reward);
  (b) user-1s:    the same samples made interactive (a `user`): a turn without a tool call goes to a user
                  simulator behind a local OpenAI-compatible endpoint that answers after a fixed 1 s, as a
                  hosted user model does (benchmarks/synthesis_throughput.py's endpoint).

k > 0 runs the transformers engine in a process of its own on one thread, the update on another (torch threads
1 in both): this 2-core machine's split. The synchronous run has the same split in time (rollout, then update,
one thread each). Per run: wall time per step (the mean of every step's wall time, the first included, and of the
steps after the first: step 1 has nothing to overlap with), the speed-up over k = 0, the engine's and the trainer's
idle fractions, the overlap bound computed from the synchronous run's own phase times: (R + U) / max(R, U), R the
rollout and U the update (with the weight push) seconds per step, and the share of it reached after step 1; then
each run's held-out F1 with its 95% t-interval over held-out samples, and its paired change against k = 0. Every
run has a tiny entropy bonus (1e-4) so that every update runs whole (see ENTROPY_COEF).

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/async_rl.py --out out/async_rl | tee benchmarks/results/async_rl.txt
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from learning_recipe import (
    command_line,
    evaluate,
    load_average,
    log,
    open_pool,
    paired_interval,
    prepare,
    sft_once,
    write_jsonl,
)

STALENESS = (0, 1, 2)
USER_LATENCY_S = 1.0
# A batch without reward variance skips the update's forward and backward passes (its gradient is zero), which
# makes U a matter of luck; a tiny entropy bonus keeps every update whole in every run.
ENTROPY_COEF = 1e-4
BUDGET = dict(sft_steps=4, grpo_steps=4, batch=2, group=4, max_turns=2, max_new_tokens=48, max_response_length=384,
              held_out=6, episodes=2, pool_size=8, threads=1, abf_rounds=1, grpo_lr=5e-5)


def interactive(samples: list[dict]) -> list[dict]:
    """The samples with a user: one who answers a turn that called no tool (at most `max_user_turns` times)."""
    return [{**sample, "user": {"instruction": "Ask the assistant your question, then answer its questions.",
                                "private_info": "none"}} for sample in samples]


def train(run: Path, sft_dir: Path, samples: list[dict], recipe, pool, k: int, user_url: str | None) -> list[dict]:
    """One GRPO run at max_staleness k; its per-step metrics."""
    from astra_grpo.config import GRPOConfig, load_config
    from astra_grpo.grpo import train_grpo

    config = load_config(GRPOConfig, None, dict(
        model=str(sft_dir), output_dir=str(run), seed=recipe.seed, batch_size=recipe.batch, group_size=recipe.group,
        mini_batch_size=recipe.batch, micro_batch_size=recipe.micro_batch, max_steps=recipe.grpo_steps,
        learning_rate=recipe.grpo_lr, max_turns=recipe.max_turns, max_new_tokens=recipe.max_new_tokens,
        max_response_length=recipe.max_response_length, abf_max_rounds=recipe.abf_rounds,
        sandbox_pool_size=recipe.pool_size, generation_batch_size=32, report_to=[], save_weights_steps=0,
        save_state_steps=0, max_staleness=k, user_base_url=user_url, user_model="fixed-latency", max_user_turns=2,
        user_max_tokens=16, entropy_coef=ENTROPY_COEF))
    train_grpo(config, [str(write_jsonl(run / "train.jsonl", samples))], pool=pool)
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def interval(per_sample: dict[str, float]) -> tuple[float, float]:
    """(mean, half-width of its 95% t-interval) over samples."""
    from scipy import stats

    values = list(per_sample.values())
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return statistics.fmean(values), half


def report(workload: str, runs: dict[int, list[dict]], held: dict[int, dict]) -> None:
    """Step 1 of every run waits for its first round (nothing to overlap yet): the speed-up is given over all steps
    and over the steps after the first (the steady state the bound describes)."""
    sync = runs[0]
    rollout = statistics.fmean(m["rollout_seconds"] for m in sync)
    update = statistics.fmean(m["step_seconds"] - m["rollout_seconds"] for m in sync)
    bound = (rollout + update) / max(rollout, update)
    print(f"\n{workload}: synchronous phases R = {rollout:.1f} s rollout, U = {update:.1f} s update + push per step; "
          f"overlap bound (R + U) / max(R, U) = {bound:.2f}x")
    print(f"  {'k':>2} {'s/step':>7} {'speed-up':>8} {'s/step 2+':>9} {'speed-up 2+':>11} {'of bound':>8} "
          f"{'engine idle':>11} {'trainer idle':>12}  {'staleness':<18} {'held-out F1 (95% CI)':<21} vs k=0 (paired)")
    for k, steps in runs.items():
        wall, steady = per_step(steps), per_step(steps[1:])
        speedup, steady_speedup = per_step(sync) / wall, per_step(sync[1:]) / steady
        histogram = {}
        for m in steps:
            for key, value in m.items():
                if key.startswith("staleness/") and key.split("/")[1].isdigit():
                    histogram[int(key.split("/")[1])] = histogram.get(int(key.split("/")[1]), 0) + int(value)
        mean, half = interval(held[k]["per_sample_f1"])
        change = paired_interval(held[0], held[k])
        paired = "-" if k == 0 else f"{change['mean']:+.3f} [{change['low']:+.3f}, {change['high']:+.3f}]"
        print(f"  {k:>2} {wall:>7.1f} {speedup:>7.2f}x {steady:>9.1f} {steady_speedup:>10.2f}x "
              f"{steady_speedup / bound:>8.0%} {statistics.fmean(m['engine_idle_fraction'] for m in steps):>11.0%} "
              f"{statistics.fmean(m['trainer_idle_fraction'] for m in steps):>12.0%}  "
              f"{json.dumps(dict(sorted(histogram.items()))):<18} {mean:.3f} ± {half:.3f}{'':<8} {paired}")


def per_step(steps: list[dict]) -> float:
    return statistics.fmean(m["step_seconds"] for m in steps)


def main() -> None:
    recipe, out = command_line(__doc__, **BUDGET)
    started = time.time()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"async_rl: commit {commit}, load average at start {load_average()} (2 cores, shared), torch threads "
          f"{recipe.threads}; {recipe.grpo_steps} GRPO steps of {recipe.batch} prompts x {recipe.group} episodes, "
          f"{recipe.max_turns} turns of <= {recipe.max_new_tokens} tokens; held-out: {recipe.held_out} samples x "
          f"{recipe.episodes} episodes")
    data = prepare(out / "data", recipe)
    sys.path.insert(0, str(Path(__file__).parent))
    from synthesis_throughput import start_endpoint

    server, user_url, requests = start_endpoint(USER_LATENCY_S)
    try:
        with open_pool(recipe) as pool:
            sft_dir = sft_once(out / "sft", data.gold_train, data.held, recipe)
            workloads = {"(a) rl-samples": (data.train, None),
                         f"(b) user-{USER_LATENCY_S:g}s": (interactive(data.train), user_url)}
            results = {}
            for workload, (samples, url) in workloads.items():
                runs, held = {}, {}
                for k in STALENESS:
                    run = out / f"{workload.split()[1]}-k{k}"
                    log(f"{workload}: max_staleness {k} -> {run}")
                    runs[k] = train(run, sft_dir, samples, recipe, pool, k, url)
                    held[k] = evaluate(run / "final", data.held_out, recipe, pool)
                results[workload] = (runs, held)
    finally:
        server.terminate()
    for workload, (runs, held) in results.items():
        report(workload, runs, held)
    print(f"\nuser-simulator requests answered: {requests.value}; load average at end {load_average()}; "
          f"total {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
