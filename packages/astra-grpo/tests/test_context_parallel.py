"""Ulysses context parallelism on 2 CPU processes (gloo, launched once with the bundled accelerate config):
logits, log-probs, loss and every parameter gradient under CP=2 equal CP=1, for SFT and GRPO batches,
tiny Llama / Qwen2 / Qwen3 models (GQA, kv heads repeated), padding, packed rows, gradient
checkpointing, the FlashAttention branch (with an SDPA stand-in for the kernel); the
trainers' updates under DP=1 x CP=2 equal DP=2 x CP=1 and the per-token reference (gradient
accumulation, mini-batches, passes with old log-probs); an SFT run with CP=2 matches one process."""

import json

import pytest
import torch
from astra_grpo.config import SFTConfig, load_config
from astra_grpo.sft import train_sft
from cp_support import (
    GRPO_UPDATES,
    SFT_UPDATES,
    cp_model,
    flat,
    grpo_batch,
    loss_and_grads,
    packed_batch,
    reference_grpo_update,
    reference_logits,
    reference_sft_update,
    sft_batch,
    sft_tokens,
)
from cp_worker import UPDATE_FAMILIES, VARIANTS
from test_data_parallel import launch_worker, trajectories

BATCHES = {"sft": sft_batch, "grpo": grpo_batch, "packed": packed_batch}
LOGITS = [(v, b) for v in VARIANTS for b in BATCHES if not (b == "packed" and v.endswith("fa2"))]


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
    real = BATCHES[batch]()["attention_mask"].bool()  # padding positions are nobody's prediction
    assert got.shape == expected.shape
    torch.testing.assert_close(got[real], expected[real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["sft", "grpo"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_loss_and_every_gradient_under_cp2_equal_cp1(variant, kind, mechanism):
    expected = loss_and_grads(cp_model(variant.partition("-")[0]), kind)
    got = mechanism[variant][kind]
    torch.testing.assert_close(got["logprobs"], expected["logprobs"], rtol=1e-5, atol=1e-5)
    assert got["loss"].item() == pytest.approx(expected["loss"].item(), rel=1e-5)
    assert set(got["grads"]) == set(expected["grads"])
    for name, grad in expected["grads"].items():
        assert grad.abs().max() > 0, name  # every parameter takes part
        torch.testing.assert_close(got["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("case", list(GRPO_UPDATES))
@pytest.mark.parametrize("family", UPDATE_FAMILIES)
def test_grpo_update_dp1_cp2_equals_dp2_cp1_and_reference(family, case, cp_run):
    out, _ = cp_run
    cp2 = torch.load(out / f"grpo_{family}_{case}_cp2.pt")
    dp2 = torch.load(out / f"grpo_{family}_{case}_dp2.pt")
    assert (cp2["grid"], dp2["grid"]) == ((1, 2), (2, 1))
    assert cp2["accumulation"] == 2 * dp2["accumulation"] > 2  # the same global batch, accumulated
    expected = reference_grpo_update(family, case)
    assert (expected - flat(cp_model(family))).abs().max() > 1e-4  # the comparison is not between no-ops
    torch.testing.assert_close(cp2["params"], expected, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(cp2["params"], dp2["params"], rtol=1e-4, atol=1e-6)
    for name in ("loss", "ratio_mean", "clip_fraction", "update_tokens"):
        assert cp2["metrics"][name] == pytest.approx(dp2["metrics"][name], rel=1e-4, abs=1e-7), name


@pytest.mark.parametrize("case", list(SFT_UPDATES))
@pytest.mark.parametrize("family", UPDATE_FAMILIES)
def test_sft_update_dp1_cp2_equals_dp2_cp1_and_reference(family, case, cp_run):
    out, _ = cp_run
    cp2 = torch.load(out / f"sft_{family}_{case}_cp2.pt")
    dp2 = torch.load(out / f"sft_{family}_{case}_dp2.pt")
    assert (cp2["grid"], dp2["grid"]) == ((1, 2), (2, 1))
    assert cp2["accumulation"] == 2 * dp2["accumulation"]
    expected, loss = reference_sft_update(family, case)
    torch.testing.assert_close(cp2["params"], expected, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(cp2["params"], dp2["params"], rtol=1e-4, atol=1e-6)
    for result in (cp2, dp2):  # token counts and the loss: every token once, over CP and DP
        assert result["metrics"]["tokens"] == sft_tokens()
        assert result["metrics"]["loss"] == pytest.approx(loss, rel=1e-5)


def test_sft_run_with_cp2_matches_one_process(cp_run, tiny_llama, tmp_path, fresh_accelerate_state):
    out, data = cp_run
    config = load_config(SFTConfig, None, dict(model=str(tiny_llama), batch_size=4, micro_batch_size=2, max_steps=2,
                                               learning_rate=1e-3, output_dir=str(tmp_path / "one"), report_to=[],
                                               save_weights_steps=0, save_state_steps=0, max_length=512))
    train_sft(config, [str(data)])
    one = [json.loads(line) for line in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    two = [json.loads(line) for line in (out / "sft_run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in two] == [1, 2]
    for a, b in zip(one, two, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-3)  # no CP-size factor in the gradient
        assert b["trainable_tokens"] == a["trainable_tokens"]
    from grpo_support import flat_params
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(out / "sft_run" / "final")
    assert saved.config._attn_implementation == "sdpa"  # the saved checkpoint is an ordinary one
    torch.testing.assert_close(flat_params(saved), flat_params(AutoModelForCausalLM.from_pretrained(tmp_path / "one"
                                                                                                   / "final")),
                               rtol=0, atol=3e-3)
