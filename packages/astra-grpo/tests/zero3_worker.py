"""Launched by test_deepspeed.py on 2 CPU processes under DeepSpeed ZeRO-3 (gloo):
1. the transformers engine generating inside `runtime.full_weights` with a different number of forwards on
   each process (as rollouts of different lengths make), then a collective: DeepSpeed's parameter hooks must
   be off while generating, else forwards fetch released parameters (collectives of their own) and the
   processes fall out of step (gloo aborts: "Is there a distributed collective mismatch in your code?");
2. the GRPO update with a KL penalty against the reference model `runtime.sharded_reference` makes (sharded
   like the policy), two mini-batches so the policy has moved from the reference when the second is trained on;
3. the trained weights saved as the trainers save them (`checkpoint.save_weights`), with a launch config that
   does not ask for 16-bit gathering on save (cpu_2proc_zero3.yaml).
Process 0 saves what the test checks.
    accelerate launch --config_file cpu_2proc_zero3.yaml zero3_worker.py OUT_DIR generation|kl"""

import sys
from pathlib import Path

import torch
from accelerate import PartialState
from astra_grpo.checkpoint import save_weights
from astra_grpo.config import GRPOConfig, load_config
from astra_grpo.engines import Sampling
from astra_grpo.engines.transformers import TransformersEngine
from astra_grpo.grpo import _update as grpo_update
from astra_grpo.runtime import (
    full_weights,
    global_sums,
    load_model,
    make_accelerator,
    sharded_reference,
    world_size,
)
from dp_worker import groups, small_model
from grpo_support import flat_params, load_tokenizer

# 4 groups of 4 in 2 mini-batches over 2 processes, micro-batches of 2: 2 accumulation steps per update
KL_CASE = dict(group_size=4, batch_size=4, mini_batch_size=2, micro_batch_size=2, loss_average="token",
               kl_coef=0.5, clip_eps_low=0.02, clip_eps_high=0.05, max_grad_norm=0.0, report_to=[])


def uneven_generation(out: Path) -> None:
    """The transformers engine generating 2 and 9 tokens on the two processes with the embedded SmolLM2 (the
    tiny test models do not show the fault: they fall out of step only with a real model's sizes) within full_weights,
    one forward per token (unlike `generate`, its loop does not keep the processes in step); then a global sum."""
    config = load_config(GRPOConfig, None, {"group_size": 2, "batch_size": 2, "mini_batch_size": 2,
                                            "micro_batch_size": 2, "report_to": []})
    model = load_model(config)
    accelerator = make_accelerator(config, 1)
    prepared, _ = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    policy = accelerator.unwrap_model(prepared)
    engine = TransformersEngine(policy, pad_id=0, stop_ids=[])
    budget = 2 + 7 * accelerator.process_index
    with full_weights(accelerator, prepared):
        [generation] = engine.generate([[5, 9, 17, 3]], [budget], Sampling(greedy=True))
    tokens = global_sums(accelerator, {"tokens": len(generation.token_ids)})["tokens"]
    if accelerator.is_main_process:
        torch.save({"tokens": tokens, "partitioned_after": all(p.data.numel() == 0 for p in policy.parameters()),
                    "processes": accelerator.num_processes, "distributed_type": str(accelerator.distributed_type)},
                   out / "generation.pt")
    accelerator.wait_for_everyone()


def kl_update(accelerator, prepared, optimizer, config: GRPOConfig, accumulation: int) -> dict:
    import deepspeed

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    reference = sharded_reference(config, accelerator)
    held = {"materialized": sum(p.data.numel() for p in reference.module.parameters()),  # 0: nothing gathered
            "shard": sum(p.ds_tensor.numel() for p in reference.module.parameters()),  # this process's part
            "whole": sum(p.ds_numel for p in reference.module.parameters())}
    metrics = grpo_update(config, accelerator, prepared, reference, optimizer, scheduler,
                          groups(), 0, accelerator.num_processes,
                          accelerator.process_index, accumulation)
    policy = accelerator.unwrap_model(prepared)
    with torch.no_grad(), deepspeed.zero.GatheredParameters(list(policy.parameters()), modifier_rank=None):
        params = flat_params(policy)
    return {"params": params, "metrics": metrics, "reference_held": held,
            "reference_trainable": any(p.requires_grad for p in reference.module.parameters())}


def kl_run(out: Path) -> None:
    model_dir = out / "model"
    config = load_config(GRPOConfig, None, {**KL_CASE, "model": str(model_dir), "model_dtype": "float32"})
    world = world_size()
    model = small_model()  # before the Accelerator: under its ZeRO-3 config a new model is sharded as it is made
    if PartialState().is_main_process:
        model.save_pretrained(model_dir)  # the checkpoint the reference loads: the policy's initial weights
    PartialState().wait_for_everyone()
    accumulation = config.accumulation_steps(world)
    accelerator = make_accelerator(config, accumulation)
    prepared, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    result = kl_update(accelerator, prepared, optimizer, config, accumulation)
    save_weights(accelerator, prepared, load_tokenizer(None), out / "final")
    if accelerator.is_main_process:
        torch.save({**result, "processes": accelerator.num_processes,
                    "distributed_type": str(accelerator.distributed_type)}, out / "zero3_kl.pt")
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    {"generation": uneven_generation, "kl": kl_run}[sys.argv[2]](Path(sys.argv[1]))
