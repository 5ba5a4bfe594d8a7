"""Truncated importance sampling for the rollout/trainer mismatch (engines/correction.py)."""

import math

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
