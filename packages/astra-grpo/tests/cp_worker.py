"""Run by test_context_parallel.py under `accelerate launch` with 2 CPU processes (gloo).

    cp_worker.py OUT_DIR [MODEL_DIR TRAJECTORIES]     everything below
    cp_worker.py OUT_DIR --updates-only               the trainer updates only (the DeepSpeed runs)

1. Mechanism, CP=2 (one CP group): logits, per-token log-probs, the loss and every parameter
   gradient of an SFT and a GRPO micro-batch in padded and tree layouts, for tiny Llama / Qwen2 / Qwen3
   models (GQA, padding, kv heads repeated), with and without gradient checkpointing, and through the
   FlashAttention branches (its kernel replaced by an SDPA stand-in: no FlashAttention on CPU). The
   model is not wrapped, so each rank's gradient is its partial sum: they are summed here.
2. The trainers' update functions with plain SGD (lr 1) on the same global batches, once as
   DP=2 x CP=1 and once as DP=1 x CP=2 (gradient accumulation, every layout, micro-batches by count and
   by a token budget, mini-batches, passes with old log-probs computed under CP).
3. A short `train_sft` run with context_parallel_size=2 (the trainer enables the attention itself).

Process 0 saves everything; the tests compare it with one process (CP=1) and per-token references.
"""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from astra_grpo.config import GRPOConfig, SFTConfig, load_config
from astra_grpo.context_parallel.attention import CPAttention, enable
from astra_grpo.context_parallel.grid import current_grid
from astra_grpo.grpo import _update as grpo_update
from astra_grpo.layout_attention import LayoutForward, kernel_of, layout_forward, path_for
from astra_grpo.runtime import data_parallel_size, full_weights, make_accelerator
from astra_grpo.sft import _update as sft_update
from astra_grpo.sft import train_sft
from cp_support import (
    BATCHES,
    FAMILIES,
    GRPO_UPDATES,
    LAYOUTS,
    SFT_EXAMPLES,
    SFT_UPDATES,
    cp_model,
    flash_stand_in,
    flat,
    grpo_groups,
    loss_and_grads,
)

UPDATE_FAMILIES = ("llama", "qwen3")
VARIANTS = [*(f"{family}{suffix}" for family in FAMILIES for suffix in ("", "-ckpt")), "llama-fa2"]


def sharded_logits(model, batch) -> torch.Tensor:
    """Every row position's logits, each rank computing its slice, gathered: [R, W, V]."""
    grid = current_grid()
    part = batch.part(grid.cp_size, grid.cp_rank)
    extra = {"astra_cp": CPAttention(grid.cp_group, grid.cp_size, grid.cp_rank)}
    if part.nodes is not None:
        kernel = kernel_of(model)
        extra["astra_layout"] = LayoutForward(part.nodes, path_for(kernel, "auto"), kernel)
    with torch.no_grad(), layout_forward():
        logits = model(input_ids=part.input_ids, position_ids=part.position_ids, use_cache=False, **extra).logits
    parts = [torch.empty_like(logits) for _ in range(grid.cp_size)]
    dist.all_gather(parts, logits.contiguous(), group=grid.cp_group)
    return torch.cat(parts, dim=1)[:, :batch.input_ids.shape[1]]


def mechanism_model(variant: str):
    """`family`, `family-ckpt` (gradient checkpointing) or `llama-fa2` (the FlashAttention branch, its
    kernel replaced by `flash_stand_in`)."""
    family, _, option = variant.partition("-")
    model = cp_model(family)
    if option == "fa2":
        import transformers.modeling_flash_attention_utils as flash

        flash._flash_attention_forward = flash_stand_in
        model.set_attn_implementation("astra_cp_fa2")
    enable(model, 2)
    if option == "ckpt":
        model.gradient_checkpointing_enable()
    model.train()
    return model


def mechanism(out: Path) -> None:
    make_accelerator(load_config(SFTConfig, None, dict(context_parallel_size=2, report_to=[])), 1)
    results = {}
    for variant in VARIANTS:
        model = mechanism_model(variant)
        results[variant] = {"logits": {name: sharded_logits(model, make()) for name, make in BATCHES.items()}}
        for kind in ("sft", "grpo"):
            for layout in LAYOUTS:
                result = loss_and_grads(model, kind, layout)
                for grad in result["grads"].values():
                    dist.all_reduce(grad, group=current_grid().cp_group)  # partial gradients add up
                results[variant][f"{kind}-{layout}"] = result
    if dist.get_rank() == 0:
        torch.save(results, out / "mechanism.pt")


def save_models(out: Path) -> dict[str, Path]:
    """The update cases' initial models on disk, written before any Accelerator exists: they are loaded
    as the trainers load a policy (`from_pretrained`), which under ZeRO-3 initialises the weights
    partitioned (a model built from a config there would draw different random weights)."""
    saved = {}
    for family in UPDATE_FAMILIES:
        saved[family] = out / "models" / f"{family}-rank{os.environ.get('RANK', '0')}"
        cp_model(family).save_pretrained(saved[family])
    return saved


def load_model(family: str, cp: int):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(MODELS[family], attn_implementation="sdpa")
    if cp > 1:
        enable(model, cp)
    return model


def prepare(accelerator, family: str, cp: int):
    """(model, SGD optimizer with lr 1) as the trainers prepare them."""
    model = load_model(family, cp)
    return accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))


def save_update(accelerator, prepared, metrics: dict, accumulation: int, path: Path) -> None:
    with full_weights(accelerator, prepared):  # ZeRO-3: every process gathers the sharded weights
        params = flat(accelerator.unwrap_model(prepared))
    if accelerator.is_main_process:
        grid = current_grid()
        torch.save({"params": params, "metrics": metrics, "accumulation": accumulation,
                    "grid": (grid.dp_size, grid.cp_size), "distributed_type": str(accelerator.distributed_type)}, path)
    accelerator.wait_for_everyone()


def grpo_updates(cp: int, family: str, out: Path, tag: str) -> None:
    for case, overrides in GRPO_UPDATES.items():
        values = dict(group_size=4, batch_size=4, mini_batch_size=4, micro_batch_size=2, max_grad_norm=0.0,
                      report_to=[], context_parallel_size=cp)
        config = load_config(GRPOConfig, None, {**values, **overrides})
        accumulation = config.accumulation_steps(data_parallel_size(config))
        accelerator = make_accelerator(config, accumulation)
        grid = current_grid()
        prepared, optimizer = prepare(accelerator, family, cp)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        metrics = grpo_update(config, accelerator, prepared, None, optimizer, scheduler, grpo_groups(), 0,
                              grid.dp_size, grid.dp_rank, accumulation)
        save_update(accelerator, prepared, metrics, accumulation, out / f"grpo_{family}_{case}_{tag}.pt")


def sft_updates(cp: int, family: str, out: Path, tag: str) -> None:
    for case, overrides in SFT_UPDATES.items():
        config = load_config(SFTConfig, None, dict(batch_size=4, max_grad_norm=0.0, report_to=[],
                                                   context_parallel_size=cp, **overrides))
        groups = data_parallel_size(config)
        accumulation = config.batch_size // groups // config.micro_batch_size
        accelerator = make_accelerator(config, accumulation)
        grid = current_grid()
        prepared, optimizer = prepare(accelerator, family, cp)
        mine = SFT_EXAMPLES[grid.dp_rank::grid.dp_size]
        metrics = sft_update(config, accelerator, prepared, optimizer, mine, 0, accelerator.num_processes,
                             accumulation)
        save_update(accelerator, prepared, metrics, accumulation, out / f"sft_{family}_{case}_{tag}.pt")


def sft_run(model_dir: str, trajectories: str, out: Path) -> None:
    config = load_config(SFTConfig, None, dict(model=model_dir, batch_size=4, micro_batch_size=2, max_steps=2,
                                               learning_rate=1e-3, output_dir=str(out / "sft_run"), report_to=[],
                                               save_weights_steps=0, save_state_steps=0, max_length=512,
                                               context_parallel_size=2))
    train_sft(config, [trajectories])


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    updates_only = sys.argv[2:] == ["--updates-only"]
    MODELS = save_models(out_dir)
    if not updates_only:
        mechanism(out_dir)
    for family in UPDATE_FAMILIES:
        for cp, tag in ((2, "cp2"), (1, "dp2")):
            if updates_only and cp == 1:
                continue
            grpo_updates(cp, family, out_dir, tag)
            sft_updates(cp, family, out_dir, tag)
    if not updates_only:
        sft_run(sys.argv[2], sys.argv[3], out_dir)
