"""First-turn rollout time of a GRPO round, with and without reading each group's prompt once.

A GRPO round starts G episodes from every prompt. The transformers engine now reads a prompt that
repeats within a generation batch once and copies its KV cache to the G rows (baseline: the same
engine with `share_prompts=False`, which is plain `model.generate` over all B x G rows). Both
generate exactly the same number of tokens (no stop token, fixed budget) from the same prompts:
astra-qaenv RL samples (tool schemas with distractors in the system prompt, as in training),
SmolLM2-135M-Instruct (the embedded default), fp32 on CPU.

    .venv/bin/python benchmarks/rollout_prefill.py | tee benchmarks/results/rollout_prefill.txt
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rl_samples(count: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["bash", "-c", "set -euo pipefail; astra-qaenv sample-data entities > starts.jsonl && "
                        "astra-qaenv programmatic starts.jsonl --max-hops 2 -o qa.jsonl && "
                        "astra-qaenv validate --no-judge qa.jsonl -o valid.jsonl && "
                        "astra-qaenv build-env valid.jsonl -o env.jsonl && "
                        "astra-qaenv export env.jsonl --mixing random -o rl.jsonl"],
                       cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return [json.loads(line) for line in Path(tmp, "rl.jsonl").read_text().splitlines()][:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4, help="distinct prompts per round (GRPO batch)")
    parser.add_argument("--group", type=int, default=4, help="episodes per prompt (GRPO group size)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch
    from astra_grpo.chat import ChatRenderer
    from astra_grpo.config import GRPOConfig, load_config
    from astra_grpo.engines import Sampling
    from astra_grpo.engines.transformers import TransformersEngine
    from astra_grpo.runtime import load_policy

    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(load_config(GRPOConfig, None, {}))
    renderer = ChatRenderer(tokenizer)
    prompts = [renderer.prompt_ids(s["messages"], s["tools"])
               for s in rl_samples(args.prompts)]
    batch = [p for p in prompts for _ in range(args.group)]
    budgets = [args.max_new_tokens] * len(batch)
    print(f"{args.prompts} prompts x {args.group} episodes, prompt tokens mean "
          f"{statistics.fmean(len(p) for p in prompts):.0f}, {args.max_new_tokens} new tokens each, "
          f"{args.threads} threads, best of {args.repeats}")

    seconds = {}
    for name, share in (("plain generate (baseline)", False), ("shared prompt prefill", True)):
        engine = TransformersEngine(model, tokenizer.pad_token_id, [], batch_size=len(batch), share_prompts=share)
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            out = engine.generate(batch, budgets, Sampling(1.0))
            times.append(time.perf_counter() - started)
            assert all(len(g.token_ids) == args.max_new_tokens for g in out)
        seconds[name] = min(times)
        print(f"{name:<28} {seconds[name]:7.2f} s   {len(batch) * args.max_new_tokens / seconds[name]:7.1f} new tokens/s")
    ratio = seconds["plain generate (baseline)"] / seconds["shared prompt prefill"]
    print(f"first-turn speed-up from reading each prompt once: {ratio:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
