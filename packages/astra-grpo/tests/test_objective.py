"""The GRPO and SFT objectives of the trainers against plain per-token reference loops (grpo_support),
in one process: loss values and gradients (read off one SGD step with lr 1), both averaging modes,
gradient accumulation over micro-batches, mini-batches, several passes with old log-probs, clipping, KL."""

import copy

import astra_grpo.logprobs
import pytest
import torch
from astra_grpo.config import GRPOConfig, load_config
from astra_grpo.grpo import _update
from astra_grpo.logprobs import collate, token_logprobs
from astra_grpo.loss import group_advantages
from astra_grpo.runtime import make_accelerator
from grpo_support import (
    flat_params,
    reference_advantages,
    reference_grpo_loss,
    reference_sft_loss,
    reference_token_logprobs,
    synthetic_groups,
    tiny_model,
)

VOCAB = 256


def small_model(seed=0):
    return tiny_model("llama", seed=seed, vocab_size=VOCAB, hidden=32)


def run_update(config: GRPOConfig, model, groups, lr: float, reference=None):
    """The trainer's update on `groups` with plain SGD; returns (metrics, model)."""
    accumulation = config.accumulation_steps(1)
    accelerator = make_accelerator(config, accumulation)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    metrics = _update(config, accelerator, prepared, reference, optimizer, scheduler, groups, 0, 1, 0, accumulation)
    return metrics, accelerator.unwrap_model(prepared)


def grpo_config(**overrides):
    base = dict(group_size=4, batch_size=3, mini_batch_size=3, micro_batch_size=2, max_grad_norm=0.0,
                report_to=[], learning_rate=1.0)
    base.update(overrides)
    return load_config(GRPOConfig, None, base)


# "all-positions" is what transformers before 5.21 gets (vllm 0.33 pins it below 5.21): no boolean logits_to_keep
@pytest.mark.parametrize("logits_kept", ["installed", "all-positions"])
def test_token_logprobs_match_a_per_position_softmax_with_padding(logits_kept, monkeypatch):
    if logits_kept == "all-positions":
        monkeypatch.setattr(astra_grpo.logprobs, "_keeps_boolean_masks", lambda: False)
    model = small_model()
    sequences = [[5, 9, 17, 3, 44, 7], [8, 2, 100], [4, 4, 4, 4, 4, 4, 4, 4, 9]]
    masks = [[0, 0, 1, 1, 0, 1], [0, 1, 1], [0, 0, 0, 1, 1, 1, 0, 0, 1]]
    batch = collate(sequences, masks, pad_id=0)
    logprobs, entropies = token_logprobs(model, batch, temperature=0.7, with_entropy=True)
    for row, (ids, mask) in enumerate(zip(sequences, masks, strict=True)):
        expected = reference_token_logprobs(model, ids, temperature=0.7)
        for t in range(1, len(ids)):
            value = logprobs[row, t].item()
            assert value == pytest.approx(expected[t - 1].item(), abs=1e-5) if mask[t] else value == 0.0
        assert entropies[row, len(ids):].abs().sum() == 0
    assert (entropies[batch.loss_mask > 0] > 0).all()


def test_group_advantages_are_group_relative():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2, 0.2, 0.2, 0.2])
    expected = reference_advantages(rewards.tolist(), 4)
    assert group_advantages(rewards, 4).tolist() == pytest.approx(expected, abs=1e-6)
    assert group_advantages(rewards, 4)[4:].abs().max() == 0  # a zero-variance group teaches nothing
    unscaled = group_advantages(rewards, 4, scale="none")
    assert unscaled[:4].tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])
    by_batch = group_advantages(rewards, 4, scale="batch")
    spread = torch.tensor([1.0, 0.0, 0.5, 0.5], dtype=torch.float64).std()  # the only group with a signal
    assert by_batch[:4].tolist() == pytest.approx((unscaled[:4] / (spread + 1e-6)).tolist())


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("value", [0.1, 1 / 3, 0.7, 0.123456789, 2.0 / 7.0])
def test_equal_rewards_give_exactly_zero_advantages(scale, value):
    """Repeated F1 values are not exactly representable; float32 means gave |A| up to 0.1 for them."""
    rewards = torch.tensor([value] * 8 + [0.0, 1.0, 0.0, 1.0])
    advantages = group_advantages(rewards, 4, scale=scale)
    assert advantages.dtype == torch.float64
    assert advantages[:8].tolist() == [0.0] * 8
    assert advantages[8:].abs().min() > 0


def test_non_finite_or_failed_groups_get_zero_advantages_not_nan():
    rewards = torch.tensor([1.0, float("nan"), 0.0, 0.5, 1.0, 0.0, 1.0, 0.0, float("inf"), 0.0, 1.0, 0.0,
                            1.0, 0.0, 0.0, 0.0])
    valid = torch.tensor([True, True, True, False])
    for scale in ("group", "batch", "none"):
        advantages = group_advantages(rewards, 4, scale=scale, valid=valid)
        assert torch.isfinite(advantages).all()
        assert advantages[:4].tolist() == [0.0] * 4 and advantages[8:].tolist() == [0.0] * 8
        assert advantages[4:8].abs().min() > 0


@pytest.mark.parametrize("mode", ["token", "sequence"])
def test_on_policy_update_gradient_equals_reference(mode, fresh_accelerate_state):
    groups = synthetic_groups(3, 4, VOCAB, seed=1)
    episodes = [e for g in groups for e in g.episodes]
    advantages = reference_advantages([e.reward for e in episodes], 4)

    reference_model = small_model()
    old = [[lp.detach() for lp in reference_token_logprobs(reference_model, e.token_ids)] for e in episodes]
    loss = reference_grpo_loss(reference_model, episodes, advantages, old, mode=mode, eps_low=0.2, eps_high=0.2)
    loss.backward()
    expected_grad = torch.cat([p.grad.reshape(-1) for p in reference_model.parameters()])

    model = small_model()
    before = flat_params(model)
    # 12 sequences in micro-batches of 2: six accumulation steps for one update.
    metrics, trained = run_update(grpo_config(loss_average=mode), model, groups, lr=1.0)
    torch.testing.assert_close(before - flat_params(trained), expected_grad, rtol=1e-4, atol=1e-7)
    assert metrics["loss"] == pytest.approx(loss.item(), abs=1e-6)
    assert metrics["ratio_mean"] == pytest.approx(1.0)
    assert expected_grad.abs().max() > 1e-4  # the comparison is not between zeros


def test_accumulation_does_not_change_the_gradient(fresh_accelerate_state):
    groups = synthetic_groups(2, 4, VOCAB, seed=2)
    deltas = []
    for micro in (1, 2, 8):  # 8, 4 and 1 accumulation steps
        model = small_model()
        before = flat_params(model)
        _, trained = run_update(grpo_config(batch_size=2, mini_batch_size=2, micro_batch_size=micro), model,
                                groups, lr=1.0)
        deltas.append(before - flat_params(trained))
    torch.testing.assert_close(deltas[0], deltas[1], rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(deltas[0], deltas[2], rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("mode", ["token", "sequence"])
def test_mini_batches_and_passes_reuse_old_logprobs_with_clipping_and_kl(mode, fresh_accelerate_state):
    """4 groups, mini-batches of 2, two passes: four SGD updates; ratios leave the clip range."""
    groups = synthetic_groups(4, 4, VOCAB, seed=3)
    episodes = [e for g in groups for e in g.episodes]
    advantages = reference_advantages([e.reward for e in episodes], 4)
    lr, eps_low, eps_high, kl = 1.0, 0.02, 0.05, 0.1

    reference_model = small_model()
    frozen = copy.deepcopy(reference_model)
    with torch.no_grad():
        old = [[lp for lp in reference_token_logprobs(reference_model, e.token_ids)] for e in episodes]
        ref = [[lp for lp in reference_token_logprobs(frozen, e.token_ids)] for e in episodes]
    sgd = torch.optim.SGD(reference_model.parameters(), lr=lr)
    for _pass in range(2):
        for mini in (range(0, 8), range(8, 16)):
            sgd.zero_grad()
            loss = reference_grpo_loss(reference_model, [episodes[i] for i in mini], [advantages[i] for i in mini],
                                       [old[i] for i in mini], mode=mode, eps_low=eps_low, eps_high=eps_high,
                                       ref=[ref[i] for i in mini], kl_coef=kl)
            loss.backward()
            sgd.step()

    model = small_model()
    config = grpo_config(batch_size=4, mini_batch_size=2, micro_batch_size=4, num_iterations=2, loss_average=mode,
                         clip_eps_low=eps_low, clip_eps_high=eps_high, kl_coef=kl)
    metrics, trained = run_update(config, model, groups, lr=lr, reference=copy.deepcopy(model).eval())
    torch.testing.assert_close(flat_params(trained), flat_params(reference_model), rtol=1e-4, atol=1e-6)
    assert metrics["clip_fraction"] > 0  # the clipped branch was exercised
    assert metrics["kl"] > 0


def sequence_logprob(model, episode) -> float:
    with torch.no_grad():
        per_token = reference_token_logprobs(model, episode.token_ids)
    return sum(lp.item() for t, lp in enumerate(per_token, start=1) if episode.loss_mask[t])


def test_an_update_moves_the_policy_toward_the_better_rewarded_episodes(fresh_accelerate_state):
    """The direction, independent of the reference loss above: after one small step the best episode of
    each group is more likely and the worst less likely (a sign error in both would pass the gradient test)."""
    groups = synthetic_groups(3, 4, VOCAB, seed=5)
    model = small_model()
    best = [max(g.episodes, key=lambda e: e.reward) for g in groups]
    worst = [min(g.episodes, key=lambda e: e.reward) for g in groups]
    before = [(sequence_logprob(model, b), sequence_logprob(model, w)) for b, w in zip(best, worst, strict=True)]
    _, trained = run_update(grpo_config(), model, groups, lr=0.05)
    for (b, w), (best_before, worst_before) in zip(zip(best, worst, strict=True), before, strict=True):
        assert sequence_logprob(trained, b) > best_before
        assert sequence_logprob(trained, w) < worst_before


@pytest.mark.parametrize("mode", ["token", "sequence"])
def test_sft_gradient_equals_reference(mode, fresh_accelerate_state):
    from astra_grpo.config import SFTConfig
    from astra_grpo.sft import _update as sft_update

    examples = [([5, 9, 17, 3, 44, 7, 12], [0, 0, 1, 1, 0, 1, 1]), ([8, 2, 100, 4], [0, 1, 1, 1]),
                ([4, 6, 8, 10, 12, 14, 16, 18, 20], [0, 0, 0, 1, 1, 1, 0, 0, 1])]
    reference_model = small_model()
    loss = reference_sft_loss(reference_model, examples, mode)
    loss.backward()
    expected_grad = torch.cat([p.grad.reshape(-1) for p in reference_model.parameters()])

    config = load_config(SFTConfig, None, dict(batch_size=3, micro_batch_size=1, loss_average=mode,
                                               max_grad_norm=0.0, report_to=[]))
    accelerator = make_accelerator(config, 3)
    model = small_model()
    before = flat_params(model)
    prepared, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    metrics = sft_update(config, accelerator, prepared, optimizer, examples, 0, 1, 3)
    torch.testing.assert_close(before - flat_params(model), expected_grad, rtol=1e-4, atol=1e-7)
    assert metrics["loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert metrics["tokens"] == 11


def adamw_after_one_real_step(config: GRPOConfig, seed: int = 0):
    """A model, optimizer and scheduler after one update on groups with reward variance, so that Adam's
    moments are non-zero (a zero gradient then still moves the weights)."""
    model = small_model(seed)
    accumulation = config.accumulation_steps(1)
    accelerator = make_accelerator(config, accumulation)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    prepared, optimizer = accelerator.prepare(model, optimizer)
    _update(config, accelerator, prepared, None, optimizer, scheduler, synthetic_groups(3, 4, VOCAB, seed=1),
            0, 1, 0, accumulation)
    return accelerator, prepared, optimizer, scheduler, accumulation


@pytest.mark.parametrize("passes", [1, 2])
def test_a_batch_without_reward_variance_skips_the_passes_but_not_the_optimizer_steps(
        passes, fresh_accelerate_state, monkeypatch):
    """All advantages 0 (every group's rewards equal): the gradient is exactly zero, so the update skips the
    forward and backward passes; the weights, Adam's state and the learning rate end exactly where the full
    computation leaves them."""
    import astra_grpo.grpo as grpo

    config = grpo_config(num_iterations=passes, mini_batch_size=1, micro_batch_size=4)
    flat = synthetic_groups(3, 4, VOCAB, seed=2)
    for group in flat:
        for episode in group.episodes:
            episode.reward = 0.5
    ends = {}
    for path in ("full", "skipped"):
        if path == "full":
            monkeypatch.setattr(grpo, "_gradient_is_zero", lambda *_: False)
        else:
            monkeypatch.undo()
        accelerator, model, optimizer, scheduler, accumulation = adamw_after_one_real_step(config)
        metrics = grpo._update(config, accelerator, model, None, optimizer, scheduler, flat, 0, 1, 0, accumulation)
        ends[path] = (flat_params(accelerator.unwrap_model(model)), scheduler.get_last_lr()[0], metrics)
    (full, full_lr, full_metrics), (skipped, skipped_lr, skipped_metrics) = ends["full"], ends["skipped"]
    assert full_metrics["update_skipped"] == 0.0 and skipped_metrics["update_skipped"] == 1.0
    assert full_metrics["loss"] == skipped_metrics["loss"] == 0.0
    assert skipped_lr == full_lr
    assert torch.allclose(full, skipped, atol=1e-7, rtol=0)


def test_a_kl_term_keeps_the_full_update_even_without_reward_variance(fresh_accelerate_state):
    flat = synthetic_groups(2, 4, VOCAB)
    for group in flat:
        for episode in group.episodes:
            episode.reward = 1.0
    model = small_model()
    metrics, _ = run_update(grpo_config(batch_size=2, mini_batch_size=2, kl_coef=0.1), model, flat, lr=0.1,
                            reference=copy.deepcopy(model).eval())
    assert metrics["update_skipped"] == 0.0 and metrics["update_tokens"] > 0
