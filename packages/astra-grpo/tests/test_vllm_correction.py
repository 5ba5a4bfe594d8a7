"""Truncated importance sampling for the rollout/trainer mismatch (engines/correction.py)."""

import math

import pytest
import torch
from astra_grpo.engines import correction
from astra_grpo.loss import objective_share, policy_terms

NAN = math.nan


def test_weights_are_the_capped_ratio_on_generated_tokens_only():
    old = torch.tensor([[0.0, -1.0, -1.0, -2.0, -0.5]])
    sampler = torch.tensor([[NAN, -1.5, -0.2, -4.0, NAN]])  # prompt token, three generated, one NaN from vLLM
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0, 1.0]])
    weights = correction.truncated_is_weights(old, sampler, mask, cap=2.0)
    expected = torch.tensor([[1.0, math.exp(0.5), math.exp(-0.8), 2.0, 0.0]])  # exp(2) capped at 2; NaN -> 0
    torch.testing.assert_close(weights, expected)
    assert not weights.requires_grad


def test_the_weights_do_not_carry_the_gradient():
    old = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    weights = correction.truncated_is_weights(old, torch.tensor([[-1.2, -0.7]]), torch.ones(1, 2), cap=2.0)
    assert weights.grad_fn is None


def test_weighted_loss_scales_each_tokens_share_of_the_objective():
    logprobs = torch.tensor([[-1.0, -0.5, -2.0]], requires_grad=True)
    advantages = torch.tensor([1.0])
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    terms = policy_terms(logprobs, logprobs.detach(), advantages, eps_low=0.2, eps_high=0.2)
    sampler = torch.tensor([[NAN, -0.5 - math.log(1.5), -2.0]])  # the sampler liked token 1 less: weight 1.5
    weights = correction.truncated_is_weights(logprobs, sampler, mask, cap=2.0)
    share = objective_share(correction.weighted_loss(terms.loss, weights), mask, "token", 2.0, 1.0)
    share.backward()
    # on-policy ratio 1: d(-ratio * A)/d logp = -A, times each token's weight, over the 2 tokens
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, -1.5 / 2, -1.0 / 2]]))


def test_sampler_log_probs_stay_aligned_with_the_episode_tokens():
    aligned: list[float] = []
    correction.extend(aligned, None, 3)           # prompt: no sampler log-prob
    correction.extend(aligned, [-0.1, -0.2], 2)   # a generated turn
    correction.extend(aligned, None, 1)           # an observation
    padded = correction.pad([aligned, [-0.3]], width=7)
    assert padded.shape == (2, 7)
    assert torch.isnan(padded[0, :3]).all() and padded[0, 3:5].tolist() == [torch.tensor(-0.1).item(),
                                                                            torch.tensor(-0.2).item()]
    assert torch.isnan(padded[0, 5:]).all() and torch.isnan(padded[1, 1:]).all()


def test_mismatch_metrics_count_capped_tokens_and_the_kl():
    old = torch.tensor([[-1.0, -1.0, -1.0]])
    sampler = torch.tensor([[-1.0, -3.0, NAN]])
    sums = correction.mismatch_sums(old, sampler, torch.ones(1, 3), cap=2.0)
    assert sums["is/tokens"] == 2 and sums["is/capped"] == 1
    assert math.isclose(sums["is/weight"], 1.0 + 2.0, rel_tol=1e-6)
    assert math.isclose(sums["is/k3_kl"], (math.exp(2) - 2 - 1), rel_tol=1e-5)  # 0 for the matching token


# -- wired into rollouts and the update ------------------------------------------------------------

CAPITAL = '<tool_call>\n{"name": "get_capital", "arguments": {"country": "Norway"}}\n</tool_call>'


class WithLogprobs:
    """A scripted engine that also reports a sampler log-prob per generated token, as the vLLM engine does."""

    def __init__(self, inner):
        self.inner = inner

    def generate(self, prompts, budgets, sampling, keys=None):
        generations = self.inner.generate(prompts, budgets, sampling)
        for generation in generations:
            generation.logprobs = [-0.01 * (k + 1) for k in range(len(generation.token_ids))]
        return generations


def test_episodes_keep_the_sampler_log_probs_aligned_with_their_tokens(sandbox):
    from astra_grpo.chat import ChatRenderer
    from astra_grpo.rollout import EpisodeRunner, RolloutSettings
    from grpo_support import ScriptedEngine, assistant_turns, load_tokenizer, rl_sample

    tokenizer = load_tokenizer()
    renderer = ChatRenderer(tokenizer)
    replies = (CAPITAL, "Oslo.")
    engine = WithLogprobs(ScriptedEngine(tokenizer, lambda p: replies[min(assistant_turns(p), 1)], renderer.stop_ids[0]))
    runner = EpisodeRunner(engine, renderer, sandbox, RolloutSettings(), reward_fn=lambda e: (0.0, {}))
    [group] = runner.play([rl_sample()], group_size=1)
    [episode] = group.episodes
    assert episode.turns == 2 and len(episode.sampler_logprobs) == len(episode.token_ids)  # ends on a generation
    values = torch.tensor(episode.sampler_logprobs)
    generated = torch.tensor(episode.loss_mask, dtype=torch.bool)
    assert torch.isnan(values[~generated]).all() and not torch.isnan(values[generated]).any()
    turn_starts = [i for i in range(len(generated)) if generated[i] and not generated[i - 1]]
    assert len(turn_starts) == 2 and all(values[i].item() == pytest.approx(-0.01) for i in turn_starts)


def groups_with_sampler_logprobs(model, shift: float):
    """synthetic groups whose generated tokens were 'sampled' with log-probs = the trainer's - shift."""
    from grpo_support import reference_token_logprobs, synthetic_groups

    groups = synthetic_groups(3, 4, 256, seed=1)
    for group in groups:
        for episode in group.episodes:
            with torch.no_grad():
                trainer = [0.0] + [lp.item() for lp in reference_token_logprobs(model, episode.token_ids)]
            episode.sampler_logprobs = [lp - shift if m else NAN for lp, m in zip(trainer, episode.loss_mask,
                                                                                    strict=True)]
    return groups


@pytest.mark.parametrize(("shift", "factor"), [(0.0, 1.0), (math.log(1.5), 1.5), (-math.log(2.0), 0.5), (5.0, 2.0)],
                         ids=["matching", "sampler-less-likely", "sampler-more-likely", "capped"])
def test_the_update_is_scaled_by_the_importance_weight(shift, factor, fresh_accelerate_state):
    """On-policy, every token's weight is min(exp(shift), 2): the whole update scales by it against the
    update without correction (the transformers engine)."""
    from grpo_support import flat_params
    from test_objective import grpo_config, run_update, small_model

    before = flat_params(small_model())
    _, plain = run_update(grpo_config(engine="transformers"), small_model(), groups_with_sampler_logprobs(
        small_model(), shift), lr=1.0)
    metrics, corrected = run_update(grpo_config(engine="vllm", vllm_importance_sampling_cap=2.0), small_model(),
                                    groups_with_sampler_logprobs(small_model(), shift), lr=1.0)
    plain_step = before - flat_params(plain)
    assert plain_step.abs().max() > 1e-4
    torch.testing.assert_close(before - flat_params(corrected), factor * plain_step, rtol=2e-3, atol=1e-7)
    assert metrics["is/weight_mean"] == pytest.approx(factor, rel=1e-3)
    assert metrics["is/capped_fraction"] == (1.0 if factor == 2.0 else 0.0)
    assert "is/weight_mean" not in run_update(grpo_config(engine="vllm", vllm_importance_sampling=False),
                                              small_model(), groups_with_sampler_logprobs(small_model(), shift),
                                              lr=1.0)[0]
