"""Every policy surrogate and loss averaging of `loss.py` against TRL's own loss code.

TRL's `GRPOTrainer._compute_loss` is called as it is (the installed trl, unchanged) on an object that carries only
the attributes it reads, and whose `_get_per_token_logps_and_entropies` hands back the log-probs the test drew:
so both sides see the same log-probs, old log-probs, reference log-probs, advantages and masks. The per-token loss
enters both through the same aggregation, and the gradient with respect to the log-probs is what every model
parameter's gradient is computed from: equal log-prob gradients mean equal parameter gradients.

TRL loss type -> our knobs (one micro-batch, one process, no accumulation):
    dapo / bnpo        clip, token level, loss_average token
    grpo               clip, token level, loss_average sequence
    grpo + sequence    GSPO: clip, importance_sampling_level sequence, loss_average sequence
    dr_grpo            clip, loss_average fixed (max_response_length = TRL's max_completion_length)
    luspo + sequence   clip, importance_sampling_level sequence, loss_average sequence_sum
    cispo              cispo (TRL's epsilon_high caps the ratio itself: ours is 1 + clip_eps_high)
    vespo              vespo, loss_average token
    sapo               sapo, loss_average sequence
    dapo + delta       clip with clip_delta (two-sided clipping)
"""

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from astra_grpo.config import GRPOConfig
from astra_grpo.loss import Objective, high_entropy_masks, objective_share, policy_terms
from hypothesis import given, settings
from hypothesis import strategies as st
from trl.trainer.grpo_trainer import GRPOTrainer

MAX_LENGTH = 12

CASES = {
    # name: (TRL's settings, our Objective fields, our loss_average)
    "dapo": ({"loss_type": "dapo"}, {}, "token"),
    "bnpo": ({"loss_type": "bnpo"}, {}, "token"),
    "grpo": ({"loss_type": "grpo"}, {}, "sequence"),
    "gspo": ({"loss_type": "grpo", "importance_sampling_level": "sequence"},
             {"importance_sampling_level": "sequence"}, "sequence"),
    "dr_grpo": ({"loss_type": "dr_grpo"}, {}, "fixed"),
    "luspo": ({"loss_type": "luspo", "importance_sampling_level": "sequence"},
              {"importance_sampling_level": "sequence"}, "sequence_sum"),
    "cispo": ({"loss_type": "cispo"}, {"loss_type": "cispo"}, "token"),
    "sapo": ({"loss_type": "sapo"}, {"loss_type": "sapo"}, "sequence"),
    "two_sided": ({"loss_type": "dapo", "delta": 1.6}, {"delta": 1.6}, "token"),
    "vespo": ({"loss_type": "vespo"}, {"loss_type": "vespo"}, "token"),
}


class _Reduce:
    """The accelerator calls TRL's metrics make, on one process."""
    num_processes = 1

    def gather(self, x):
        return x

    def gather_for_metrics(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x


def trl_loss(case: str, logprobs, old, ref, advantages, mask, eps_low, eps_high, beta):
    trl_settings, _, _ = CASES[case]
    level = trl_settings.get("importance_sampling_level", "token")
    loss_type = trl_settings["loss_type"]
    trainer = SimpleNamespace(
        loss_type=loss_type, importance_sampling_level=level, beta=beta, epsilon_low=eps_low,
        epsilon_high=(1.0 + eps_high) if loss_type == "cispo" else eps_high,
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, use_vllm=False,
        vllm_importance_sampling_correction=False, current_gradient_accumulation_steps=1,
        max_completion_length=MAX_LENGTH, aux_loss_enabled=False, _entropy_bonus_enabled=False,
        accelerator=_Reduce(), model=SimpleNamespace(training=True), _metrics={"train": defaultdict(list)},
        args=SimpleNamespace(delta=trl_settings.get("delta"), use_bias_correction_kl=False, steps_per_generation=1,
                             sapo_temperature_pos=1.0, sapo_temperature_neg=1.05, vespo_k_pos=2.0,
                             vespo_lambda_pos=3.0, vespo_k_neg=3.0, vespo_lambda_neg=2.0),
        get_gamma_weights=GRPOTrainer.get_gamma_weights,
        _get_per_token_logps_and_entropies=lambda *a, **k: (logprobs, torch.zeros_like(logprobs), None),
    )
    batch, length = logprobs.shape
    inputs = {"prompt_ids": torch.zeros(batch, 1, dtype=torch.long), "prompt_mask": torch.ones(batch, 1),
              "completion_ids": torch.zeros(batch, length, dtype=torch.long), "completion_mask": mask,
              "advantages": advantages, "old_per_token_logps": old, "num_items_in_batch": mask.sum()}
    if beta:
        inputs["ref_per_token_logps"] = ref
    return GRPOTrainer._compute_loss(trainer, None, inputs)


def our_loss(case: str, logprobs, old, ref, advantages, mask, eps_low, eps_high, beta):
    _, fields, average = CASES[case]
    objective = Objective(eps_low=eps_low, eps_high=eps_high, **fields)
    terms = policy_terms(logprobs, old, advantages, objective=objective, mask=mask,
                         ref_logprobs=ref if beta else None, kl_coef=beta)
    return objective_share(terms.loss, mask, average, float(mask.sum()), mask.shape[0], fixed_length=MAX_LENGTH)


@st.composite
def batches(draw):
    batch = draw(st.integers(1, 5))
    length = draw(st.integers(1, MAX_LENGTH))
    seed = draw(st.integers(0, 2**31 - 1))
    generator = torch.Generator().manual_seed(seed)
    logprobs = -torch.rand(batch, length, generator=generator, dtype=torch.float64) * 3
    # Old log-probs near and far from the current ones, so ratios fall inside and outside every clip bound.
    old = logprobs + torch.randn(batch, length, generator=generator, dtype=torch.float64) * draw(
        st.sampled_from([0.05, 0.3, 1.0]))
    ref = logprobs + torch.randn(batch, length, generator=generator, dtype=torch.float64) * 0.2
    advantages = torch.randn(batch, generator=generator, dtype=torch.float64)
    mask = (torch.rand(batch, length, generator=generator) > draw(st.sampled_from([0.0, 0.3, 0.7]))).double()
    mask[:, 0] = 1.0  # every sequence has a loss token (TRL's per-sequence means divide by their count)
    return logprobs, old, ref, advantages, mask


@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=40, deadline=None)
@given(data=batches(), eps=st.sampled_from([(0.2, 0.2), (0.2, 0.28), (0.1, 0.4)]), beta=st.sampled_from([0.0, 0.04]))
def test_loss_and_gradient_equal_trls(case, data, eps, beta):
    logprobs, old, ref, advantages, mask = data
    ours_in = logprobs.clone().requires_grad_(True)
    trl_in = logprobs.clone().requires_grad_(True)
    ours = our_loss(case, ours_in, old, ref, advantages, mask, *eps, beta)
    theirs = trl_loss(case, trl_in, old, ref, advantages, mask, *eps, beta)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours_in.grad * mask, trl_in.grad * mask, rtol=1e-9, atol=1e-12)


def test_default_objective_is_the_clipped_surrogate_as_before():
    """The defaults (clip, token level, no delta) are Eq. 32's clipped surrogate, written out here."""
    generator = torch.Generator().manual_seed(3)
    logprobs = -torch.rand(3, 5, generator=generator)
    old = logprobs + torch.randn(3, 5, generator=generator) * 0.5
    advantages = torch.tensor([1.0, -0.5, 0.2])
    terms = policy_terms(logprobs, old, advantages, eps_low=0.2, eps_high=0.28)
    ratio = torch.exp(logprobs - old)
    expected = -torch.minimum(ratio * advantages[:, None], ratio.clamp(0.8, 1.28) * advantages[:, None])
    assert torch.equal(terms.loss, expected)
    assert GRPOConfig().objective() == Objective(eps_low=0.2, eps_high=0.2)


def test_sequence_ratio_is_one_per_sequence_over_its_loss_tokens():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0]])
    old = torch.tensor([[-1.5, -2.0, 9.0]])  # the last token is masked: its huge log-ratio must not count
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    terms = policy_terms(logprobs, old, torch.tensor([1.0]), objective=Objective(importance_sampling_level="sequence"),
                         mask=mask)
    assert torch.allclose(terms.ratio, torch.full((1, 3), float(torch.exp(torch.tensor(0.25)))))
    with pytest.raises(ValueError, match="needs the loss mask"):
        policy_terms(logprobs, old, torch.tensor([1.0]), objective=Objective(importance_sampling_level="sequence"))


def test_cispo_keeps_a_gradient_where_the_clip_has_none():
    """A token far above the clip with a positive advantage: the clipped surrogate's gradient is 0, CISPO's is not."""
    logprobs = torch.tensor([[-0.1]], requires_grad=True)
    old = torch.tensor([[-2.0]])
    for loss_type, has_gradient in (("clip", False), ("cispo", True)):
        logprobs.grad = None
        terms = policy_terms(logprobs, old, torch.tensor([1.0]), objective=Objective(loss_type=loss_type))
        terms.loss.sum().backward()
        assert (logprobs.grad.abs().item() > 0) is has_gradient
        assert terms.clipped_high.item() == 1.0


def test_bad_objective_knobs_are_refused_naming_the_field():
    from astra_core.config import ConfigError

    with pytest.raises(ConfigError, match="clip_delta"):
        GRPOConfig(clip_delta=1.1).validate()
    with pytest.raises(ConfigError, match="clip_delta"):
        GRPOConfig(clip_delta=2.0, loss_type="sapo").validate()
    with pytest.raises(ConfigError, match="loss_type"):
        GRPOConfig(loss_type="vespo", max_staleness=1).validate()
    with pytest.raises(ConfigError, match="importance_sampling_level"):
        GRPOConfig(loss_type="vespo", importance_sampling_level="sequence").validate()
    with pytest.raises(ValueError, match="loss_type"):
        policy_terms(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), objective=Objective(loss_type="ppo2"))
    with pytest.raises(ValueError, match="loss averaging"):
        objective_share(torch.zeros(1, 1), torch.ones(1, 1), "median", 1.0, 1.0)


def test_the_trainers_update_takes_the_chosen_objective(fresh_accelerate_state):
    """Through the trainer's update: each objective moves the weights its own way (the knobs reach the loss)."""
    from layout_support import Shape, random_groups, run_grpo_update

    groups = random_groups(Shape(groups=2, group_size=3, prompt=5, turns=2, masks="generated", seed=11))
    common = dict(num_iterations=2, clip_eps_low=0.02, clip_eps_high=0.05, max_response_length=64, layout="padded")
    results = {}
    for name, knobs in {"clip": {}, "cispo": {"loss_type": "cispo"}, "sapo": {"loss_type": "sapo"},
                        "vespo": {"loss_type": "vespo"},
                        "gspo": {"importance_sampling_level": "sequence"}, "dr_grpo": {"loss_average": "fixed"}}.items():
        metrics, params = run_grpo_update(groups, {**common, **knobs})
        assert metrics["grad_norm"] > 0, name
        results[name] = params
    for name, params in results.items():
        if name != "clip":
            assert not torch.allclose(params, results["clip"]), name


@settings(max_examples=40, deadline=None)
@given(data=batches(), quantile=st.sampled_from([0.2, 0.5, 0.9]))
def test_high_entropy_tokens_equal_trls_selection(data, quantile):
    """One micro-batch on one process: the tokens chosen equal TRL's `get_high_entropy_mask`."""
    _, _, _, _, mask = data
    # float32, as the trainer's entropies are (TRL compares a float64 entropy with a float32 quantile)
    entropies = torch.rand(mask.shape, generator=torch.Generator().manual_seed(int(mask.sum())))
    trainer = SimpleNamespace(accelerator=SimpleNamespace(pad_across_processes=lambda x, dim, pad_index: x,
                                                          gather=lambda x: x))
    theirs = GRPOTrainer.get_high_entropy_mask(trainer, entropies, mask, 1 - quantile)
    ours = high_entropy_masks([entropies], [mask], quantile)[0]
    assert torch.equal(ours.bool(), theirs)


def test_high_entropy_tokens_are_chosen_over_the_whole_mini_batch():
    """Split into micro-batches the choice is the same as over the whole batch (a threshold for all of them)."""
    generator = torch.Generator().manual_seed(2)
    entropies, mask = torch.rand(6, 7, generator=generator), (torch.rand(6, 7, generator=generator) > 0.3).float()
    whole = high_entropy_masks([entropies], [mask], 0.2)[0]
    parts = high_entropy_masks([entropies[:2], entropies[2:]], [mask[:2], mask[2:]], 0.2)
    assert torch.equal(torch.cat(parts), whole)
    assert 0 < whole.sum() < mask.sum()


def test_the_update_learns_on_high_entropy_tokens_alike_in_every_layout(fresh_accelerate_state):
    from layout_support import Shape, random_groups, run_grpo_update

    groups = random_groups(Shape(groups=2, group_size=3, prompt=5, turns=2, masks="generated", seed=7))
    common = dict(top_entropy_quantile=0.3, clip_eps_low=0.02, clip_eps_high=0.05)
    dense_metrics, dense = run_grpo_update(groups, {**common, "layout": "padded", "micro_batch_size": 3})
    metrics, params = run_grpo_update(groups, {**common, "layout": "tree", "max_tokens_per_microbatch": 40})
    everything, all_tokens = run_grpo_update(groups, {"clip_eps_low": 0.02, "clip_eps_high": 0.05, "layout": "tree"})
    torch.testing.assert_close(params, dense, rtol=1e-4, atol=1e-6)
    assert metrics["entropy_selected_fraction"] == pytest.approx(dense_metrics["entropy_selected_fraction"])
    assert 0.2 < metrics["entropy_selected_fraction"] < 0.45
    assert not torch.allclose(params, all_tokens)
