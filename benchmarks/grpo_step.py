"""Policy-update throughput of astra-grpo's GRPO step against TRL's GRPOTrainer, same run.

Both update the same model (SmolLM2-135M-Instruct, the embedded default, fp32 on CPU) on the same
token sequences: B sequences of a P-token prompt and a completion of varying length (the loss on
completion tokens), advantages from groups of G, token-level loss averaging (TRL's `dapo` loss, the
paper's Eq. 32), no KL, AdamW, micro-batches of M with gradient accumulation, one optimizer step.
Generation is left out on purpose: this measures the policy update (forward, backward, optimizer).
TRL's update is its own `compute_loss` + `accelerator.backward` + optimizer step, called exactly as
its `training_step` does once completions are generated.

    .venv/bin/python benchmarks/grpo_step.py              # writes nothing; prints the table
    .venv/bin/python benchmarks/grpo_step.py --steps 3 | tee benchmarks/results/grpo_step.txt
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)


def make_batch(batch: int, group: int, prompt: int, completion: int, vocab: int, seed: int):
    rng = random.Random(seed)
    prompts = [[rng.randrange(100, vocab) for _ in range(prompt)] for _ in range(batch // group)]
    sequences = []
    for index in range(batch):
        length = rng.randint(completion // 4, completion)
        sequences.append((prompts[index // group], [rng.randrange(100, vocab) for _ in range(length)]))
    rewards = [rng.random() for _ in range(batch)]
    return sequences, rewards


def ours(model, sequences, rewards, args) -> float:
    from astra_grpo.config import GRPOConfig, load_config
    from astra_grpo.grpo import _update
    from astra_grpo.rollout import Episode, Group
    from astra_grpo.runtime import make_accelerator

    config = load_config(GRPOConfig, None, dict(
        batch_size=args.batch // args.group, mini_batch_size=args.batch // args.group, group_size=args.group,
        micro_batch_size=args.micro, learning_rate=1e-6, report_to=[], max_grad_norm=1.0))
    accumulation = config.accumulation_steps(1)
    accelerator = make_accelerator(config, accumulation)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    groups = []
    for g in range(args.batch // args.group):
        episodes = []
        for k in range(args.group):
            prompt, completion = sequences[g * args.group + k]
            episodes.append(Episode(sample={"id": f"s{g}"}, member=k, messages=[], token_ids=prompt + completion,
                                    loss_mask=[0] * len(prompt) + [1] * len(completion), prompt_length=len(prompt),
                                    reward=rewards[g * args.group + k]))
        groups.append(Group(uid=f"s{g}", sample_id=f"s{g}", episodes=episodes))
    started = time.perf_counter()
    _update(config, accelerator, model, None, optimizer, scheduler, groups, 0, 1, 0, accumulation)
    return time.perf_counter() - started


def trl(model, tokenizer, sequences, rewards, args) -> float:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(output_dir="/tmp/trl-grpo-bench", per_device_train_batch_size=args.micro,
                        gradient_accumulation_steps=args.batch // args.micro, num_generations=args.group,
                        max_completion_length=args.completion, loss_type="dapo", beta=0.0, learning_rate=1e-6,
                        max_grad_norm=1.0, report_to=[], use_cpu=True, logging_steps=1, bf16=False)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=config,
                          train_dataset=Dataset.from_list([{"prompt": "hi"}] * args.batch),
                          processing_class=tokenizer)
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = args.batch // args.micro  # what Trainer's loop sets
    model = trainer.model
    model.train()
    advantages = torch.tensor(rewards).view(-1, args.group)
    advantages = ((advantages - advantages.mean(1, keepdim=True)) / (advantages.std(1, keepdim=True) + 1e-4)).view(-1)
    pad = tokenizer.pad_token_id
    total_completion = sum(len(c) for _, c in sequences)
    started = time.perf_counter()
    for start in range(0, args.batch, args.micro):
        chunk = sequences[start:start + args.micro]
        width = max(len(c) for _, c in chunk)
        inputs = {
            "prompt_ids": torch.tensor([p for p, _ in chunk]),
            "prompt_mask": torch.ones(len(chunk), len(chunk[0][0]), dtype=torch.long),
            "completion_ids": torch.tensor([c + [pad] * (width - len(c)) for _, c in chunk]),
            "completion_mask": torch.tensor([[1] * len(c) + [0] * (width - len(c)) for _, c in chunk]),
            "advantages": advantages[start:start + args.micro],
            "num_items_in_batch": torch.tensor(float(total_completion)),
        }
        loss = trainer.compute_loss(model, inputs)
        trainer.accelerator.backward(loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    trainer.optimizer.step()
    trainer.optimizer.zero_grad()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8, help="sequences per update (B)")
    parser.add_argument("--group", type=int, default=4, help="rollouts per prompt (G)")
    parser.add_argument("--micro", type=int, default=4, help="sequences per forward/backward (M)")
    parser.add_argument("--prompt", type=int, default=96, help="prompt tokens (P)")
    parser.add_argument("--completion", type=int, default=160, help="longest completion (lengths vary from C/4 to C)")
    parser.add_argument("--steps", type=int, default=3, help="timed updates per implementation (after one warm-up)")
    args = parser.parse_args()

    from astra_core.local.model import load_model
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    base, tokenizer = load_model()
    base.train()
    sequences, rewards = make_batch(args.batch, args.group, args.prompt, args.completion, len(tokenizer), seed=0)
    tokens = sum(len(p) + len(c) for p, c in sequences)
    print(f"model SmolLM2-135M-Instruct fp32 CPU, 1 thread | B={args.batch} sequences (G={args.group}), "
          f"micro-batch {args.micro}, prompt {args.prompt}, completions {args.completion // 4}..{args.completion} "
          f"tokens | {tokens} real tokens per update | torch {torch.__version__}")
    import trl as trl_package

    timings: dict[str, list[float]] = {"astra-grpo": [], f"trl {trl_package.__version__} GRPOTrainer": []}
    runners = list(timings)
    for step in range(args.steps + 1):  # step 0 warms up; the two alternate so drift hits both
        for name in (runners if step % 2 == 0 else runners[::-1]):
            model = copy.deepcopy(base)
            seconds = (ours(model, sequences, rewards, args) if name == "astra-grpo"
                       else trl(model, tokenizer, sequences, rewards, args))
            if step:
                timings[name].append(seconds)
            print(f"  {'warm-up' if not step else f'step {step}'} {name}: {seconds:.2f} s", file=sys.stderr)
    print(f"{'implementation':<28} {'median s/update':>16} {'tokens/s':>10}")
    rates = {}
    for name, values in timings.items():
        median = statistics.median(values)
        rates[name] = tokens / median
        print(f"{name:<28} {median:>16.2f} {rates[name]:>10.1f}")
    ours_rate, trl_rate = rates[runners[0]], rates[runners[1]]
    print(f"ratio astra-grpo / TRL: {ours_rate / trl_rate:.2f}x policy-update tokens/s")


if __name__ == "__main__":
    main()
