"""Multi-turn rollout time of the transformers engine: 16 episodes x 4 turns, three ways.

(a) one episode at a time with plain `model.generate`, re-reading the whole conversation every turn
    (the baseline the issue names);
(b) all live episodes batched, re-reading the whole conversation every turn (`keep_cache=False`);
(c) all live episodes batched, each keeping its KV cache across its turns (the engine's default).

Every turn generates exactly `--max-new-tokens` tokens (no stop token) greedily, then the episode
gets the same tool observation, rendered by the chat template as in training. Prompts are astra-qaenv
RL samples (tool schemas with distractors in the system prompt), G episodes per prompt as in a GRPO
round; SmolLM2-135M-Instruct (the embedded default) on CPU. The generated tokens of (b) and (c) are checked
to be identical to (a)'s (in float32 a left-padded batch row's logits differ from the same sequence alone by
~4e-5, from different matmul shapes; `--dtype float64` rules out a greedy near-tie deciding the comparison).

    .venv/bin/python benchmarks/rollout_turns.py | tee benchmarks/results/rollout_turns.txt
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from rollout_prefill import rl_samples  # noqa: E402 - the same prompts as the first-turn benchmark

OBSERVATION = {"role": "tool", "tool_call_id": "call_0",
               "content": json.dumps({"result": "Oslo", "population": 709000, "note": "as of 2023"})}


def play_batched(engine, prompts, observation_ids, turns, new_tokens, sampling):
    sequences = [list(p) for p in prompts]
    generated = [[] for _ in prompts]
    keys = list(range(len(prompts)))
    for turn in range(turns):
        outputs = engine.generate(sequences, [new_tokens] * len(prompts), sampling, keys=keys)
        for index, output in enumerate(outputs):
            generated[index].append(output.token_ids)
            sequences[index] += output.token_ids + (observation_ids if turn < turns - 1 else [])
    return generated


def play_one_at_a_time(model, prompts, observation_ids, turns, new_tokens, pad_id):
    import torch
    from transformers import GenerationConfig

    # No stop token, as for the engines: the model's own EOS must neither stop nor be suppressed.
    model.generation_config.eos_token_id = None
    config = GenerationConfig(do_sample=False, max_new_tokens=new_tokens, pad_token_id=pad_id, eos_token_id=None)
    generated = []
    for prompt in prompts:
        sequence, turns_out = list(prompt), []
        for turn in range(turns):
            with torch.no_grad():
                # The mask is given: SmolLM2's pad id is its <|im_end|>, which generate would otherwise take for
                # padding inside the conversation once no EOS is set.
                ids = torch.tensor([sequence])
                output = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
            new = output[0, len(sequence):].tolist()
            assert len(new) == new_tokens, "plain generate stopped early"
            turns_out.append(new)
            sequence += new + (observation_ids if turn < turns - 1 else [])
        generated.append(turns_out)
    return generated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4, help="distinct prompts (GRPO batch)")
    parser.add_argument("--group", type=int, default=4, help="episodes per prompt (GRPO group size)")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (more than the free cores makes OpenMP spin: 40x slower decode seen)")
    args = parser.parse_args()

    import torch
    from astra_grpo.chat import ChatRenderer
    from astra_grpo.config import GRPOConfig, load_config
    from astra_grpo.engines import Sampling
    from astra_grpo.engines.transformers import TransformersEngine
    from astra_grpo.runtime import load_policy

    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(load_config(GRPOConfig, None, {}))
    model = model.to(getattr(torch, args.dtype)).eval()
    renderer = ChatRenderer(tokenizer)
    samples = rl_samples(args.prompts)
    prompts = [renderer.prompt_ids(s["messages"], s["tools"]) for s in samples for _ in range(args.group)]
    observation_ids = renderer.observation_ids({"role": "assistant", "content": ""}, [OBSERVATION], samples[0]["tools"],
                                               None)  # after a turn cut at its budget
    greedy = Sampling(greedy=True)
    episodes = len(prompts)
    tokens = episodes * args.turns * args.max_new_tokens
    print(f"{episodes} episodes ({args.prompts} prompts x {args.group}) x {args.turns} turns, "
          f"{args.max_new_tokens} new tokens per turn, observation {len(observation_ids)} tokens, prompt tokens "
          f"mean {statistics.fmean(len(p) for p in prompts):.0f}, greedy, {args.dtype}, {args.threads} threads")

    runs = {}
    started = time.perf_counter()
    runs["(a) one episode at a time, plain generate"] = (
        play_one_at_a_time(model, prompts, observation_ids, args.turns, args.max_new_tokens, tokenizer.pad_token_id),
        time.perf_counter() - started)
    for name, keep in (("(b) batched, re-reading each turn", False), ("(c) batched, KV cache across turns", True)):
        engine = TransformersEngine(model, tokenizer.pad_token_id, [], batch_size=episodes, keep_cache=keep)
        started = time.perf_counter()
        generated = play_batched(engine, prompts, observation_ids, args.turns, args.max_new_tokens, greedy)
        runs[name] = (generated, time.perf_counter() - started)

    baseline_tokens, baseline_seconds = runs["(a) one episode at a time, plain generate"]
    for name, (generated, seconds) in runs.items():
        same = sum(g == b for g, b in zip(generated, baseline_tokens, strict=True))
        print(f"{name:<44} {seconds:8.1f} s  {tokens / seconds:7.1f} new tokens/s  "
              f"{baseline_seconds / seconds:5.2f}x (a)  greedy tokens identical to (a): {same}/{episodes} episodes")
    ours = runs["(c) batched, KV cache across turns"][1]
    print(f"KV cache across turns vs re-reading each turn (both batched): "
          f"{runs['(b) batched, re-reading each turn'][1] / ours:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
