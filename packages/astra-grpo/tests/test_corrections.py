"""The rollout-correction family (engines/correction.py): importance weights pi_trainer_old / pi_sampler at token,
sequence and geometric level, truncated or masked, against per-token reference loops written from the formulas:
TRL 1.16's `vllm_importance_sampling_mode` token_truncate / token_mask / sequence_truncate / sequence_mask (its
weights are computed inline in `_generate_and_score_completions`, which cannot be called on its own, so the
reference is its formula: exp of the masked log-ratio, summed over the sequence for sequence_*, clamped to or
masked outside [min, max]), verl's geometric-mean weights and IcePop (a token mask on [0.5, 2])."""

import math

import pytest
import torch
from astra_grpo.engines import correction
from astra_grpo.engines.correction import Correction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def reference_weights(old, sampler, mask, level, mode, low, cap):
    """One weight per token, by plain loops (no NaN here: every masked token was sampled)."""
    rows, cols = old.shape
    out = torch.ones(rows, cols, dtype=torch.float64)
    for b in range(rows):
        diffs = [float(old[b, t] - sampler[b, t]) for t in range(cols) if mask[b, t] > 0]
        for t in range(cols):
            if mask[b, t] == 0:
                continue
            if level == "token":
                log_w = float(old[b, t] - sampler[b, t])
            elif level == "sequence":
                log_w = sum(diffs)
            else:
                log_w = sum(diffs) / len(diffs)
            w = math.exp(log_w)
            if mode == "truncate":
                w = min(max(w, low), cap)
            elif w < low or w > cap:
                w = 0.0
            out[b, t] = w
    return out


@st.composite
def batches(draw):
    rows, cols = draw(st.integers(1, 4)), draw(st.integers(1, 8))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    old = -torch.rand(rows, cols, generator=generator, dtype=torch.float64) * 2
    sampler = old + torch.randn(rows, cols, generator=generator, dtype=torch.float64) * draw(
        st.sampled_from([0.05, 0.4, 1.5]))
    mask = (torch.rand(rows, cols, generator=generator) > draw(st.sampled_from([0.0, 0.5]))).double()
    return old, sampler, mask


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=batches(), level=st.sampled_from(["token", "sequence", "geometric"]),
       mode=st.sampled_from(["truncate", "mask"]), bounds=st.sampled_from([(0.0, 2.0), (0.5, 2.0), (0.8, 1.25)]))
def test_weights_equal_the_reference_formulas(data, level, mode, bounds):
    old, sampler, mask = data
    low, cap = bounds
    got = correction.is_weights(old, sampler, mask, Correction(cap=cap, level=level, mode=mode, low=low))
    expected = reference_weights(old, sampler, mask, level, mode, low, cap)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6)
    sums = correction.mismatch_sums(old, sampler, mask, Correction(cap=cap, level=level, mode=mode, low=low))
    assert sums["is/tokens"] == float(mask.sum())
    assert sums["is/weight"] == pytest.approx(float((expected * mask).sum()), rel=1e-5, abs=1e-6)


def test_the_default_is_token_truncation_as_before():
    old = torch.tensor([[-1.0, -0.2, -3.0]])
    sampler = torch.tensor([[-2.0, -0.3, math.nan]])  # the last token was not sampled: weight 0
    mask = torch.ones(1, 3)
    weights = correction.truncated_is_weights(old, sampler, mask, cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0, math.exp(0.1), 0.0]]))
    assert torch.equal(weights, correction.is_weights(old, sampler, mask, Correction(cap=2.0)))


def test_icepop_masks_tokens_far_off_on_either_side():
    old = torch.tensor([[-1.0, -1.0, -1.0]])
    sampler = torch.tensor([[-1.0, -2.0, 0.0]])  # ratios 1, e, 1/e
    weights = correction.is_weights(old, sampler, torch.ones(1, 3), Correction(cap=2.0, mode="mask", low=0.5))
    torch.testing.assert_close(weights, torch.tensor([[1.0, 0.0, 0.0]]))
    sums = correction.mismatch_sums(old, sampler, torch.ones(1, 3), Correction(cap=2.0, mode="mask", low=0.5))
    metrics = correction.step_metrics(sums)
    assert metrics["is/capped_fraction"] == pytest.approx(2 / 3)
    assert metrics["is/weight_mean"] == pytest.approx(1 / 3)
    assert metrics["is/weight_std"] == pytest.approx(math.sqrt(1 / 3 - 1 / 9))


def test_the_trainers_update_takes_the_chosen_correction(fresh_accelerate_state):
    """Through the trainer's update of an asynchronous run (behaviour log-probs off the trainer's): each choice of
    level and mode weights the loss its own way, and the step reports the weights' mean and spread."""
    from layout_support import Shape, random_groups, run_grpo_update

    groups = random_groups(Shape(groups=2, group_size=3, prompt=5, turns=2, masks="generated", seed=5))
    generator = torch.Generator().manual_seed(0)
    for group in groups:
        for episode in group.episodes:
            noise = torch.randn(len(episode.token_ids), generator=generator) * 0.5 - 2.0
            episode.sampler_logprobs = [float(v) if m else math.nan for v, m in zip(noise, episode.loss_mask)]
    common = dict(max_staleness=1, layout="padded", clip_eps_low=0.02, clip_eps_high=0.05)
    results = {}
    for name, knobs in {"token": {}, "sequence": {"importance_correction_level": "sequence"},
                        "geometric": {"importance_correction_level": "geometric"},
                        "icepop": {"importance_correction_mode": "mask", "importance_correction_min": 0.5}}.items():
        metrics, params = run_grpo_update(groups, {**common, **knobs})
        assert 0 <= metrics["is/weight_mean"] <= 2.0 and metrics["is/weight_std"] >= 0, name
        results[name] = (metrics, params)
    for name, (_, params) in results.items():
        if name != "token":
            assert not torch.allclose(params, results["token"][1]), name


def test_bad_correction_knobs_are_refused():
    from astra_core.config import ConfigError
    from astra_grpo.config import GRPOConfig

    with pytest.raises(ConfigError, match="importance_correction_min"):
        GRPOConfig(importance_correction_min=3.0).validate()
    with pytest.raises(ValueError, match="importance_correction_level"):
        correction.is_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), Correction(level="tree"))
