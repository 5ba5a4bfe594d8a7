"""DeepSpeed ZeRO-2 and ZeRO-3 with 2 CPU processes (gloo): the GRPO update equals the per-token reference,
so the engine's own division by the accumulation steps and averaging over processes are undone
exactly once; under ZeRO-3 with the KL penalty against a reference model sharded like the policy; and ZeRO-3
generation and saving as the trainers do them. Slow: the first run compiles DeepSpeed's shm_comm op (~35 s)
and deepspeed imports are heavy; the default run covers the same update with plain data parallelism."""

import pytest
import torch
from dp_worker import GRPO_CASES, groups, small_model
from grpo_support import flat_params, reference_grpo_updates
from test_data_parallel import launch_worker, reference_grpo


@pytest.mark.slow
def test_zero2_update_equals_reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("zero2")
    launch_worker("cpu_2proc_zero2.yaml", str(out))
    for case in GRPO_CASES:
        result = torch.load(out / f"grpo_{case}.pt")
        assert result["distributed_type"] == "DistributedType.DEEPSPEED" and result["processes"] == 2
        assert result["accumulation"] > 1
        torch.testing.assert_close(result["params"], reference_grpo(case), rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def zero3_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("zero3")
    launch_worker("cpu_2proc_zero3.yaml", str(out), "kl", worker="zero3_worker.py")
    result = torch.load(out / "zero3_kl.pt")
    assert result["distributed_type"] == "DistributedType.DEEPSPEED" and result["processes"] == 2
    return {**result, "final": out / "final"}


@pytest.mark.slow
def test_zero3_processes_generate_different_lengths_with_the_gathered_weights(tmp_path):
    """Rollouts of different lengths under ZeRO-3 (the embedded SmolLM2, the transformers engine): the processes
    stay in step (DeepSpeed's parameter hooks are off while they generate; with them on, this run aborts or hangs
    on a collective mismatch) and the weights are sharded again afterwards."""
    launch_worker("cpu_2proc_zero3.yaml", str(tmp_path), "generation", worker="zero3_worker.py", timeout=420)
    result = torch.load(tmp_path / "generation.pt")
    assert result["distributed_type"] == "DistributedType.DEEPSPEED" and result["processes"] == 2
    assert (result["tokens"], result["partitioned_after"]) == (2 + 9, True)


@pytest.mark.slow
def test_zero3_kl_reference_is_sharded_and_the_update_equals_reference(zero3_run):
    """kl_coef > 0 under ZeRO-3: the reference model is sharded over the processes like the policy (no process
    holds it whole) and the update with its KL penalty equals the per-token reference."""
    from zero3_worker import KL_CASE

    assert not zero3_run["reference_trainable"]
    held = zero3_run["reference_held"]
    assert held["materialized"] == 0 and 0 < held["shard"] <= held["whole"] / 2 + 64  # half of it on each process
    assert zero3_run["metrics"]["kl"] > 0  # the policy moved away from the reference within the step
    expected = reference_grpo_updates(small_model(), groups(), KL_CASE)
    without_kl = reference_grpo_updates(small_model(), groups(), {**KL_CASE, "kl_coef": 0})
    assert (expected - without_kl).abs().max() > 1e-5  # the penalty changes the update: the test can see it ignored
    torch.testing.assert_close(zero3_run["params"], expected, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_zero3_weights_are_saved_whole_without_asking_for_it_in_the_launch_config(zero3_run):
    """cpu_2proc_zero3.yaml does not set zero3_save_16bit_model; the trainers save whole HF checkpoints anyway
    (a run must not train for hours and then refuse to save), and they load back as the trained weights."""
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(zero3_run["final"])
    torch.testing.assert_close(flat_params(saved), zero3_run["params"])
