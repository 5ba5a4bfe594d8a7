"""One bad episode never ends a run: a chat template that cannot render a turn, a tool or session that
crashes, a user simulator or reward that raises, a reward that is not finite, and a micro-batch with no
trainable token. Policies are scripted and environments in-process (recorded outputs); the renderer,
the EpisodeRunner, the advantages and the trainer's update are the real ones."""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import torch
from astra_grpo.abf import is_valid
from astra_grpo.chat import ChatRenderer
from astra_grpo.config import GRPOConfig, load_config
from astra_grpo.grpo import _update
from astra_grpo.loss import objective_share
from astra_grpo.rollout import EpisodeRunner, Group, RolloutSettings, rollout_record
from astra_grpo.runtime import make_accelerator
from dp_worker import VOCAB, small_model
from grpo_support import (
    ScriptedEngine,
    assistant_turns,
    flat_params,
    load_tokenizer,
    rl_sample,
    synthetic_groups,
)

CAPITAL = '<tool_call>\n{"name": "get_capital", "arguments": {"country": "Norway"}}\n</tool_call>'


@dataclass
class Result:
    kind: str
    output: str


class Environment:
    """In-process sessions: tool calls in an environment whose code says CRASH raise; `broken_open` makes
    opening a session fail."""

    def __init__(self, broken_open: bool = False):
        self.broken_open = broken_open

    @contextmanager
    def session(self, code, requirements=()):
        if self.broken_open:
            raise OSError("the jail could not start")
        yield Session(crashes="CRASH" in code)


@dataclass
class Session:
    crashes: bool

    def call(self, name, arguments):
        if self.crashes:
            raise RuntimeError("the sandbox worker died")
        return Result("ok", json.dumps({"capital": "Oslo"}))

    def state(self):
        return {}


def play(samples, *, environment=None, reward_fn=None, template=None, user_simulator=None, replies=(CAPITAL, "Oslo.")):
    tokenizer = load_tokenizer(template)
    renderer = ChatRenderer(tokenizer)
    engine = ScriptedEngine(tokenizer, lambda prompt: replies[min(assistant_turns(prompt), len(replies) - 1)],
                            renderer.stop_ids[0])
    runner = EpisodeRunner(engine, renderer, environment or Environment(), RolloutSettings(max_turns=4, max_new_tokens=64),
                           reward_fn=reward_fn or (lambda episode: (1.0, {})), user_simulator=user_simulator)
    return runner.play(samples, group_size=2)


def test_a_crashing_tool_ends_its_episode_with_the_error_and_others_play_on():
    crashing = rl_sample("crash", code="CRASH = True")
    failed, fine = play([crashing, rl_sample("fine")], reward_fn=lambda e: (float(e.member), {}))
    assert [e.finish_reason for e in fine.episodes] == ["no_tool_call"] * 2 and is_valid(fine, 1e-6)
    assert all(e.finish_reason == "error" and "the sandbox worker died" in e.error for e in failed.episodes)
    assert failed.failed and not is_valid(failed, 1e-6)
    assert all(e.reward == 0.0 for e in failed.episodes)
    record = rollout_record(failed, failed.episodes[0], command="test")
    assert record["finish_reason"] == "error" and "RuntimeError" in record["error"]


def test_a_session_that_cannot_open_is_an_episode_error():
    [group] = play([rl_sample()], environment=Environment(broken_open=True))
    assert all(e.finish_reason == "error" and "could not start" in e.error for e in group.episodes)


def test_a_template_that_cannot_render_an_observation_is_an_episode_error():
    refuses_tools = ("{% for m in messages %}{% if m.role == 'user' and 'tool_response' in m.content %}"
                     "{{ raise_exception('no tool results here') }}{% endif %}<|im_start|>{{ m.role }}\n"
                     "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                     "{% endif %}")
    [group] = play([rl_sample()], template=refuses_tools)
    for episode in group.episodes:
        assert episode.finish_reason == "error" and "no tool results here" in episode.error
        assert episode.turns == 1 and sum(episode.loss_mask) > 0  # the generated turn is kept


@pytest.mark.parametrize("reward", [float("nan"), float("inf"), -float("inf"), "raises"])
def test_a_reward_that_raises_or_is_not_finite_is_an_episode_error(reward):
    def reward_fn(episode):
        if reward == "raises":
            raise ZeroDivisionError("no expected calls")
        return (reward if episode.member == 0 else 1.0), {}

    [group] = play([rl_sample()], reward_fn=reward_fn)
    first = group.episodes[0]
    assert first.finish_reason == "error" and first.reward == 0.0 and math.isfinite(first.reward)
    assert ("ZeroDivisionError" if reward == "raises" else "not a finite number") in first.error
    assert not is_valid(group, 0.0)


def test_a_user_simulator_that_fails_is_an_episode_error():
    class Down:
        def reply(self, user, messages, act=None):
            raise ConnectionError("user simulator endpoint refused")

    sample = {**rl_sample(), "user": {"instruction": "Ask about Oslo."}}
    [group] = play([sample], replies=("Which country?",), user_simulator=Down())
    assert all(e.finish_reason == "error" and "refused" in e.error for e in group.episodes)


# -- the update ----------------------------------------------------------------------------------------

def test_an_all_masked_micro_batch_contributes_zero_not_nan():
    per_token = torch.tensor([[float("nan"), float("inf"), 1.0]], requires_grad=True)
    mask = torch.zeros(1, 3)
    for mode in ("token", "sequence"):
        share = objective_share(per_token, mask, mode, total_tokens=0.0, total_sequences=1.0)
        share.backward()
        assert share.item() == 0.0 and torch.equal(per_token.grad, torch.zeros(1, 3))
        per_token.grad = None


@pytest.mark.parametrize("mode", ["token", "sequence"])
def test_an_update_over_a_batch_with_failed_and_masked_groups_stays_finite(mode, fresh_accelerate_state):
    groups = synthetic_groups(2, 4, VOCAB, seed=7)
    for episode in groups[0].episodes:  # a group whose episodes generated nothing (all masked) and failed
        episode.loss_mask = [0] * len(episode.loss_mask)
        episode.finish_reason = "error"
        episode.reward = 0.0
    config = load_config(GRPOConfig, None, dict(group_size=4, batch_size=2, mini_batch_size=2, micro_batch_size=4,
                                                max_grad_norm=0.0, report_to=[], loss_average=mode))
    model = small_model()
    before = flat_params(model)
    accelerator = make_accelerator(config, config.accumulation_steps(1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    metrics = _update(config, accelerator, prepared, None, optimizer, scheduler, groups, 0, 1, 0,
                      config.accumulation_steps(1))
    after = flat_params(accelerator.unwrap_model(prepared))
    assert math.isfinite(metrics["loss"]) and torch.isfinite(after).all()
    assert not torch.equal(before, after)  # the healthy group still trains
    assert isinstance(groups[0], Group) and groups[0].failed
