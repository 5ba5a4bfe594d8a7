"""Does GRPO learn? SmolLM2-135M-Instruct (the embedded default) on astra-qaenv's programmatic
environments, on CPU: held-out F1 reward, turns and tool-call format validity before and after.

SmolLM2 does not call tools zero-shot, so the recipe is the paper's: a short SFT warm start on gold
trajectories (`astra-qaenv export --gold-trajectories`), then online multi-turn GRPO from the SFT
weights. Both stages are reported: base -> SFT -> SFT+GRPO on held-out samples (never trained on),
each policy sampled as in training (temperature 1, several episodes per sample).

    .venv/bin/python benchmarks/learning.py --out out/learning | tee benchmarks/results/learning.txt
    (writes OUT/learning.png: GRPO training curves and the held-out comparison)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def sh(command: str, cwd: Path) -> None:
    # The astra-* console scripts sit next to this interpreter; the venv need not be activated.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(["bash", "-c", f"set -euo pipefail; {command}"], cwd=cwd, check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_data(out: Path, args) -> tuple[list[dict], list[dict], list[dict]]:
    """(train samples, held-out samples, gold trajectories of the train samples) from the bundled KB."""
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "rl_samples.jsonl").exists():
        sh(f"astra-qaenv sample-data entities > starts.jsonl && "
           f"astra-qaenv programmatic starts.jsonl --max-hops {args.max_hops} -o qa.jsonl && "
           "astra-qaenv validate --no-judge qa.jsonl -o valid.jsonl && "
           "astra-qaenv build-env valid.jsonl -o env.jsonl && "
           f"astra-qaenv export env.jsonl --mixing {args.mixing} -o rl_samples.jsonl "
           "--gold-trajectories gold.jsonl", out)
    samples = [json.loads(line) for line in (out / "rl_samples.jsonl").read_text().splitlines()]
    gold = [json.loads(line) for line in (out / "gold.jsonl").read_text().splitlines()]
    held_out = samples[::args.held_out_every][:args.held_out]
    held_ids = {s["id"] for s in held_out}
    train = [s for s in samples if s["id"] not in held_ids]
    sample_of = {s["id"]: s for s in samples}

    def source(trajectory: dict) -> str | None:
        for key in (trajectory.get("task_id"), trajectory.get("meta", {}).get("parent_id")):
            if key in sample_of:
                return key
        return None

    gold_train = [t for t in gold if source(t) not in held_ids and source(t) is not None]
    return train, held_out, gold_train


def evaluate(model_dir: str | None, samples: list[dict], args, pool) -> dict:
    """Held-out F1 (mean over `episodes` samples per prompt at temperature 1), turns, format validity."""
    import torch
    from astra_grpo.chat import ChatRenderer
    from astra_grpo.config import GRPOConfig, load_config
    from astra_grpo.engines import Sampling
    from astra_grpo.engines.transformers import TransformersEngine
    from astra_grpo.rollout import EpisodeRunner, RolloutSettings
    from astra_grpo.runtime import load_policy

    torch.manual_seed(1234)
    config = load_config(GRPOConfig, None, {"model": model_dir})
    model, tokenizer = load_policy(config)
    renderer = ChatRenderer(tokenizer)
    engine = TransformersEngine(model, tokenizer.pad_token_id, renderer.stop_ids, batch_size=32)
    settings = RolloutSettings(max_turns=args.max_turns, max_response_length=args.max_response_length,
                               max_new_tokens=args.max_new_tokens, sampling=Sampling(1.0),
                               max_live_episodes=args.pool_size)
    runner = EpisodeRunner(engine, renderer, pool, settings)
    groups = runner.play(samples, args.episodes)
    episodes = [e for g in groups for e in g.episodes]
    calls = sum(e.tool_calls for e in episodes)
    malformed = sum(e.malformed_calls for e in episodes)
    return {"f1": statistics.fmean(e.reward for e in episodes),
            "per_sample_f1": {g.sample_id: statistics.fmean(e.reward for e in g.episodes) for g in groups},
            "recall": statistics.fmean(e.reward_components.get("recall", 0.0) for e in episodes),
            "precision": statistics.fmean(e.reward_components.get("precision", 0.0) for e in episodes),
            "turns": statistics.fmean(e.turns for e in episodes),
            "tool_calls": calls / len(episodes),
            "format_validity": (calls - malformed) / calls if calls else float("nan"),
            "episodes_with_a_call": sum(e.tool_calls > 0 for e in episodes) / len(episodes)}


def cached_evaluate(model_dir: str | None, samples: list[dict], args, pool, cache_file: Path) -> dict:
    """`evaluate`, reusing an earlier result for the same weights, held-out samples and budgets
    (a rerun with another GRPO learning rate need not evaluate base and SFT again)."""
    weights = Path(model_dir) / "model.safetensors" if model_dir else None
    key = json.dumps({"model": model_dir, "weights_mtime": weights.stat().st_mtime if weights else None,
                      "held_out": [s["id"] for s in samples], "episodes": args.episodes,
                      "max_turns": args.max_turns, "max_new_tokens": args.max_new_tokens,
                      "max_response_length": args.max_response_length}, sort_keys=True)
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    if "per_sample_f1" not in cache.get(key, {}):  # older entries lack it: the paired comparison needs it
        cache[key] = evaluate(model_dir, samples, args, pool)
        cache_file.write_text(json.dumps(cache, indent=1))
    else:
        print(f"evaluation of {model_dir or 'base model'}: reused from {cache_file}", file=sys.stderr)
    return cache[key]


def paired_difference(before: dict, after: dict) -> tuple[float, float, int, int]:
    """Mean per-sample F1 change after - before over the held-out samples, its standard error,
    and how many samples improved / got worse (each sample's F1 is its mean over episodes)."""
    diffs = [after["per_sample_f1"][sid] - before["per_sample_f1"][sid] for sid in before["per_sample_f1"]]
    stderr = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    return statistics.fmean(diffs), stderr, sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)


def check_same_held_out(sft_out: Path, held_out: list[dict]) -> None:
    """A reused SFT checkpoint must not have trained on this run's held-out samples."""
    recorded = sft_out / "held_out_ids.json"
    if not recorded.exists() or json.loads(recorded.read_text()) != [s["id"] for s in held_out]:
        sys.exit(f"--reuse-sft: {sft_out} was trained with a different held-out split "
                 "(or records none); train SFT again without --reuse-sft")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="out/learning")
    parser.add_argument("--max-hops", type=int, default=2)
    parser.add_argument("--mixing", default="random", help="distractor tools: none | random | bands")
    parser.add_argument("--held-out", type=int, default=16)
    parser.add_argument("--held-out-every", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=2, help="episodes per held-out sample")
    parser.add_argument("--sft-steps", type=int, default=12)
    parser.add_argument("--sft-lr", type=float, default=5e-5)
    parser.add_argument("--grpo-steps", type=int, default=16)
    parser.add_argument("--grpo-lr", type=float, default=2e-6)
    parser.add_argument("--batch", type=int, default=4, help="GRPO prompts per step")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--mini-batch", type=int, default=None,
                        help="GRPO prompts per optimizer update (default: --batch, one update per step)")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=144,
                        help="per-turn budget; must fit a turn of 3 parallel calls (longest gold turn: 134 "
                             "SmolLM2 tokens), or correct turns are cut into malformed calls")
    parser.add_argument("--max-response-length", type=int, default=512)
    parser.add_argument("--pool-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reuse-sft", action="store_true",
                        help="Start from OUT/sft/final of an earlier run instead of training SFT again.")
    args = parser.parse_args()

    import torch
    from astra_grpo.config import GRPOConfig, SFTConfig, load_config
    from astra_grpo.environments import open_sandbox_pool
    from astra_grpo.grpo import train_grpo
    from astra_grpo.plot import plot_runs
    from astra_grpo.sft import train_sft
    from transformers.utils import logging

    torch.set_num_threads(args.threads)
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    out = Path(args.out)
    started = time.time()
    train, held_out, gold = make_data(out / "data", args)
    (out / "train.jsonl").write_text("".join(json.dumps(s) + "\n" for s in train))
    (out / "gold_train.jsonl").write_text("".join(json.dumps(t) + "\n" for t in gold))
    print(f"data: {len(train)} training samples, {len(held_out)} held-out, {len(gold)} gold trajectories "
          f"(programmatic KB, max {args.max_hops} hops, {args.mixing} distractors)")

    results = {}
    with open_sandbox_pool(args.pool_size, call_timeout_s=5.0) as pool:
        results["base"] = cached_evaluate(None, held_out, args, pool, out / "evaluations.json")
        sft = load_config(SFTConfig, None, dict(
            output_dir=str(out / "sft"), batch_size=4, micro_batch_size=1, max_steps=args.sft_steps,
            learning_rate=args.sft_lr, max_length=1536, warmup_ratio=0.1, report_to=[], save_weights_steps=0,
            save_state_steps=0))
        sft_dir = out / "sft" / "final"
        if args.reuse_sft and sft_dir.is_dir():
            check_same_held_out(out / "sft", held_out)
        else:
            sft_dir = train_sft(sft, [str(out / "gold_train.jsonl")])
            (out / "sft" / "held_out_ids.json").write_text(json.dumps([s["id"] for s in held_out]))
        results["sft"] = cached_evaluate(str(sft_dir), held_out, args, pool, out / "evaluations.json")
        grpo = load_config(GRPOConfig, None, dict(
            model=str(sft_dir), output_dir=str(out / "grpo"), batch_size=args.batch, group_size=args.group,
            mini_batch_size=args.mini_batch or args.batch, micro_batch_size=4, max_steps=args.grpo_steps, learning_rate=args.grpo_lr,
            max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
            max_response_length=args.max_response_length, abf_max_rounds=3, sandbox_pool_size=args.pool_size,
            generation_batch_size=32, report_to=[], save_weights_steps=0, save_state_steps=0,
            rollouts_out=str(out / "grpo_rollouts.jsonl")))
        grpo_dir = train_grpo(grpo, [str(out / "train.jsonl")], pool=pool)
        results["sft+grpo"] = cached_evaluate(str(grpo_dir), held_out, args, pool, out / "evaluations.json")

    print(f"held-out: {len(held_out)} samples x {args.episodes} episodes, temperature 1")
    print(f"{'policy':<10} {'F1':>6} {'recall':>7} {'precision':>9} {'turns':>6} {'calls':>6} "
          f"{'call-rate':>9} {'format-ok':>9}")
    for name, r in results.items():
        print(f"{name:<10} {r['f1']:>6.3f} {r['recall']:>7.3f} {r['precision']:>9.3f} {r['turns']:>6.2f} "
              f"{r['tool_calls']:>6.2f} {r['episodes_with_a_call']:>9.2f} {r['format_validity']:>9.3f}")
    steps = [json.loads(line) for line in (out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    first, last = steps[: max(1, len(steps) // 4)], steps[-max(1, len(steps) // 4):]
    print(f"GRPO training reward (all rollouts): first quarter {statistics.fmean(s['rollout/reward_mean'] for s in first):.3f}"
          f" -> last quarter {statistics.fmean(s['rollout/reward_mean'] for s in last):.3f} over {len(steps)} steps")
    rose = results["sft+grpo"]["f1"] > results["sft"]["f1"]
    print(f"held-out F1 after GRPO vs after SFT: {results['sft']['f1']:.3f} -> {results['sft+grpo']['f1']:.3f} "
          f"({'rose' if rose else 'did NOT rise'}); base model {results['base']['f1']:.3f}")
    change, stderr, better, worse = paired_difference(results["sft"], results["sft+grpo"])
    print(f"paired over the {len(held_out)} held-out samples: F1 change {change:+.3f} +- {stderr:.3f} (standard "
          f"error); {better} samples better, {worse} worse, {len(held_out) - better - worse} unchanged")
    print(f"total time {time.time() - started:.0f} s on CPU ({args.threads} threads)")
    plot_runs([str(out / "grpo")], str(out / "learning.png"), window=3,
              metrics=["rollout/reward_mean", "rollout/turns_mean", "rollout/tool_calls_mean",
                       "rollout/format_validity", "valid_fraction", "loss"],
              title="GRPO on programmatic environments (SmolLM2-135M after SFT, CPU)")
    (out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    sys.exit(main())
