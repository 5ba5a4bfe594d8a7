"""`--report-to wandb` with the real wandb package (the `wandb` extra): offline, as on a cluster without
internet, the run's config and per-step values reach wandb's run file; without credentials the trainer stops
in one line before it loads the model. Each run is its own process: wandb captures the console and keeps a
service process per run, which must not leak into pytest's."""

import json
import os
import subprocess
import sys

RUN_CLI = "from astra_grpo.cli import main; main(prog_name='astra-grpo')"


def sft(tmp_path, model, *options: str, env: dict) -> subprocess.CompletedProcess:
    from astra_core.formats_doc import example

    data = tmp_path / "trajectories.jsonl"
    data.write_text("".join(json.dumps(dict(example("trajectory"), id=f"t{i}")) + "\n" for i in range(4)))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    # HOME: no ~/.netrc or wandb settings of the machine's user
    env = {**clean, "HOME": str(tmp_path / "home"), "WANDB_DIR": str(tmp_path), **env}
    argv = [sys.executable, "-c", RUN_CLI, "sft", str(data), "--config", "sft_tiny_cpu.yaml", "--model", str(model),
            "--output-dir", str(tmp_path / "out"), "--report-to", "wandb", *(options or ("--max-steps", "2"))]
    return subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=600)


def test_an_offline_wandb_run_receives_the_config_and_every_step(tiny_llama, tmp_path):
    result = sft(tmp_path, tiny_llama, env={"WANDB_MODE": "offline"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # the trainer writes no data; wandb's console lines go to stderr
    [run_file] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    logged = run_file.read_bytes()
    # The run file is wandb's transaction log of protobuf records, whose strings are stored as they are: the
    # knobs of the config and the names of the per-step values are there once they reached wandb.
    for name in (b"learning_rate", b"micro_batch_size", b"grad_norm", b"trainable_tokens", b"tokens_per_s"):
        assert name in logged, name
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]


def test_wandb_without_credentials_stops_in_one_line_before_loading_the_model(tmp_path):
    result = sft(tmp_path, tmp_path / "no-model-here", env={})
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert line.startswith("Error: --report-to wandb: the tracker did not start: "), line
    assert "API key" in line and "WANDB_MODE=offline" in line and "--report-to none" in line
    assert "no-model-here" not in result.stderr  # it stopped before looking for the model


def test_a_resumed_run_goes_on_logging_to_the_wandb_run_it_continues(tiny_llama, tmp_path):
    first = sft(tmp_path, tiny_llama, "--max-steps", "1", "--save-state-steps", "1", env={"WANDB_MODE": "offline"})
    assert first.returncode == 0, first.stderr
    resumed = sft(tmp_path, tiny_llama, "--max-steps", "2", "--resume", env={"WANDB_MODE": "offline"})
    assert resumed.returncode == 0, resumed.stderr
    runs = sorted(path.name for path in (tmp_path / "wandb").glob("offline-run-*"))
    run_id = (tmp_path / "out" / "wandb_run_id").read_text().strip()
    assert len(runs) == 2 and all(name.endswith("-" + run_id) for name in runs)  # one wandb run, logged twice
    fresh = sft(tmp_path, tiny_llama, "--max-steps", "1", env={"WANDB_MODE": "offline"})  # no --resume: a new run
    assert fresh.returncode == 0, fresh.stderr
    assert (tmp_path / "out" / "wandb_run_id").read_text().strip() != run_id
