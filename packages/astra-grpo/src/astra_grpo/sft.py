"""Supervised fine-tuning on multi-turn tool-use trajectories (paper section 3.2.1).

    astra-grpo sft trajectories.jsonl --config sft_paper.yaml --output-dir out/sft
    accelerate launch --config_file deepspeed_zero3.yaml -m astra_grpo.cli sft ...

Each step takes `batch_size` trajectories (a seeded shuffle, epoch after epoch), splits them over
the processes and into micro-batches, and minimises the negative log-likelihood of the assistant
tokens only, averaged over every assistant token of the global batch (or per sequence).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

from accelerate.utils import set_seed
from astra_core.progress import Progress

from astra_grpo.chat import ChatRenderer, TemplateError, chat_renderer
from astra_grpo.checkpoint import (
    latest_state,
    load_training_state,
    save_training_state,
    save_weights,
    step_dir,
)
from astra_grpo.config import ConfigError, SFTConfig, save_config
from astra_grpo.context_parallel.grid import current_grid
from astra_grpo.data import SampleStream, load_records, write_rejects
from astra_grpo.layout import plan
from astra_grpo.layout_attention import usable_layout
from astra_grpo.logprobs import collate, token_logprobs, trainable_tokens
from astra_grpo.loss import backward_scale, objective_share, sft_token_loss
from astra_grpo.preemption import Stopped, StopSignals
from astra_grpo.runtime import (
    agreed_counts,
    data_parallel_size,
    global_sums,
    load_policy,
    make_accelerator,
    make_optimizer,
    make_scheduler,
    start_accumulation,
    world_size,
)
from astra_grpo.tracking import Metrics, start_trackers

COMMAND = "astra-grpo sft"


def build_examples(records: list[dict], renderer: ChatRenderer, config: SFTConfig):
    """(examples [(ids, mask)], dropped [(record, reason)]) with the over-long policy applied."""
    examples, dropped = [], []
    for record in records:
        try:
            ids, mask = renderer.encode(record["messages"], record.get("tools") or None)
        except TemplateError as exc:
            dropped.append((record, f"chat template: {exc}"))
            continue
        if len(ids) > config.max_length:
            if config.overlong == "drop":
                dropped.append((record, f"longer than max_length: {len(ids)} > {config.max_length} tokens"))
                continue
            ids, mask = ids[:config.max_length], mask[:config.max_length]
        if trainable_tokens(mask) == 0:
            dropped.append((record, "no assistant tokens within max_length"))
            continue
        examples.append((ids, mask))
    return examples, dropped


def train_sft(config: SFTConfig, files: list[str], *, skip_bad: bool = False, rejects: str | None = None,
              on_step: Callable[[int], None] | None = None) -> Path:
    """Train; returns the directory of the final weights."""
    world, groups = world_size(), data_parallel_size(config)  # groups: data-parallel (processes / CP size)
    per_process, rest = divmod(config.batch_size, groups)
    if rest or per_process % config.micro_batch_size:
        raise ConfigError(f"config field batch_size: {config.batch_size} sequences do not split into "
                          f"{groups} data-parallel groups x micro-batches of {config.micro_batch_size}")
    accumulation = per_process // config.micro_batch_size
    accelerator = make_accelerator(config, accumulation)
    set_seed(config.seed)
    output = Path(config.output_dir)
    if accelerator.is_main_process:
        output.mkdir(parents=True, exist_ok=True)
        save_config(config, output / "config.yaml")

    records = load_records(files, "trajectory", skip_bad=skip_bad, rejects=rejects if accelerator.is_main_process else None)
    start_trackers(accelerator, config)
    model, tokenizer = load_policy(config)
    renderer = chat_renderer(tokenizer, config, model)
    examples, dropped = build_examples(records, renderer, config)
    if accelerator.is_main_process:
        write_rejects(rejects, COMMAND, dropped)
        if dropped:
            print(f"{COMMAND}: dropped {len(dropped)} of {len(records)} trajectories "
                  f"({dropped[0][1]}{', ...' if len(dropped) > 1 else ''})", file=sys.stderr)
    if not examples:
        raise ConfigError("no trajectory left to train on (see the dropped reasons above)")

    total_steps = config.max_steps or max(1, math.ceil(config.num_epochs * len(examples) / config.batch_size))
    optimizer = make_optimizer(config, model)
    scheduler = make_scheduler(config, optimizer, total_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    stream = SampleStream(len(examples), config.seed)

    step, resumed = 0, None
    if config.resume and (state_path := latest_state(output / "state")) is not None:
        state = load_training_state(accelerator, state_path)
        step, resumed = state["step"], state["step"]
        stream.load_state_dict(state["stream"])
        if accelerator.is_main_process:
            print(f"{COMMAND}: resumed from {state_path}", file=sys.stderr)
    metrics = Metrics(accelerator, config, resume_step=resumed)

    group = current_grid().dp_rank  # the ranks of a context-parallel group train on the same sequences
    show = None if accelerator.is_main_process else False

    def save_state() -> Path:
        return save_training_state(accelerator, output / "state", step, {"step": step, "stream": stream.state_dict()},
                                   config.keep_last_states)

    stopped: Stopped | None = None
    with StopSignals(COMMAND, accelerator) as signals, Progress(COMMAND, total_steps, unit="step", show=show, initial=step) as progress:
        while step < total_steps:
            started = time.perf_counter()
            mine = [examples[i] for i in stream.take(config.batch_size)[group::groups]]
            lr = scheduler.get_last_lr()[0]  # the rate this step trains with
            update = _update(config, accelerator, model, optimizer, mine, tokenizer.pad_token_id, world, accumulation)
            scheduler.step()
            step += 1
            progress.update()

            elapsed = time.perf_counter() - started
            metrics.log(step, {"loss": update["loss"], "lr": lr, "grad_norm": update["grad_norm"],
                               "tokens_per_s": update["seen_tokens"] / elapsed, "trainable_tokens": update["tokens"],
                               "epoch": stream.epoch + stream.offset / len(examples)}, final=step == total_steps)
            if config.save_weights_steps and step % config.save_weights_steps == 0 and step < total_steps:
                save_weights(accelerator, model, tokenizer, step_dir(output / "weights", step))
            stopped = signals.end_of_step(step, total_steps, config.save_state_steps, save_state, on_step)
            if stopped is not None:
                break

    if stopped is not None:
        metrics.close()
        raise stopped
    save_weights(accelerator, model, tokenizer, output / "final")
    metrics.close()
    return output / "final"


def _update(config: SFTConfig, accelerator, model, optimizer, mine: list[tuple[list[int], list[int]]], pad_id: int,
            world: int, accumulation: int) -> dict[str, float | None]:
    """One optimizer update on this process's share of the global batch; returns global metrics. Its
    micro-batches hold `max_tokens_per_microbatch` forwarded tokens or `micro_batch_size` sequences, as many on
    every process; a tree layout shares any common prefix within a micro-batch."""
    totals = global_sums(accelerator, {"tokens": sum(trainable_tokens(m) for _, m in mine)})
    kind = usable_layout(model, config.layout)
    drafted = plan([ids for ids, _ in mine], kind, budget=config.max_tokens_per_microbatch, size=config.micro_batch_size)
    [count] = agreed_counts(accelerator, [len(drafted.micro_batches)])
    scale = backward_scale(world, start_accumulation(accelerator, count))
    loss_share, seen_tokens, grad_norm = 0.0, 0, None
    for micro in drafted.split_to(count).micro_batches:
        with accelerator.accumulate(model):
            batch = collate([mine[i][0] for i in micro], [mine[i][1] for i in micro], pad_id, kind).to(accelerator.device)
            logprobs, _ = token_logprobs(model, batch, attention=config.layout_attention)
            share = objective_share(sft_token_loss(logprobs), batch.loss_mask, config.loss_average,
                                    totals["tokens"], config.batch_size)
            accelerator.backward(share * scale)
            if accelerator.sync_gradients:
                grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm or math.inf)
            optimizer.step()
            optimizer.zero_grad()
        loss_share += float(share.detach())
        seen_tokens += batch.tokens
    sums = global_sums(accelerator, {"loss": loss_share, "seen": seen_tokens})
    return {"loss": sums["loss"], "seen_tokens": sums["seen"], "tokens": totals["tokens"],
            "grad_norm": float(grad_norm) if grad_norm is not None else None}
