"""`astra-grpo rollout`: play episodes of RL samples with a checkpoint (evaluation, inspection).

A JSONL stage: `rl_sample` records in, one `rollout` record per episode out; a sample that cannot
be played (bad content, prompt too long, an error) goes to --rejects with the reason.
"""

from __future__ import annotations

import statistics

import torch
from astra_core.schema import RecordError
from astra_core.stage import Counts, Stage, StageOptions

from astra_grpo.chat import chat_renderer
from astra_grpo.config import GRPOConfig
from astra_grpo.data import check_rl_sample
from astra_grpo.environments import open_sandbox_pool
from astra_grpo.grpo import make_engine, make_user_simulator, rollout_settings
from astra_grpo.rollout import EpisodeRunner, rollout_record
from astra_grpo.runtime import load_policy

COMMAND = "astra-grpo rollout"


def play_stage(config: GRPOConfig, options: StageOptions, *, group_size: int = 1, batch: int = 8, pool=None,
               reward_fn=None) -> Counts:
    torch.manual_seed(config.seed)
    model, tokenizer = load_policy(config)
    renderer = chat_renderer(tokenizer, config)
    engine = make_engine(config, model, tokenizer, renderer)
    rewards, turns, calls, malformed, errors = [], [], 0, 0, 0

    with Stage(COMMAND, options, in_kind="rl_sample", out_kind="rollout", model=config.model,
               seed=config.seed) as stage:
        own_pool = pool is None
        pool = pool or open_sandbox_pool(config.sandbox_pool_size, jail=config.sandbox_jail,
                                         call_timeout_s=config.sandbox_call_timeout_s).__enter__()
        user_simulator = make_user_simulator(config, None)
        from astra_grpo.tau2 import Tau2Pool

        tau2 = Tau2Pool(config.tau2_python, lazy=True)  # its worker starts at the first tau2 sample
        runner = EpisodeRunner(engine, renderer, pool, rollout_settings(config), reward_fn,
                               user_simulator=user_simulator, tau2=tau2)
        pending: list[dict] = []

        def flush() -> None:
            nonlocal calls, malformed, errors
            if not pending:
                return
            try:
                groups = runner.play(pending, group_size)
            except Exception as exc:  # noqa: BLE001 - the samples are rejected with the reason
                if options.fail_fast:
                    raise
                for record in pending:
                    stage.reject(record, f"error: {type(exc).__name__}: {exc}")
                pending.clear()
                return
            for record, group in zip(pending, groups, strict=True):
                stage.emit([rollout_record(group, e, command=COMMAND, model=config.model, seed=config.seed)
                            for e in group.episodes], record)
                for episode in group.episodes:
                    rewards.append(episode.reward)
                    turns.append(episode.turns)
                    calls += episode.tool_calls
                    malformed += episode.malformed_calls
                    errors += episode.finish_reason == "error"
            pending.clear()

        try:
            for record in stage.inputs():
                try:
                    check_rl_sample(record, config.reward)
                    length = len(renderer.prompt_ids(record["messages"], record["tools"]))
                    if length > config.max_prompt_length:
                        raise RecordError(f"prompt longer than max_prompt_length: {length} > "
                                          f"{config.max_prompt_length} tokens", record_id=record.get("id"))
                except RecordError as exc:
                    stage.reject(record, f"malformed: {exc}")
                    continue
                pending.append(record)
                if len(pending) >= batch:
                    flush()
            flush()
        finally:
            tau2.close()
            if own_pool:
                pool.__exit__(None, None, None)
            if user_simulator is not None:
                user_simulator.close()
        if rewards:
            stage.stats.update({
                "episodes": len(rewards), "reward mean": round(statistics.fmean(rewards), 4),
                "turns mean": round(statistics.fmean(turns), 2),
                "well-formed tool calls": f"{calls - malformed}/{calls}",
                "re-tokenization mismatches": runner.retokenize_mismatches,
                "episodes ended in an error": errors})
    return stage.counts
