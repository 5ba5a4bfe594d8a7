"""Random GRPO groups for the layout tests (one process: hypothesis draws the shapes; two processes:
test_data_parallel's worker takes fixed shapes), and the update run on them in any layout.

A group's episodes share their prompt, as rollouts of one sample do; some also share their first reply
(a deterministic first turn) or are copies of another episode; replies and observations alternate over
1-`turns` turns. Tokens come from a small alphabet, so sequences also share short runs by chance: the
prefix tree then branches inside replies, not only after the prompt."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass

import torch
from astra_grpo.rollout import Episode, Group

ALPHABET = (3, 12)  # token ids drawn from here
VOCAB = 64


@dataclass(frozen=True)
class Shape:
    groups: int
    group_size: int
    prompt: int           # prompt tokens (the shared prefix of a group)
    turns: int            # at most this many reply/observation turns per episode
    masks: str            # generated (replies trained) | random (any subset of the tokens after the prompt)
    seed: int


def random_groups(shape: Shape) -> list[Group]:
    rng = random.Random(shape.seed)

    def tokens(low: int, high: int) -> list[int]:
        return [rng.randint(*ALPHABET) for _ in range(rng.randint(low, high))]

    groups = []
    for g in range(shape.groups):
        prompt = [rng.randint(*ALPHABET) for _ in range(shape.prompt)]
        first_reply = tokens(1, 5)
        episodes: list[Episode] = []
        for member in range(shape.group_size):
            if episodes and rng.random() < 0.15:  # the same episode twice
                twin = copy.deepcopy(rng.choice(episodes))
                twin.member, twin.reward = member, rng.choice([0.0, 0.25, 0.5, 1.0])
                episodes.append(twin)
                continue
            ids, mask = list(prompt), [0] * len(prompt)
            if rng.random() < 0.4:
                ids, mask = ids + first_reply, mask + [1] * len(first_reply)
            for _turn in range(rng.randint(1, shape.turns)):
                reply, observation = tokens(1, 6), tokens(0, 4)
                ids, mask = ids + reply + observation, mask + [1] * len(reply) + [0] * len(observation)
            if shape.masks == "random":
                mask = [0] * len(prompt) + [rng.randint(0, 1) for _ in ids[len(prompt):]]
            episodes.append(Episode(sample={"id": f"s{g}"}, member=member, messages=[], token_ids=ids, loss_mask=mask,
                                    prompt_length=len(prompt), reward=rng.choice([0.0, 0.25, 0.5, 1.0])))
        groups.append(Group(uid=f"s{g}@{g}", sample_id=f"s{g}", episodes=episodes))
    return groups


def layout_model(seed: int = 0):
    """A tiny random-init Qwen3 (GQA: 4 heads, 2 key/value heads)."""
    from grpo_support import tiny_model

    return tiny_model("qwen", seed=seed, vocab_size=VOCAB, hidden=32)


def run_grpo_update(groups: list[Group], overrides: dict, world: int = 1, rank: int = 0, reference=None):
    """The trainer's GRPO update (plain SGD, lr 1: the parameter change is the gradient) on `groups` with
    config `overrides`; (metrics, parameters after) from a fresh model."""
    from astra_grpo.config import GRPOConfig, load_config
    from astra_grpo.grpo import _update
    from astra_grpo.runtime import make_accelerator
    from grpo_support import flat_params

    values = dict(group_size=len(groups[0].episodes), batch_size=len(groups), mini_batch_size=len(groups),
                  micro_batch_size=1, max_grad_norm=0.0, report_to=[], learning_rate=1.0)
    config = load_config(GRPOConfig, None, {**values, **overrides})
    accumulation = config.accumulation_steps(world)
    accelerator = make_accelerator(config, accumulation)
    model = layout_model()
    frozen = copy.deepcopy(model).eval() if config.kl_coef > 0 else None
    prepared, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    metrics = _update(config, accelerator, prepared, frozen, optimizer, scheduler, groups, 0, world, rank, accumulation)
    return metrics, flat_params(accelerator.unwrap_model(prepared))


def run_sft_update(examples: list[tuple[list[int], list[int]]], overrides: dict, world: int = 1, rank: int = 0):
    """The SFT trainer's update on this process's `examples` (the global batch is `world` times as many)."""
    from astra_grpo.config import SFTConfig, load_config
    from astra_grpo.runtime import make_accelerator
    from astra_grpo.sft import _update
    from grpo_support import flat_params

    config = load_config(SFTConfig, None, {**dict(batch_size=len(examples) * world, micro_batch_size=1,
                                                  max_grad_norm=0.0, report_to=[]), **overrides})
    accumulation = len(examples) // config.micro_batch_size
    accelerator = make_accelerator(config, accumulation)
    model = layout_model()
    prepared, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    metrics = _update(config, accelerator, prepared, optimizer, examples, 0, world, accumulation)
    return metrics, flat_params(accelerator.unwrap_model(prepared))


def sft_examples(groups: list[Group]) -> list[tuple[list[int], list[int]]]:
    """Every episode as an SFT example (those without a loss token dropped, as `build_examples` does)."""
    return [(e.token_ids, e.loss_mask) for g in groups for e in g.episodes if any(e.loss_mask[1:])]
