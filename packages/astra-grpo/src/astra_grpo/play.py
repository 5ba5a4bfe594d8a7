"""`astra-grpo rollout`: play episodes of RL samples with a checkpoint (evaluation, inspection).

`rl_sample` records in, one `rollout` record per episode out; a sample that cannot be played (bad
content, a prompt too long) is rejected with the reason. The command runs `play_samples` over batches
of samples; a library user calls it the same way:

    with Player(RolloutConfig(model="out/grpo/final")) as player:
        results = play_samples(samples, player.config, player)   # per sample: its rollouts, or an exception
"""

from __future__ import annotations

import statistics
from typing import Any

from astra_core.llm import LLMUnavailable
from astra_core.schema import RecordError
from astra_core.stage import Malformed, Stage, StageError

from astra_grpo.config import RolloutConfig
from astra_grpo.environments import Environments

COMMAND = "astra-grpo rollout"


class Player:
    """A checkpoint playing RL samples: the policy and its engine, a sandbox pool and the user simulator.
    They load on first use, so input that is bad from its first line fails before a model loads."""

    def __init__(self, config: RolloutConfig, *, pool=None, reward_fn=None):
        self.config = config
        self._environments = Environments(config, pools={"code": pool})  # each kind's, opened at its first sample
        self._reward_fn = reward_fn
        self._runner = self._renderer = self._user = None
        self.rewards: list[float] = []
        self.turns: list[int] = []
        self.calls = self.malformed = self.errors = 0

    def __enter__(self) -> Player:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _load(self) -> None:
        try:
            self._open()
        except Exception as exc:  # no sample can be played: the stage stops with why
            raise StageError(f"cannot load the policy or its sandbox: {type(exc).__name__}: {exc}") from exc

    def _open(self) -> None:
        import torch

        from astra_grpo.chat import chat_renderer
        from astra_grpo.engines import make_engine
        from astra_grpo.grpo import rollout_settings
        from astra_grpo.rollout import EpisodeRunner
        from astra_grpo.runtime import load_policy
        from astra_grpo.users import make_user_simulator

        config = self.config
        torch.manual_seed(config.seed)
        model, tokenizer = load_policy(config)
        self._renderer = chat_renderer(tokenizer, config, model)
        engine = make_engine(config, model, tokenizer, self._renderer)
        self._environments.pool("code")  # warm before the first batch (a sandbox that cannot start stops the stage)
        self._user = make_user_simulator(config, None)
        self._runner = EpisodeRunner(engine, self._renderer, self._environments, rollout_settings(config),
                                     self._reward_fn, user_simulator=self._user)

    def check(self, record: dict) -> None:
        """RecordError unless the sample can be played: its content, its OpenEnv server (astra_grpo.openenv_sessions
        .OpenEnvPool.check) and a prompt within max_prompt_length."""
        from astra_grpo.data import check_rl_sample

        check_rl_sample(record, self.config.reward)
        self._environments.check(record)  # e.g. its OpenEnv server answers, with its tools (before a model loads)
        if self._runner is None:
            self._load()
        length = len(self._renderer.prompt_ids(record["messages"], record["tools"]))
        if length > self.config.max_prompt_length:
            raise RecordError(f"prompt longer than max_prompt_length: {length} > {self.config.max_prompt_length} "
                              "tokens", record_id=record.get("id"))

    def play(self, records: list[dict], episodes: int) -> list[list[dict]]:
        """The `rollout` records of `episodes` episodes of each sample (checked first)."""
        from astra_grpo.rollout import rollout_record

        if self._runner is None:
            self._load()
        groups = self._runner.play(records, episodes)
        config = self.config
        for group in groups:
            self._count(group.episodes)
        return [[rollout_record(group, e, command=COMMAND, model=config.model, seed=config.seed)
                 for e in group.episodes] for group in groups]

    def _count(self, episodes) -> None:
        for episode in episodes:
            self.rewards.append(episode.reward)
            self.turns.append(episode.turns)
            self.calls += episode.tool_calls
            self.malformed += episode.malformed_calls
            self.errors += episode.finish_reason == "error"

    def stats(self) -> dict[str, Any]:
        if not self.rewards:
            return {}
        return {"episodes": len(self.rewards), "reward mean": round(statistics.fmean(self.rewards), 4),
                "turns mean": round(statistics.fmean(self.turns), 2),
                "well-formed tool calls": f"{self.calls - self.malformed}/{self.calls}",
                "replies read as": self._renderer.reader,
                "re-tokenization mismatches": self._runner.retokenize_mismatches,
                "episodes ended in an error": self.errors}

    def close(self) -> None:
        self._environments.close()
        if self._user is not None:
            self._user.close()
            self._user = None


def play_samples(records: list[dict], config: RolloutConfig, player: Player,
                 stage: Stage | None = None) -> list[list[dict] | Exception]:
    """Play episodes of `rl_sample` records with a checkpoint: one `rollout` record per episode.

    Returns, per sample, its `config.episodes` rollout records, or the exception that rejects it (malformed,
    or the error that stopped its batch)."""
    results: list[list[dict] | Exception] = [[] for _ in records]
    playable = []
    for index, record in enumerate(records):
        try:
            player.check(record)
        except RecordError as exc:
            results[index] = Malformed(exc.message, field=exc.field)  # a sample it cannot play: bad input
        else:
            playable.append(index)
    if playable:
        try:
            played = player.play([records[i] for i in playable], config.episodes)
        except LLMUnavailable:
            raise  # the user simulator's endpoint does not answer: the stage stops (--resume goes on)
        except Exception as exc:  # noqa: BLE001 - the batch's samples are rejected with the reason
            played = [exc] * len(playable)
        for index, outputs in zip(playable, played, strict=True):
            results[index] = outputs
    if stage is not None:
        stage.stats.update(player.stats())
    return results
