"""Run by test_data_parallel.py under `accelerate launch` with 2 CPU processes (gloo).

Each process takes its share of the same synthetic global batches and runs the trainers' update
functions with plain SGD (lr 1, so parameter deltas are the gradients); process 0 saves the
results. Then a short SFT run end to end. The test compares everything with one process and with
the per-token reference.
"""

import os
import sys
from pathlib import Path

import torch
from astra_grpo.config import GRPOConfig, SFTConfig, load_config
from astra_grpo.grpo import _update as grpo_update
from astra_grpo.runtime import make_accelerator, world_size
from astra_grpo.sft import _update as sft_update
from astra_grpo.sft import train_sft
from grpo_support import flat_params, synthetic_groups, tiny_model
from layout_support import Shape, random_groups, run_grpo_update, run_sft_update, sft_examples

VOCAB = 256
GRPO_CASES = {
    # name: (config overrides, lr); 4 groups of 4 (each sharing its prompt) over 2 processes, micro-batches of 2
    # -> 4 accumulation steps, or micro-batches by a token budget (as many on both processes); every layout
    "token": (dict(loss_average="token"), 1.0),
    "sequence": (dict(loss_average="sequence", layout="packed"), 1.0),
    "passes": (dict(loss_average="token", mini_batch_size=2, num_iterations=2, clip_eps_low=0.02,
                    clip_eps_high=0.05, layout="padded"), 1.0),
    "budget": (dict(loss_average="sequence", max_tokens_per_microbatch=30), 1.0),
}
SFT_EXAMPLES = [([5, 9, 17, 3, 44, 7, 12], [0, 0, 1, 1, 0, 1, 1]), ([8, 2, 100, 4], [0, 1, 1, 1]),
                ([4, 6, 8, 10, 12, 14, 16, 18, 20], [0, 0, 0, 1, 1, 1, 0, 0, 1]), ([3, 3, 7, 9, 11], [0, 1, 0, 1, 1])]


def small_model():
    return tiny_model("llama", seed=0, vocab_size=VOCAB, hidden=32)


def groups():
    """The global batch of the GRPO cases."""
    return synthetic_groups(4, 4, VOCAB, seed=5, shared_prompt=True)


def grpo_case(name: str, out: Path) -> None:
    overrides, lr = GRPO_CASES[name]
    values = dict(group_size=4, batch_size=4, mini_batch_size=4, micro_batch_size=2, max_grad_norm=0.0, report_to=[])
    config = load_config(GRPOConfig, None, {**values, **overrides})
    world = world_size()
    accumulation = config.accumulation_steps(world)
    accelerator = make_accelerator(config, accumulation)
    model = small_model()
    prepared, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=lr))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    metrics = grpo_update(config, accelerator, prepared, None, optimizer, scheduler, groups(), 0, world,
                          accelerator.process_index, accumulation)
    if accelerator.is_main_process:
        torch.save({"params": flat_params(accelerator.unwrap_model(prepared)), "metrics": metrics,
                    "accumulation": accumulation, "distributed_type": str(accelerator.distributed_type),
                    "processes": accelerator.num_processes}, out / f"grpo_{name}.pt")
    accelerator.wait_for_everyone()


SFT_CASES = {"token": dict(loss_average="token"), "sequence": dict(loss_average="sequence", layout="padded"),
             "budget": dict(loss_average="token", max_tokens_per_microbatch=8)}


def sft_case(mode: str, out: Path) -> None:
    config = load_config(SFTConfig, None, dict(batch_size=4, micro_batch_size=1, max_grad_norm=0.0, report_to=[],
                                               **SFT_CASES[mode]))
    world = world_size()
    accumulation = config.batch_size // world // config.micro_batch_size
    accelerator = make_accelerator(config, accumulation)
    model = small_model()
    prepared, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    mine = SFT_EXAMPLES[accelerator.process_index::world]
    metrics = sft_update(config, accelerator, prepared, optimizer, mine, 0, world, accumulation)
    if accelerator.is_main_process:
        torch.save({"params": flat_params(accelerator.unwrap_model(prepared)), "metrics": metrics},
                   out / f"sft_{mode}.pt")
    accelerator.wait_for_everyone()


# Random groups (layout_support: shared prompts, shared first replies, copies, random masks) in packed and tree
# layouts, by count and by token budget; the test compares them with the one-process padded update.
LAYOUT_SHAPES = [Shape(2, 4, 9, 3, "generated", 21), Shape(4, 3, 5, 2, "random", 22), Shape(2, 2, 12, 3, "generated", 23)]
LAYOUT_CASES = {"tree-budget": dict(layout="tree", max_tokens_per_microbatch=40, loss_average="token"),
                "packed": dict(layout="packed", loss_average="sequence"),
                "tree-all": dict(layout="tree", tree_scope="all", max_tokens_per_microbatch=25, loss_average="sequence")}


def layout_cases(out: Path) -> None:
    world, rank = world_size(), int(os.environ.get("RANK", "0"))
    for index, shape in enumerate(LAYOUT_SHAPES):
        groups = random_groups(shape)
        examples = sft_examples(groups)[:len(sft_examples(groups)) // world * world]
        for name, overrides in LAYOUT_CASES.items():
            metrics, params = run_grpo_update(groups, overrides, world, rank)
            sft_overrides = {k: v for k, v in overrides.items() if k != "tree_scope"}
            sft_metrics, sft_params = run_sft_update(examples[rank::world], sft_overrides, world, rank)
            if rank == 0:
                torch.save({"params": params, "metrics": metrics, "sft_params": sft_params, "sft_metrics": sft_metrics},
                           out / f"layout_{index}_{name}.pt")


# Objectives over 2 processes: a sequence-level ratio and the high-entropy selection (its threshold gathered from
# both processes); the test compares them with the one-process padded update.
OBJECTIVE_CASES = {"gspo-entropy": dict(layout="tree", importance_sampling_level="sequence", top_entropy_quantile=0.4,
                                        max_tokens_per_microbatch=40),
                   "cispo-fixed": dict(layout="packed", loss_type="cispo", loss_average="fixed",
                                       max_response_length=64)}


def objective_cases(out: Path) -> None:
    world, rank = world_size(), int(os.environ.get("RANK", "0"))
    groups = random_groups(LAYOUT_SHAPES[0])
    for name, overrides in OBJECTIVE_CASES.items():
        metrics, params = run_grpo_update(groups, overrides, world, rank)
        if rank == 0:
            torch.save({"params": params, "metrics": metrics}, out / f"objective_{name}.pt")


def sft_run(model_dir: str, trajectories: str, out: Path) -> None:
    config = load_config(SFTConfig, None, dict(model=model_dir, batch_size=4, micro_batch_size=1, max_steps=2,
                                               learning_rate=1e-3, output_dir=str(out / "sft_run"), report_to=[],
                                               save_weights_steps=0, save_state_steps=0, max_length=512))
    train_sft(config, [trajectories])


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    for case in GRPO_CASES:
        grpo_case(case, out_dir)
    if len(sys.argv) == 2:  # the DeepSpeed run checks the GRPO updates only
        sys.exit(0)
    for averaging in SFT_CASES:
        sft_case(averaging, out_dir)
    layout_cases(out_dir)
    objective_cases(out_dir)
    sft_run(sys.argv[2], sys.argv[3], out_dir)
