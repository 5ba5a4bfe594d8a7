"""Online multi-turn GRPO (paper sections 3.1-3.2.2, Eq. 32) with Adaptive Batch Filling.

    astra-grpo train rl_samples.jsonl --config grpo_paper.yaml --model out/sft/final --output-dir out/grpo
    accelerate launch --config_file multi_gpu.yaml -m astra_grpo.cli train ...

One step:
1. Roll out: `batch_size` prompts from a seeded stream, split over the processes; each plays
   `group_size` episodes per prompt in fresh sandbox sessions; every process gathers all groups.
2. Adaptive Batch Filling picks `batch_size` groups with a learning signal (more rounds if needed);
   every process takes the same decisions on the same gathered groups.
3. Update: group-relative advantages; for each mini-batch (its groups split evenly over the
   processes, then into micro-batches) the clipped surrogate, averaged over all response tokens of
   the mini-batch (or per sequence); `num_iterations` passes reuse the old log-probs.
4. Push the new weights to the rollout engine, log, checkpoint.

With `max_staleness: k > 0` (asynchronous GRPO, `astra_grpo.async_rollout`) step 1 is a producer thread that
plays rounds ahead while step 3 trains, each round at most k policy versions stale when trained, and the
update is the decoupled objective (engines/correction.py); the transformers engine then generates in a
process of its own (`astra_grpo.engines.process`). k = 0 is the loop above, unchanged.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate.utils import DistributedType, set_seed
from astra_core.jsonl import dumps
from astra_core.progress import Progress
from astra_core.schema import RecordError

from astra_grpo.abf import BatchFiller
from astra_grpo.async_rollout import OnDemandRounds, RolloutProducer, Round, staleness_metrics
from astra_grpo.chat import ChatRenderer, chat_renderer
from astra_grpo.checkpoint import (
    latest_state,
    load_training_state,
    save_training_state,
    save_weights,
    step_dir,
)
from astra_grpo.config import ConfigError, GRPOConfig, save_config
from astra_grpo.context_parallel.grid import current_grid
from astra_grpo.data import SampleStream, check_rl_sample, load_records, write_rejects
from astra_grpo.engines import Engine, Sampling, correction, make_engine
from astra_grpo.environments import Environments
from astra_grpo.layout import Layout, plan
from astra_grpo.layout_attention import usable_layout
from astra_grpo.logprobs import collate, token_logprobs, trainable_tokens
from astra_grpo.loss import (
    backward_scale,
    group_advantages,
    high_entropy_masks,
    objective_share,
    policy_terms,
)
from astra_grpo.preemption import Stopped, StopSignals
from astra_grpo.rollout import EpisodeRunner, Group, RewardFn, RolloutSettings, rollout_record
from astra_grpo.runtime import (
    agreed_counts,
    data_parallel_size,
    frozen,
    full_weights,
    gather_objects,
    gathered_values,
    global_sums,
    interleave,
    is_zero3,
    load_policy,
    make_accelerator,
    make_optimizer,
    make_scheduler,
    sharded_reference,
    start_accumulation,
    world_size,
)
from astra_grpo.stats import episode_stats
from astra_grpo.tracking import Metrics, start_trackers
from astra_grpo.users import make_user_simulator

COMMAND = "astra-grpo train"


def rollout_settings(config: GRPOConfig) -> RolloutSettings:
    return RolloutSettings(max_turns=config.max_turns, max_response_length=config.max_response_length,
                           max_new_tokens=config.max_new_tokens, env_workers=config.env_workers, reward=config.reward,
                           sampling=Sampling(config.temperature, config.top_p, config.top_k),
                           max_live_episodes=config.sandbox_pool_size, max_user_turns=config.max_user_turns)


def engine_weights(engine, accelerator, model):
    """The whole ZeRO-3 model gathered for an engine that generates with it (transformers); nothing for one
    that gathers parameter by parameter itself (vLLM: never the whole model beside vLLM's copy)."""
    # (a duck-typed engine, a test's, is not an Engine: it has the interface's default, False)
    if isinstance(engine, Engine) and engine.gathers_own_weights:
        return contextlib.nullcontext()
    return full_weights(accelerator, model)


def split_by_prompt_length(samples: list[dict], renderer: ChatRenderer, limit: int):
    kept, dropped = [], []
    for sample in samples:
        length = len(renderer.prompt_ids(sample["messages"], sample["tools"]))
        if length > limit:
            dropped.append((sample, f"prompt longer than max_prompt_length: {length} > {limit} tokens"))
        else:
            kept.append(sample)
    return kept, dropped


def train_grpo(config: GRPOConfig, files: list[str], *, skip_bad: bool = False, rejects: str | None = None,
               pool=None, reward_fn: RewardFn | None = None, on_step: Callable[[int], None] | None = None,
               tau2=None, openenv=None) -> Path:
    """Train; returns the directory of the final weights. `pool`: environment sessions (default: a
    jailed astra-sandbox SessionPool); `tau2`: sessions on tau2 domains for samples with `environment.tau2`
    (default: an astra_grpo.tau2.Tau2Pool); `openenv`: sessions on OpenEnv servers for samples with
    `environment.openenv` (default: an astra_grpo.openenv_sessions.OpenEnvPool); any other kind of environment
    registered with astra_grpo.environments opens its own; `reward_fn`: episode -> (reward, components) (default:
    astra-reward, or the environment's own for the reward kinds it gives: tau2's evaluator, an OpenEnv server's)."""
    world = world_size()
    accumulation = config.accumulation_steps(data_parallel_size(config))
    accelerator = make_accelerator(config, accumulation)
    set_seed(config.seed)
    rank, main = accelerator.process_index, accelerator.is_main_process
    output = Path(config.output_dir)
    if main:
        output.mkdir(parents=True, exist_ok=True)
        save_config(config, output / "config.yaml")

    environments = Environments(config, pools={"code": pool, "tau2": tau2, "openenv": openenv}, eager=True)

    def check(record: dict) -> None:
        check_rl_sample(record, config.reward)
        environments.check(record)  # e.g. its OpenEnv server answers, with its tools (said before a model loads)

    samples = load_records(files, "rl_sample", skip_bad=skip_bad, rejects=rejects if main else None, check=check)
    start_trackers(accelerator, config)
    model, tokenizer = load_policy(config)
    renderer = chat_renderer(tokenizer, config, model)
    samples, too_long = split_by_prompt_length(samples, renderer, config.max_prompt_length)
    if main:
        write_rejects(rejects, COMMAND, too_long)
    if too_long:
        print(f"{COMMAND}: {len(too_long)} samples have prompts over {config.max_prompt_length} tokens: skipped",
              file=sys.stderr)
    if not samples:
        raise RecordError("no RL sample has a prompt within max_prompt_length")
    zero3 = is_zero3(accelerator)
    reference = frozen(copy.deepcopy(model).to(accelerator.device)) if config.kl_coef > 0 and not zero3 else None

    total_steps = config.max_steps or max(1, math.ceil(config.num_epochs * len(samples) / config.batch_size))
    mini_batches = config.batch_size // config.mini_batch_size
    optimizer = make_optimizer(config, model)
    scheduler = make_scheduler(config, optimizer, total_steps * mini_batches * config.num_iterations)
    model, optimizer = accelerator.prepare(model, optimizer)
    if config.kl_coef > 0 and zero3:
        reference = sharded_reference(config, accelerator)
    accelerator.register_for_checkpointing(scheduler)
    policy = accelerator.unwrap_model(model)
    if config.max_staleness and (world > 1 or zero3):
        raise ConfigError("max_staleness: asynchronous GRPO runs in one process (without DeepSpeed ZeRO-3)")
    # An asynchronous run's engine starts after a resume, from the resumed weights and version.
    engine = None if config.max_staleness else make_engine(config, policy, tokenizer, renderer)
    stream = SampleStream(len(samples), config.seed)
    filler = BatchFiller[Group](n=config.batch_size, delta=config.abf_delta, max_rounds=config.abf_max_rounds,
                                enabled=config.abf)

    step, resumed = 0, None
    if config.resume and (state_path := latest_state(output / "state")) is not None:
        state = load_training_state(accelerator, state_path)
        step, resumed = state["step"], state["step"]
        stream.load_state_dict(state["stream"])
        filler.buffer = state["abf_buffer"]
        if engine is not None:
            engine.push_weights(policy)
        if main:
            print(f"{COMMAND}: resumed from {state_path}", file=sys.stderr)
    metrics = Metrics(accelerator, config, resume_step=resumed)
    rollouts_out = _open_rollouts(config.rollouts_out, resumed) if main else None

    stopped: Stopped | None = None
    with contextlib.ExitStack() as stack:
        signals = stack.enter_context(StopSignals(COMMAND, accelerator))
        progress = stack.enter_context(Progress(COMMAND, total_steps, unit="step", show=None if main else False,
                                                initial=step))
        stack.enter_context(environments)
        environments.prepare(samples)  # every kind's resources, before the first step (a warm sandbox pool)
        user_simulator = make_user_simulator(config, samples)
        if user_simulator is not None:
            stack.enter_context(user_simulator)
        if engine is None:
            halt = threading.Event()  # set on the way out: a producer waiting for the engine gives up
            engine = make_engine(config, policy, tokenizer, renderer, version=step, halt=halt)
            stack.callback(engine.close)
        runner = EpisodeRunner(engine, renderer, environments, rollout_settings(config), reward_fn,
                               user_simulator=user_simulator)

        def save_state() -> Path:
            return save_training_state(accelerator, output / "state", step,
                                       {"step": step, "stream": source.stream_state(), "abf_buffer": filler.buffer},
                                       config.keep_last_states)

        def play_round(version: int) -> Round:
            """`batch_size` new groups, played on every process's share and gathered everywhere."""
            first = stream.epoch * stream.size + stream.offset  # position in the endless stream
            indices = stream.take(config.batch_size)
            uids = [f"{samples[i]['id']}@{first + k}" for k, i in enumerate(indices)]
            share = indices[rank::world]  # may be empty: a CP batch can have fewer groups than processes
            runner.policy_version = version
            with engine_weights(engine, accelerator, model):
                mine = runner.play([samples[i] for i in share], config.group_size, uids[rank::world]) if share else []
            groups = interleave(gather_objects(accelerator, mine))
            for group in groups:
                group.started_version = version
            return Round(groups, stream.state_dict())

        if config.max_staleness:
            before = engine.sync if config.weight_sync == "episode" else (lambda: None)
            source = RolloutProducer(play_round, config.max_staleness, stream.state_dict(), step, before,
                                     last_version=total_steps, rounds_per_step=config.abf_max_rounds if config.abf else 1)
            stack.callback(_close_producer, source, rollouts_out, config, step_of=lambda: step)
            stack.callback(halt.set)  # (first: callbacks run last-in first-out)
        else:
            source = OnDemandRounds(play_round, engine, stream.state_dict())
        engine_busy = source.busy_s

        while step < total_steps:
            # -- 1-2. roll out until Adaptive Batch Filling has a full batch ------------------------
            step_started = time.perf_counter()
            progress.note(f"step {step + 1}: rollouts")
            taken = source.fill(filler, step, lambda rolled, n=step + 1: progress.note(
                f"step {n}: rollouts, {len(rolled)} group(s) so far"))
            fill, rolled, rollout_seconds = taken.fill, taken.rolled, taken.waited_s
            if main:
                _report_errors(rolled, step + 1)

            # -- 3. policy update ---------------------------------------------------------------
            progress.note(f"step {step + 1}: policy update")
            started = time.perf_counter()
            grid = current_grid()  # updates split the batch over data-parallel groups, not processes
            update = _update(config, accelerator, model, reference, optimizer, scheduler, fill.batch,
                             tokenizer.pad_token_id, grid.dp_size, grid.dp_rank, accumulation)
            update_seconds = time.perf_counter() - started
            if update["update_skipped"] and main:
                print(f"{COMMAND}: step {step + 1}: no group of the batch has reward variance, so the gradient is "
                      "zero: the forward and backward passes were skipped (the optimizer step was not)",
                      file=sys.stderr)
            version = (step + 1,) if config.max_staleness else ()  # an asynchronous engine tags turns with it
            source.push(functools.partial(_push_weights, engine, accelerator, model, policy, *version), step + 1)
            step += 1
            progress.update()
            step_seconds = time.perf_counter() - step_started
            engine_busy, busy = source.busy_s, source.busy_s - engine_busy

            # -- 4. log and checkpoint ------------------------------------------------------------
            if rollouts_out is not None:
                _write_rollouts(rollouts_out, rolled, fill.batch, filler.buffer, step, config,
                                trained_version=step - 1 if config.max_staleness else None)
            overlap = {"trainer_idle_fraction": rollout_seconds / step_seconds,
                       "engine_idle_fraction": max(0.0, 1.0 - busy / step_seconds), "step_seconds": step_seconds,
                       **staleness_metrics(fill.batch, step - 1)}
            if config.max_staleness and main:
                print(f"{COMMAND}: {_overlap_line(step, overlap)}", file=sys.stderr)
            values = {**overlap, **update, **episode_stats(rolled, "rollout"), **episode_stats(fill.batch, "batch"),
                      "valid_fraction": fill.valid_fraction, "abf/rounds": fill.rounds,
                      "abf/discarded": fill.discarded, "abf/buffer": len(filler.buffer),
                      "abf/from_buffer": fill.from_buffer, "abf/capped": float(fill.capped),
                      "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
                      "tokens_per_s": update["update_tokens"] / update_seconds
                      if update_seconds and not update["update_skipped"] else None,
                      "rollout/generated_tokens_per_s": sum(e.generated_tokens for g in rolled for e in g.episodes)
                      / (busy if config.max_staleness else rollout_seconds) / world if rollout_seconds and busy else None,
                      "retokenize_mismatches": runner.retokenize_mismatches}
            metrics.log(step, values, final=step == total_steps)
            if main and step == (resumed or 0) + 1:
                _say_if_no_call_is_read(rolled, renderer)
            if config.save_weights_steps and step % config.save_weights_steps == 0 and step < total_steps:
                save_weights(accelerator, model, tokenizer, step_dir(output / "weights", step))
            stopped = signals.end_of_step(step, total_steps, config.save_state_steps, save_state, on_step)
            if stopped is not None:
                break

    if rollouts_out is not None:
        rollouts_out.close()
    if stopped is not None:
        metrics.close()
        raise stopped
    save_weights(accelerator, model, tokenizer, output / "final")
    metrics.close()
    return output / "final"


def _push_weights(engine, accelerator, model, policy, *version: int) -> None:
    with engine_weights(engine, accelerator, model):
        engine.push_weights(policy, *version)


def _overlap_line(step: int, overlap: dict[str, float]) -> str:
    histogram = ", ".join(f"{k.split('/')[1]}: {int(v)}" for k, v in overlap.items()
                          if k.startswith("staleness/") and k.split("/")[1].isdigit())
    return (f"step {step}: staleness (versions: groups) {histogram}; engine idle "
            f"{overlap['engine_idle_fraction']:.0%}, trainer idle {overlap['trainer_idle_fraction']:.0%}")


def _close_producer(source: RolloutProducer, rollouts_out, config: GRPOConfig, step_of: Callable[[], int]) -> None:
    """Stop and join the producer; the groups it played that no step took go to the rollouts file as discarded."""
    source.close()
    if rollouts_out is not None and not rollouts_out.closed:
        _write_rollouts(rollouts_out, source.leftover(), [], [], step_of(), config, trained_version=step_of(),
                        reason="played ahead, but the run ended before a step took it")


def _update(config: GRPOConfig, accelerator, model, reference, optimizer, scheduler, batch: list[Group],
            pad_id: int, world: int, rank: int, accumulation: int) -> dict[str, float]:
    """Every optimizer update of one step; returns the step's update metrics (global). `world` and `rank`
    are the data-parallel size and rank (processes and rank without context parallelism). `accumulation`
    is the micro-batches per update the accelerator was made with (DeepSpeed's engine divides by it)."""
    device = accelerator.device
    episodes = [e for g in batch for e in g.episodes]
    rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float64)
    usable = torch.tensor([not g.failed for g in batch])
    advantages = group_advantages(rewards, config.group_size, config.scale_rewards, config.advantage_eps,
                                  valid=usable).tolist()

    if _gradient_is_zero(config, accelerator, advantages):
        return _zero_gradient_update(model, optimizer, scheduler,
                                     updates=-(-len(batch) // config.mini_batch_size) * config.num_iterations)

    # Sequences of this process in each mini-batch: its even share of the mini-batch's groups.
    per_process = config.mini_batch_size // world
    minis = []
    for start in range(0, len(batch), config.mini_batch_size):
        groups = range(start + rank * per_process, start + (rank + 1) * per_process)
        minis.append([g * config.group_size + k for g in groups for k in range(config.group_size)])
    # Each mini-batch's micro-batches, laid out once for every pass over them (old, reference, training).
    kind = usable_layout(model, config.layout)
    micro_batches = _micro_batches(config, accelerator, episodes, minis, kind)
    layouts = [[collate([episodes[i].token_ids for i in micro], [episodes[i].loss_mask for i in micro], pad_id, kind,
                        keys=_sharing_keys(config, micro)) for micro in mini] for mini in micro_batches]
    # Strictly on-policy (one update per batch): the old policy is the current one, so the old
    # log-probs are the current ones, detached. Otherwise compute them before the first update.
    reuse = config.num_iterations == 1 and len(minis) == 1
    old = None if reuse else _logprobs_of(model, layouts, config, device)
    ref = _logprobs_of(reference, layouts, config, device) if reference is not None else None
    selected = _high_entropy_tokens(model, layouts, config, device) if config.top_entropy_quantile < 1 else None

    objective = config.objective()
    lr = scheduler.get_last_lr()[0]  # the rate of this step's first update
    sums = {"loss": 0.0, "clip_low": 0.0, "clip_high": 0.0, "ratio": 0.0, "kl": 0.0, "entropy": 0.0,
            "tokens": 0.0, "update_tokens": 0.0, "forwarded_tokens": 0.0}
    if correction.enabled(config):
        sums.update(dict.fromkeys(correction.SUM_KEYS, 0.0))
    if selected is not None:
        sums["entropy_selected"] = 0.0
    grad_norm = None
    for _ in range(config.num_iterations):
        for k, mini in enumerate(minis):
            totals = global_sums(accelerator, {"tokens": sum(trainable_tokens(episodes[i].loss_mask) for i in mini)})
            sequences = config.mini_batch_size * config.group_size
            scale = backward_scale(accelerator.num_processes, start_accumulation(accelerator, len(layouts[k])))
            for j, micro in enumerate(micro_batches[k]):
                with accelerator.accumulate(model):
                    inputs = layouts[k][j].to(device)
                    logprobs, entropies = token_logprobs(model, inputs, config.temperature,
                                                         with_entropy=config.entropy_coef > 0,
                                                         attention=config.layout_attention)
                    old_logprobs = logprobs.detach() if old is None else old[k][j].to(device)
                    ref_logprobs = None if ref is None else ref[k][j].to(device)
                    terms = policy_terms(logprobs, old_logprobs,
                                         torch.tensor([advantages[i] for i in micro], dtype=torch.float32,
                                                      device=device),
                                         objective=objective, mask=inputs.loss_mask,
                                         ref_logprobs=ref_logprobs, kl_coef=config.kl_coef, entropies=entropies,
                                         entropy_coef=config.entropy_coef)
                    mask = inputs.loss_mask
                    loss = terms.loss
                    if selected is not None:  # top_entropy_quantile: the other loss tokens carry no loss
                        loss = loss * selected[k][j].to(device=device, dtype=loss.dtype)
                    if correction.enabled(config):  # truncated IS: stale episodes, the vLLM/trainer mismatch
                        weights, mismatch = correction.micro_batch([episodes[i] for i in micro], old_logprobs, mask,
                                                                   correction.of(config))
                        loss = correction.weighted_loss(loss, weights)
                        sums.update({k: sums[k] + v for k, v in mismatch.items()})
                    share = objective_share(loss, mask, config.loss_average, totals["tokens"], sequences,
                                            fixed_length=config.max_response_length)
                    accelerator.backward(share * scale)
                    if accelerator.sync_gradients:
                        grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm or math.inf)
                    optimizer.step()
                    optimizer.zero_grad()
                with torch.no_grad():
                    sums["loss"] += float(share.detach())
                    sums["clip_low"] += float((terms.clipped_low * mask).sum())
                    sums["clip_high"] += float((terms.clipped_high * mask).sum())
                    sums["ratio"] += float((terms.ratio * mask).sum())
                    sums["kl"] += float((terms.kl * mask).sum()) if terms.kl is not None else 0.0
                    sums["entropy"] += float((entropies * mask).sum()) if entropies is not None else 0.0
                    sums["tokens"] += float(mask.sum())
                    if selected is not None:
                        sums["entropy_selected"] += float((selected[k][j].to(device) * mask).sum())
                    sums["update_tokens"] += inputs.tokens
                    sums["forwarded_tokens"] += inputs.forwarded_tokens
            scheduler.step()
    total = global_sums(accelerator, sums)
    tokens = max(total["tokens"], 1.0)
    updates = len(minis) * config.num_iterations
    out = {"loss": total["loss"] / updates, "clip_fraction_low": total["clip_low"] / tokens,
           "clip_fraction_high": total["clip_high"] / tokens, "clip_fraction": (total["clip_low"] + total["clip_high"])
           / tokens, "ratio_mean": total["ratio"] / tokens, "update_tokens": total["update_tokens"],
           "update_forwarded_tokens": total["forwarded_tokens"],
           "grad_norm": float(grad_norm) if grad_norm is not None else None, "lr": lr,
           "advantage_abs_mean": sum(abs(a) for a in advantages) / len(advantages), "update_skipped": 0.0}
    if ref is not None:
        out["kl"] = total["kl"] / tokens
    if correction.enabled(config):
        out.update(correction.step_metrics(total))
    if config.entropy_coef > 0:
        out["entropy"] = total["entropy"] / tokens
    if selected is not None:
        out["entropy_selected_fraction"] = total["entropy_selected"] / tokens
    return out


def _micro_batches(config: GRPOConfig, accelerator, episodes, minis: list[list[int]], kind: str) -> list[list[list]]:
    """Episode indices of every micro-batch of every mini-batch of this process: `max_tokens_per_microbatch`
    forwarded tokens or `micro_batch_size` episodes each, as many micro-batches on every process."""
    plans = [plan([episodes[i].token_ids for i in mini], kind, budget=config.max_tokens_per_microbatch,
                  size=config.micro_batch_size, keys=_sharing_keys(config, mini)) for mini in minis]
    counts = agreed_counts(accelerator, [len(p.micro_batches) for p in plans])
    return [[[mini[i] for i in micro] for micro in p.split_to(count).micro_batches]
            for p, mini, count in zip(plans, minis, counts, strict=True)]


def _sharing_keys(config: GRPOConfig, indices: list[int]) -> list[int] | None:
    """Which episodes a tree may share prefixes between: those of one group (`tree_scope: group`), or any."""
    return [i // config.group_size for i in indices] if config.tree_scope == "group" else None


def _gradient_is_zero(config: GRPOConfig, accelerator, advantages: list[float]) -> bool:
    """True when the step's objective has an exactly zero gradient, known before any forward pass: every
    advantage is 0 (no group of the batch has reward variance: ABF topped it up at its round cap) and no
    other term (KL, entropy) is on. Every process sees the whole batch, so all of them agree. DeepSpeed
    owns its gradients and optimizer step, so it always takes the full path."""
    return (not any(advantages) and config.kl_coef == 0 and config.entropy_coef == 0
            and accelerator.distributed_type in (DistributedType.NO, DistributedType.MULTI_CPU,
                                                 DistributedType.MULTI_GPU))


def _zero_gradient_update(model, optimizer, scheduler, updates: int) -> dict[str, float]:
    """The same optimizer and scheduler steps as the full update, with the zero gradient it would have
    computed, without its forward and backward passes (minutes on CPU for long tau2 prompts). The steps
    still run: Adam's moments and weight decay move the weights exactly as they would have."""
    lr = scheduler.get_last_lr()[0]
    trainable = [p for p in model.parameters() if p.requires_grad]
    for _ in range(updates):
        for parameter in trainable:
            parameter.grad = torch.zeros_like(parameter)
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    return {"loss": 0.0, "clip_fraction_low": 0.0, "clip_fraction_high": 0.0, "clip_fraction": 0.0,
            "ratio_mean": 1.0, "update_tokens": 0.0, "update_forwarded_tokens": 0.0, "grad_norm": 0.0, "lr": lr,
            "advantage_abs_mean": 0.0, "update_skipped": 1.0}


def _high_entropy_tokens(model, layouts: list[list[Layout]], config: GRPOConfig, device) -> list[list[torch.Tensor]]:
    """Per micro-batch, which loss tokens the update learns from (top_entropy_quantile): chosen once per mini-batch
    from the pre-update policy's entropies over all its micro-batches and processes, so that every layout and
    micro-batch split selects the same tokens (TRL picks per micro-batch from the current forward)."""
    with torch.no_grad():
        selected = []
        for mini in layouts:
            laid = [layout.to(device) for layout in mini]
            entropies = [token_logprobs(model, layout, config.temperature, with_entropy=True,
                                        attention=config.layout_attention)[1] for layout in laid]
            masks = high_entropy_masks(entropies, [layout.loss_mask for layout in laid], config.top_entropy_quantile,
                                       gather=gathered_values)
            selected.append([m.cpu() for m in masks])
        return selected


def _logprobs_of(model, layouts: list[list[Layout]], config: GRPOConfig, device) -> list[list[torch.Tensor]]:
    """Per-token log-probs [B, T] (on the CPU) of every laid-out micro-batch under `model`, without gradient."""
    with torch.no_grad():
        return [[token_logprobs(model, layout.to(device), config.temperature, attention=config.layout_attention)[0]
                 .float().cpu() for layout in mini] for mini in layouts]


def _say_if_no_call_is_read(rolled: list[Group], renderer: ChatRenderer) -> None:
    """A policy none of whose calls can be read scores 0 in every episode and learns nothing: say so at once."""
    episodes = [e for g in rolled for e in g.episodes]
    if episodes and not sum(e.tool_calls - e.malformed_calls for e in episodes):
        unreadable = sum(e.malformed_calls for e in episodes)
        print(f"{COMMAND}: warning: no episode of the first step made a tool call that could be read "
              f"({len(episodes)} episodes, {unreadable} unreadable calls; replies read as {renderer.reader}): a "
              "policy that writes calls in another format needs --response-template (docs/model-families.md)",
              file=sys.stderr)


def _report_errors(rolled: list[Group], step: int) -> None:
    failed = [e for g in rolled for e in g.episodes if e.finish_reason == "error"]
    if failed:
        print(f"{COMMAND}: step {step}: {len(failed)} of {sum(len(g.episodes) for g in rolled)} episodes ended "
              f"in an error; their groups are not trained on (first: {failed[0].error})", file=sys.stderr)


def _open_rollouts(path: str | None, resumed: int | None):
    if not path:
        return None
    target = Path(path)
    if resumed is not None and target.exists():
        # Steps after the resumed state are replayed: drop their old records.
        kept = [line for line in target.read_text().splitlines() if line and json.loads(line).get("step", 0) <= resumed]
        target.write_text("".join(line + "\n" for line in kept))
        return target.open("ab")
    return target.open("wb")


def _write_rollouts(handle, rolled: list[Group], batch: list[Group], buffer: list[Group], step: int,
                    config: GRPOConfig, *, trained_version: int | None = None, reason: str | None = None) -> None:
    """`trained_version` (asynchronous runs): the policy version of the step, for each record's staleness."""
    in_batch = {g.uid: index for index, g in enumerate(batch)}
    buffered = {g.uid for g in buffer}
    for group in rolled:
        status = "trained" if group.uid in in_batch else "buffered" if group.uid in buffered else "discarded"
        for episode in group.episodes:
            record = rollout_record(group, episode, command=COMMAND, step=step, group_index=in_batch.get(group.uid),
                                    status=status, model=config.model, seed=config.seed,
                                    trained_version=trained_version, reason=reason)
            handle.write(dumps(record))
    handle.flush()
