"""The decoupled objective of asynchronous GRPO (AReaL's decoupled PPO, engines/correction.py): the clip around
the proximal policy (the trainer's weights when the update starts), the behaviour policy that sampled the tokens
as a truncated importance weight. Checked against a per-token loop, and against today's loss when the behaviour
policy is the proximal one."""

import math
import random

import pytest
import torch
from astra_grpo.engines import correction
from astra_grpo.loss import objective_share, policy_terms
from grpo_support import flat_params, reference_advantages, reference_token_logprobs, synthetic_groups
from test_objective import VOCAB, grpo_config, run_update, small_model

NAN = math.nan


def stale_groups(model, seed: int):
    """Synthetic groups whose generated tokens were sampled by an older policy: behaviour log-probs = the
    trainer's + a drawn per-token shift (some far enough for the cap to bite)."""
    rng = random.Random(seed)
    groups = synthetic_groups(3, 4, VOCAB, seed=seed)
    for group in groups:
        for episode in group.episodes:
            with torch.no_grad():
                trainer = [0.0] + [lp.item() for lp in reference_token_logprobs(model, episode.token_ids)]
            episode.sampler_logprobs = [lp + rng.choice([-2.0, -0.3, 0.0, 0.2, 1.0]) if m else NAN
                                        for lp, m in zip(trainer, episode.loss_mask, strict=True)]
    return groups


def reference_decoupled_updates(model, groups, *, cap: float, iterations: int, eps: float = 0.2) -> torch.Tensor:
    """SGD (lr 1) on the decoupled loss written token by token:
    -min(C, pi_prox / pi_behav) * min(r A, clip(r) A), r = pi_theta / pi_prox, averaged over the batch's tokens."""
    episodes = [e for g in groups for e in g.episodes]
    advantages = reference_advantages([e.reward for e in episodes], len(groups[0].episodes))
    with torch.no_grad():
        proximal = [reference_token_logprobs(model, e.token_ids) for e in episodes]
    sgd = torch.optim.SGD(model.parameters(), lr=1.0)
    for _ in range(iterations):
        sgd.zero_grad()
        total, count = torch.zeros(()), 0
        for index, episode in enumerate(episodes):
            logprobs = reference_token_logprobs(model, episode.token_ids)
            for t in range(1, len(episode.token_ids)):
                if not episode.loss_mask[t]:
                    continue
                ratio = torch.exp(logprobs[t - 1] - proximal[index][t - 1])
                behaviour = min(cap, math.exp(proximal[index][t - 1].item() - episode.sampler_logprobs[t]))
                a = advantages[index]
                total = total - behaviour * torch.minimum(ratio * a, torch.clamp(ratio, 1 - eps, 1 + eps) * a)
                count += 1
        (total / count).backward()
        sgd.step()
    return flat_params(model)


@pytest.mark.parametrize("iterations", [1, 3], ids=["on-proximal", "three-passes"])
def test_the_asynchronous_update_is_the_decoupled_loss_of_a_per_token_loop(iterations, fresh_accelerate_state):
    metrics, trained = run_update(grpo_config(max_staleness=2, behaviour_weight_cap=1.5, num_iterations=iterations,
                                              micro_batch_size=12), small_model(), stale_groups(small_model(), 3),
                                  lr=1.0)
    expected = reference_decoupled_updates(small_model(), stale_groups(small_model(), 3), cap=1.5,
                                           iterations=iterations)
    before = flat_params(small_model())
    assert (before - expected).abs().max() > 1e-4
    torch.testing.assert_close(flat_params(trained), expected, rtol=1e-4, atol=1e-6)
    assert 0 < metrics["is/capped_fraction"] < 1  # the cap bit on some tokens, not all


def test_with_the_behaviour_policy_equal_to_the_proximal_the_loss_is_todays_exactly():
    torch.manual_seed(0)
    logprobs = torch.randn(3, 7, requires_grad=True)
    proximal = (logprobs + 0.1 * torch.randn(3, 7)).detach()
    mask = (torch.rand(3, 7) > 0.3).float()
    advantages = torch.tensor([1.0, -0.5, 0.25])
    terms = policy_terms(logprobs, proximal, advantages, eps_low=0.2, eps_high=0.28)
    today = objective_share(terms.loss, mask, "token", float(mask.sum()), 3)
    behaviour = torch.where(mask > 0, proximal, torch.full_like(proximal, NAN))
    weights = correction.truncated_is_weights(proximal, behaviour, mask, cap=2.0)
    decoupled = objective_share(correction.weighted_loss(terms.loss, weights), mask, "token", float(mask.sum()), 3)
    assert torch.equal(weights, torch.ones_like(weights))
    assert torch.equal(decoupled, today)
    (grad_today,) = torch.autograd.grad(today, logprobs, retain_graph=True)
    (grad_decoupled,) = torch.autograd.grad(decoupled, logprobs)
    assert torch.equal(grad_today, grad_decoupled)


def test_the_objective_is_decoupled_exactly_when_the_run_is_asynchronous():
    sync, asynchronous = grpo_config(), grpo_config(max_staleness=1, behaviour_weight_cap=3.0)
    assert not correction.enabled(sync) and correction.enabled(asynchronous)
    assert correction.cap(asynchronous) == 3.0
    vllm = grpo_config(engine="vllm", vllm_importance_sampling_cap=2.5)
    assert correction.enabled(vllm) and correction.cap(vllm) == 2.5
