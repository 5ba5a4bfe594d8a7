"""Two data-parallel CPU processes (gloo, launched with the bundled accelerate config) give the
same gradients as the per-token reference and as one process, for both averaging modes, with
gradient accumulation, mini-batches and several passes; and an SFT run end to end matches."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from astra_grpo.cli import bundled_configs
from astra_grpo.config import SFTConfig, load_config
from astra_grpo.sft import train_sft
from dp_worker import (
    GRPO_CASES,
    LAYOUT_CASES,
    LAYOUT_SHAPES,
    OBJECTIVE_CASES,
    SFT_CASES,
    SFT_EXAMPLES,
    groups,
    small_model,
)
from grpo_support import (
    flat_params,
    reference_grpo_updates,
    reference_sft_loss,
)

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trajectories(path: Path) -> Path:
    from astra_core.formats_doc import example

    base = example("trajectory")
    lines = []
    for i, city in enumerate(["Oslo", "Bergen", "Paris", "Lima"]):
        record = json.loads(json.dumps(base).replace("Oslo", city))
        record["id"] = f"traj-{i}"
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


def launch_worker(accelerate_config: str, *args: str, env: dict | None = None, worker: str = "dp_worker.py",
                  timeout: float = 1200) -> None:
    """`accelerate launch --config_file <bundled config> WORKER ARGS` (2 CPU processes)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE), **(env or {})}
    command = [str(Path(sys.executable).parent / "accelerate"), "launch",
               "--config_file", str(bundled_configs() / "accelerate" / accelerate_config),
               "--main_process_port", str(free_port()), str(HERE / worker), *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory, tiny_llama):
    out = tmp_path_factory.mktemp("dp")
    data = trajectories(out / "trajectories.jsonl")
    launch_worker("cpu_2proc.yaml", str(out), str(tiny_llama), str(data))
    return out, data


def reference_grpo(case: str) -> torch.Tensor:
    """The same SGD updates with per-token loops over the whole global batch, in this process."""
    overrides, lr = GRPO_CASES[case]
    return reference_grpo_updates(small_model(), groups(), overrides, lr)


@pytest.mark.parametrize("case", list(GRPO_CASES))
def test_grpo_update_on_two_processes_equals_reference(case, two_process_run):
    out, _ = two_process_run
    result = torch.load(out / f"grpo_{case}.pt")
    assert result["processes"] == 2 and result["distributed_type"] == "DistributedType.MULTI_CPU"
    assert result["accumulation"] > 1  # accumulation and data parallelism together
    before = flat_params(small_model())
    expected = reference_grpo(case)
    assert (expected - before).abs().max() > 1e-4
    torch.testing.assert_close(result["params"], expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mode", list(SFT_CASES))
def test_sft_update_on_two_processes_equals_reference(mode, two_process_run):
    out, _ = two_process_run
    result = torch.load(out / f"sft_{mode}.pt")
    model = small_model()
    before = flat_params(model)
    loss = reference_sft_loss(model, SFT_EXAMPLES, SFT_CASES[mode]["loss_average"])
    loss.backward()
    gradient = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(before - result["params"], gradient, rtol=1e-4, atol=1e-7)
    assert result["metrics"]["loss"] == pytest.approx(loss.item(), rel=1e-5)


@pytest.mark.parametrize("case", list(LAYOUT_CASES))
@pytest.mark.parametrize("shape", range(len(LAYOUT_SHAPES)))
def test_layouts_on_two_processes_equal_the_padded_update_on_one(shape, case, two_process_run, fresh_accelerate_state):
    """Random groups in packed and tree layouts (by count and by token budget: the processes agree on how many
    micro-batches) on 2 processes: every parameter's gradient and the loss of GRPO and SFT equal the dense
    padded update of the whole batch in one process."""
    from layout_support import random_groups, run_grpo_update, run_sft_update, sft_examples

    result = torch.load(two_process_run[0] / f"layout_{shape}_{case}.pt")
    groups = random_groups(LAYOUT_SHAPES[shape])
    averaging = LAYOUT_CASES[case]["loss_average"]
    metrics, params = run_grpo_update(groups, {"layout": "padded", "micro_batch_size": len(groups[0].episodes),
                                               "loss_average": averaging})
    torch.testing.assert_close(result["params"], params, rtol=1e-4, atol=1e-6)
    assert result["metrics"]["loss"] == pytest.approx(metrics["loss"], rel=1e-5, abs=1e-7)
    examples = sft_examples(groups)
    sft_metrics, sft_params = run_sft_update(examples[:len(examples) // 2 * 2], {"layout": "padded",
                                                                                  "loss_average": averaging})
    torch.testing.assert_close(result["sft_params"], sft_params, rtol=1e-4, atol=1e-6)
    assert result["sft_metrics"]["loss"] == pytest.approx(sft_metrics["loss"], rel=1e-5)


@pytest.mark.parametrize("case", list(OBJECTIVE_CASES))
def test_objectives_on_two_processes_equal_the_padded_update_on_one(case, two_process_run, fresh_accelerate_state):
    """GSPO with the high-entropy selection (its quantile over both processes' tokens) and CISPO with Dr. GRPO's
    fixed normaliser, on 2 processes: the same parameters, loss and selected share as the padded update on one."""
    from layout_support import random_groups, run_grpo_update

    result = torch.load(two_process_run[0] / f"objective_{case}.pt")
    groups = random_groups(LAYOUT_SHAPES[0])
    overrides = {k: v for k, v in OBJECTIVE_CASES[case].items() if k != "max_tokens_per_microbatch"}
    metrics, params = run_grpo_update(groups, {**overrides, "layout": "padded",
                                               "micro_batch_size": len(groups[0].episodes)})
    torch.testing.assert_close(result["params"], params, rtol=1e-4, atol=1e-6)
    for name in ("loss", "entropy_selected_fraction"):
        if name in metrics:
            assert result["metrics"][name] == pytest.approx(metrics[name], rel=1e-5, abs=1e-7), name


def test_sft_run_on_two_processes_matches_one_process(two_process_run, tiny_llama, tmp_path, fresh_accelerate_state):
    out, data = two_process_run
    assert_sft_run_matches_one_process(out / "sft_run", tiny_llama, data, tmp_path / "one", micro_batch_size=1)


def assert_sft_run_matches_one_process(run: Path, model_dir: Path, data: Path, one: Path, micro_batch_size: int) -> None:
    """`run` (2 steps of SFT on 2 processes) has the losses, gradient norms, token counts and final
    weights of the same run in this process."""
    config = load_config(SFTConfig, None, dict(model=str(model_dir), batch_size=4, micro_batch_size=micro_batch_size,
                                               max_steps=2, learning_rate=1e-3, output_dir=str(one), report_to=[],
                                               save_weights_steps=0, save_state_steps=0, max_length=512))
    train_sft(config, [str(data)])
    expected = [json.loads(line) for line in (one / "metrics.jsonl").read_text().splitlines()]
    got = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in got] == [1, 2]
    for a, b in zip(expected, got, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-3)  # the gradient scale agrees
        assert b["trainable_tokens"] == a["trainable_tokens"]
    from transformers import AutoModelForCausalLM

    weights_one = flat_params(AutoModelForCausalLM.from_pretrained(one / "final"))
    weights_two = flat_params(AutoModelForCausalLM.from_pretrained(run / "final"))
    torch.testing.assert_close(weights_two, weights_one, rtol=0, atol=3e-3)  # Adam: 2 steps of lr 1e-3
    assert (weights_one - flat_params(AutoModelForCausalLM.from_pretrained(model_dir))).abs().max() > 1e-4


def test_sigterm_to_one_process_stops_both_after_the_same_step_with_the_state_saved(tiny_llama, tmp_path):
    """Only rank 1 gets the signal: the ranks agree (a collective each step), both finish the same step, save its
    state together and stop; rank 0 says so. (A rank stopping alone would leave the other in a collective.)"""
    import signal
    import time

    from astra_grpo.checkpoint import saved_steps

    data, out = trajectories(tmp_path / "trajectories.jsonl"), tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [str(Path(sys.executable).parent / "accelerate"), "launch",
               "--config_file", str(bundled_configs() / "accelerate" / "cpu_2proc.yaml"),
               "--main_process_port", str(free_port()), str(Path(sys.executable).parent / "astra-grpo"), "sft",
               str(data), "--config", "sft_tiny_cpu.yaml", "--model", str(tiny_llama), "--output-dir", str(out),
               "--batch-size", "4", "--micro-batch-size", "1", "--max-steps", "100000", "--save-state-steps", "0",
               "--report-to", "none"]
    with subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True) as run:
        try:
            metrics, deadline = out / "metrics.jsonl", time.monotonic() + 600
            while (not metrics.exists() or not metrics.read_text().strip()) and time.monotonic() < deadline:
                time.sleep(0.2)
            os.kill(rank_process(run.pid, rank=1), signal.SIGTERM)
            err = run.communicate(timeout=600)[1]
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
    [step] = saved_steps(out / "state")
    assert f"astra-grpo sft: SIGTERM: stopped after step {step}, its training state saved" in err, err[-3000:]
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()][-1] == step
    assert not (out / "final").exists()


def rank_process(launcher: int, rank: int) -> int:
    """The pid of the training process of `rank` among the launcher's descendants (by its RANK variable)."""
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for pid in Path("/proc").iterdir():
            if not pid.name.isdigit():
                continue
            try:
                environ = (pid / "environ").read_bytes().split(b"\0")
                ancestors = _ancestors(int(pid.name))
            except OSError:
                continue
            if launcher in ancestors and f"RANK={rank}".encode() in environ and b"LOCAL_RANK=" + str(rank).encode() \
                    in environ:
                return int(pid.name)
        time.sleep(0.2)
    raise AssertionError(f"no process of rank {rank} under {launcher}")


def _ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        chain.append(pid)
    return chain
