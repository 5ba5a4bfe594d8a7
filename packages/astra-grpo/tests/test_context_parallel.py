"""Ulysses context parallelism on 2 CPU processes (gloo, launched once with the bundled accelerate config):
logits, log-probs, loss and every parameter gradient under CP=2 equal CP=1 dense, for SFT and GRPO batches
in padded and tree layouts, tiny Llama / Qwen2 / Qwen3 models (GQA, kv heads repeated), gradient
checkpointing, the FlashAttention branches (with an SDPA stand-in for the kernel); the
trainers' updates under DP=1 x CP=2 equal DP=2 x CP=1 and the per-token reference (gradient
accumulation, mini-batches, passes with old log-probs); an SFT run with CP=2 matches one process."""

import pytest
import torch
from cp_support import (
    BATCHES,
    GRPO_UPDATES,
    LAYOUTS,
    SFT_UPDATES,
    cp_model,
    flat,
    loss_and_grads,
    real_positions,
    reference_grpo_update,
    reference_logits,
    reference_sft_update,
    sft_tokens,
)
from cp_worker import UPDATE_FAMILIES, VARIANTS
from test_data_parallel import assert_sft_run_matches_one_process, launch_worker, trajectories

LOGITS = [(v, b) for v in VARIANTS for b in BATCHES]


@pytest.fixture(scope="module")
def cp_run(tmp_path_factory, tiny_llama):
    out = tmp_path_factory.mktemp("cp")
    data = trajectories(out / "trajectories.jsonl")
    launch_worker("cpu_2proc.yaml", str(out), str(tiny_llama), str(data), worker="cp_worker.py")
    return out, data


@pytest.fixture(scope="module")
def mechanism(cp_run):
    return torch.load(cp_run[0] / "mechanism.pt")


@pytest.mark.parametrize(("variant", "batch"), LOGITS)
def test_logits_under_cp2_equal_cp1(variant, batch, mechanism):
    expected = reference_logits(cp_model(variant.partition("-")[0]), BATCHES[batch]())
    got = mechanism[variant]["logits"][batch]
    real = real_positions(BATCHES[batch]())  # padding positions are nobody's prediction
    assert got.shape == expected.shape
    torch.testing.assert_close(got[real], expected[real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["sft", "grpo"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_loss_and_every_gradient_under_cp2_equal_cp1(variant, kind, layout, mechanism):
    expected = loss_and_grads(cp_model(variant.partition("-")[0]), kind, "padded")  # CP=1, dense
    got = mechanism[variant][f"{kind}-{layout}"]
    torch.testing.assert_close(got["logprobs"], expected["logprobs"], rtol=1e-5, atol=1e-5)
    assert got["loss"].item() == pytest.approx(expected["loss"].item(), rel=1e-5)
    assert set(got["grads"]) == set(expected["grads"])
    for name, grad in expected["grads"].items():
        assert grad.abs().max() > 0, name  # every parameter takes part
        torch.testing.assert_close(got["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)


def both_grids(out, trainer: str, family: str, case: str) -> tuple[dict, dict]:
    """The results of DP=1 x CP=2 and of DP=2 x CP=1 on the same global batch."""
    cp2, dp2 = (torch.load(out / f"{trainer}_{family}_{case}_{tag}.pt") for tag in ("cp2", "dp2"))
    assert (cp2["grid"], dp2["grid"]) == ((1, 2), (2, 1))
    assert cp2["accumulation"] == 2 * dp2["accumulation"]  # one data-parallel group accumulates twice as much
    return cp2, dp2


@pytest.mark.parametrize("case", list(GRPO_UPDATES))
@pytest.mark.parametrize("family", UPDATE_FAMILIES)
def test_grpo_update_dp1_cp2_equals_dp2_cp1_and_reference(family, case, cp_run):
    cp2, dp2 = both_grids(cp_run[0], "grpo", family, case)
    assert dp2["accumulation"] > 1
    expected = reference_grpo_update(family, case)
    assert (expected - flat(cp_model(family))).abs().max() > 1e-4  # the comparison is not between no-ops
    torch.testing.assert_close(cp2["params"], expected, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(cp2["params"], dp2["params"], rtol=1e-4, atol=1e-6)
    for name in ("loss", "ratio_mean", "clip_fraction", "update_tokens"):
        assert cp2["metrics"][name] == pytest.approx(dp2["metrics"][name], rel=1e-4, abs=1e-7), name


@pytest.mark.parametrize("case", list(SFT_UPDATES))
@pytest.mark.parametrize("family", UPDATE_FAMILIES)
def test_sft_update_dp1_cp2_equals_dp2_cp1_and_reference(family, case, cp_run):
    cp2, dp2 = both_grids(cp_run[0], "sft", family, case)
    expected, loss = reference_sft_update(family, case)
    torch.testing.assert_close(cp2["params"], expected, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(cp2["params"], dp2["params"], rtol=1e-4, atol=1e-6)
    for result in (cp2, dp2):  # token counts and the loss: every token once, over CP and DP
        assert result["metrics"]["tokens"] == sft_tokens()
        assert result["metrics"]["loss"] == pytest.approx(loss, rel=1e-5)


def test_sft_run_with_cp2_matches_one_process(cp_run, tiny_llama, tmp_path, fresh_accelerate_state):
    """`train_sft` with context_parallel_size=2 (micro-batches of 2: padding) against one process."""
    out, data = cp_run
    assert_sft_run_matches_one_process(out / "sft_run", tiny_llama, data, tmp_path / "one", micro_batch_size=2)
    assert "astra_cp" not in (out / "sft_run" / "final" / "config.json").read_text()  # an ordinary checkpoint
