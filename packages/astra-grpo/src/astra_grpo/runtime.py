"""What both trainers need from accelerate and transformers: processes (and their DP x CP grid),
model, optimizer, schedule, and the two collectives the objective needs (a global sum and an object
gather)."""

from __future__ import annotations

import contextlib
import copy
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import DistributedType, InitProcessGroupKwargs

from astra_grpo.config import TrainConfig
from astra_grpo.context_parallel.grid import current_grid, grid_shape, init_grid
from astra_grpo.tracking import trackers as wanted_trackers


def _process_options() -> dict:
    """How accelerate should set up processes without CUDA: `cpu=True` gives gloo processes (its launcher's
    own --cpu flag would start only one), except under DeepSpeed, which needs `cpu=False` and is told
    gloo explicitly (else accelerate counts a single process)."""
    if torch.cuda.is_available():
        return {"cpu": False}
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        return {"cpu": False, "backend": "gloo"}
    return {"cpu": True}


def world_size() -> int:
    """Processes of this run, known before the Accelerator exists (the accumulation steps need it)."""
    return PartialState(**_process_options()).num_processes


def data_parallel_size(config: TrainConfig) -> int:
    """Data-parallel groups of this run: processes / context_parallel_size (a ConfigError if it does not divide)."""
    return grid_shape(world_size(), config.context_parallel_size)[0]


def make_accelerator(config: TrainConfig, accumulation_steps: int) -> Accelerator:
    """An Accelerator whose gradient accumulation is exactly `accumulation_steps` micro-batches per update,
    and the DP x CP process grid of `config.context_parallel_size` (`context_parallel.grid.current_grid`).

    On a machine without CUDA the processes use gloo on CPU (see `_process_options`).
    """
    trackers = wanted_trackers(config)
    options = _process_options()
    handlers = [InitProcessGroupKwargs(backend=options["backend"])] if "backend" in options else []
    accelerator = Accelerator(cpu=options["cpu"], log_with=trackers or None, project_dir=config.output_dir,
                              gradient_accumulation_steps=accumulation_steps, kwargs_handlers=handlers)
    accelerator.gradient_accumulation_steps = accumulation_steps  # a launch config must not override it
    plugin = accelerator.state.deepspeed_plugin
    if plugin is not None:
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = config.micro_batch_size
        plugin.deepspeed_config["gradient_accumulation_steps"] = accumulation_steps
        plugin.deepspeed_config["gradient_clipping"] = config.max_grad_norm or 0.0
        plugin.deepspeed_config["train_batch_size"] = (config.micro_batch_size * accumulation_steps
                                                       * accelerator.num_processes)
        if plugin.zero_stage == 3:  # the trainers save whole checkpoints: gathered as they are saved, not refused at the end
            plugin.deepspeed_config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
    grid = init_grid(config.context_parallel_size)
    if grid.cp_size > 1 and accelerator.is_main_process:
        print(f"astra-grpo: {grid.world_size} processes = {grid.dp_size} data-parallel x {grid.cp_size} "
              "context-parallel (Ulysses)", file=sys.stderr)
    return accelerator


def is_zero3(accelerator: Accelerator) -> bool:
    plugin = accelerator.state.deepspeed_plugin
    return accelerator.distributed_type == DistributedType.DEEPSPEED and plugin is not None and plugin.zero_stage == 3


@contextlib.contextmanager
def full_weights(accelerator: Accelerator, model) -> Iterator[None]:
    """Materialise ZeRO-3-sharded weights on every process to generate with them (a collective at entry and
    exit: all processes enter together). DeepSpeed's parameter hooks are off meanwhile: with them a forward
    may release a gathered parameter and fetch it again, a collective of its own, and processes generate
    different numbers of tokens (they fall out of step). `model` is the prepared (DeepSpeed-wrapped) model."""
    if not is_zero3(accelerator):
        yield
        return
    from deepspeed.runtime.zero import unwrap_model_for_generation

    with unwrap_model_for_generation(model):
        yield


def load_policy(config: TrainConfig):
    """(model in train mode, tokenizer) from a local checkpoint (default: the embedded SmolLM2)."""
    from astra_core.local.model import load_part, resolve_model_path
    from transformers import AutoTokenizer

    directory = resolve_model_path(config.model)
    tokenizer = load_part("tokenizer", directory, lambda: AutoTokenizer.from_pretrained(directory))
    if config.chat_template_path:
        tokenizer.chat_template = chat_template_of(config.chat_template_path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = load_model(config)
    if config.gradient_checkpointing:
        # transformers renamed it; the old name warns that it goes away (both exist in the versions we allow)
        enable_checkpointing = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable_checkpointing()
    model.train()
    return model, tokenizer


def chat_template_of(path: str) -> str:
    """The chat template in a Jinja file, or the one of a checkpoint directory's tokenizer."""
    from astra_core.config import ConfigError

    if os.path.isdir(path):
        from transformers import AutoTokenizer

        template = AutoTokenizer.from_pretrained(path).chat_template
        if not template:
            raise ConfigError(f"config field chat_template_path: the tokenizer in {path} has no chat template")
        return template
    return Path(path).read_text()


def load_model(config: TrainConfig):
    """The checkpoint's causal LM in `model_dtype`, its attention sharded under context parallelism."""
    from astra_core.local.model import load_part, resolve_model_path
    from transformers import AutoModelForCausalLM

    kwargs = {"attn_implementation": config.attn_implementation} if config.attn_implementation else {}
    directory = resolve_model_path(config.model)
    model = load_part("model", directory, lambda: AutoModelForCausalLM.from_pretrained(
        directory, dtype=getattr(torch, config.model_dtype), **kwargs))
    model.config.use_cache = False
    if config.context_parallel_size > 1:
        from astra_grpo.context_parallel.attention import enable

        enable(model, config.context_parallel_size)
    return model


def frozen(model):
    """`model` in eval mode without gradients (a reference the loss never trains)."""
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model


def sharded_reference(config: TrainConfig, accelerator: Accelerator):
    """The frozen initial policy under ZeRO-3, sharded over the processes like the policy (no process holds a
    whole second model): a DeepSpeed engine without optimizer over a fresh load of the checkpoint (the policy
    itself may have been sharded as it loaded, zero3_init_flag). Make it after `accelerator.prepare`, whose
    DeepSpeed config (its "auto" values filled) it reuses. Its forward gathers one layer's parameters at a time
    and is a collective: every process must run the same number of forwards (`_update` gives each an equal
    share of every mini-batch)."""
    import deepspeed

    settings = copy.deepcopy(accelerator.state.deepspeed_plugin.deepspeed_config)
    for training_only in ("optimizer", "scheduler"):
        settings.pop(training_only, None)
    engine, *_ = deepspeed.initialize(model=frozen(load_model(config)), config=settings)
    engine.eval()
    return engine


def make_optimizer(config: TrainConfig, model) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                             eps=config.adam_epsilon, weight_decay=config.weight_decay)


def make_scheduler(config: TrainConfig, optimizer: torch.optim.Optimizer, total_updates: int):
    """Linear warmup over `warmup_ratio` of the updates, then constant, cosine (to 0) or linear (to 0)."""
    from transformers import get_scheduler

    warmup = math.ceil(config.warmup_ratio * total_updates)
    name = {"constant": "constant_with_warmup", "cosine": "cosine", "linear": "linear"}[config.lr_scheduler]
    return get_scheduler(name, optimizer, num_warmup_steps=warmup, num_training_steps=max(total_updates, 1))


def global_sum(accelerator: Accelerator, value: float) -> float:
    """Sum of `value` over the data-parallel groups (e.g. the token count that normalises the loss)."""
    return global_sums(accelerator, {"value": value})["value"]


def global_sums(accelerator: Accelerator, values: dict[str, float]) -> dict[str, float]:
    """`global_sum` of several values in one collective. The ranks of a context-parallel group hold the
    same micro-batches, so the sum runs over one rank per CP group (its DP group): every token once."""
    grid = current_grid()
    if grid.dp_size == 1 or not values:
        return {k: float(v) for k, v in values.items()}
    keys = sorted(values)
    tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=accelerator.device)
    torch.distributed.all_reduce(tensor, group=grid.dp_group)
    return dict(zip(keys, tensor.tolist(), strict=True))


def gathered_values(values: torch.Tensor) -> torch.Tensor:
    """Every process's 1-D `values` (any lengths), concatenated over this process's DP group: one rank per CP
    group, so that under context parallelism each token's value comes once."""
    grid = current_grid()
    if grid.dp_size == 1:
        return values
    count = torch.tensor([values.numel()], dtype=torch.long, device=values.device)
    counts = [torch.zeros_like(count) for _ in range(grid.dp_size)]
    torch.distributed.all_gather(counts, count, group=grid.dp_group)
    lengths = [int(c.item()) for c in counts]
    padded = torch.zeros(max(lengths), dtype=values.dtype, device=values.device)
    padded[:values.numel()] = values
    parts = [torch.empty_like(padded) for _ in lengths]
    torch.distributed.all_gather(parts, padded, group=grid.dp_group)
    return torch.cat([part[:length] for part, length in zip(parts, lengths, strict=True)])


def agreed_counts(accelerator: Accelerator, counts: list[int]) -> list[int]:
    """The largest of each count over all processes. Processes that run the same number of micro-batches stay
    in step: DDP and ZeRO synchronise in every backward, ZeRO-3 (and its sharded reference) in every forward."""
    if accelerator.num_processes == 1 or not counts:
        return list(counts)
    tensor = torch.tensor(counts, dtype=torch.long, device=accelerator.device)
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
    return tensor.tolist()


def start_accumulation(accelerator: Accelerator, micro_batches: int) -> int:
    """Make the next `micro_batches` passes through `accelerator.accumulate` one optimizer update (gradients
    synchronised and the optimizer stepped on the last). Returns what `accelerator.backward` divides each loss
    by, for `loss.backward_scale`: `micro_batches`, or under DeepSpeed its engine's own configured accumulation
    steps (the engine divides by those whatever the number of micro-batches)."""
    accelerator.gradient_accumulation_steps = micro_batches
    accelerator.step = 0
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        return accelerator.deepspeed_engine_wrapped.engine.gradient_accumulation_steps()
    return micro_batches


def gather_objects(accelerator: Accelerator, items: list) -> list[list]:
    """Every process's `items`, indexed by process (all processes get all of them)."""
    if accelerator.num_processes == 1:
        return [items]
    gathered: list = [None] * accelerator.num_processes
    torch.distributed.all_gather_object(gathered, items)
    return gathered


def interleave(shares: list[list]) -> list:
    """The items dealt round-robin over the processes (`items[rank::world]`) back in their order. Shares
    may be uneven: under context parallelism a batch can hold fewer groups than there are processes."""
    world = len(shares)
    return [shares[k % world][k // world] for k in range(sum(map(len, shares)))]
