"""The astra-grpo command: bad input fails before training and names record and field, bundled
configs, plots, and the SFT command end to end on a tiny model."""

import json

import pytest
from astra_grpo.cli import main
from click.testing import CliRunner
from grpo_support import rl_sample


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_malformed_rl_sample_fails_before_training_naming_record_and_field(tmp_path, fresh_accelerate_state):
    broken = rl_sample("rl-broken")
    del broken["environment"]
    samples = write(tmp_path / "s.jsonl", [rl_sample("rl-ok"), broken])
    result = CliRunner().invoke(main, ["train", str(samples), "--output-dir", str(tmp_path / "out"), "--report-to", ""])
    assert result.exit_code == 1
    assert "s.jsonl:2" in result.output and "rl-broken" in result.output and "environment" in result.output
    assert not (tmp_path / "out" / "final").exists()


def test_a_sample_without_a_job_for_the_f1_reward_is_refused(tmp_path, fresh_accelerate_state):
    sample = rl_sample("rl-nojob")
    sample["job"] = []
    samples = write(tmp_path / "s.jsonl", [sample])
    result = CliRunner().invoke(main, ["train", str(samples), "--output-dir", str(tmp_path / "out"), "--report-to", ""])
    assert result.exit_code == 1 and "rl-nojob" in result.output and "field job" in result.output


def test_a_bad_config_fails_naming_the_field(tmp_path):
    samples = write(tmp_path / "s.jsonl", [rl_sample()])
    result = CliRunner().invoke(main, ["train", str(samples), "--config", "grpo_tiny_cpu.yaml", "--mini-batch-size", "3"])
    assert result.exit_code == 1 and "config field mini_batch_size" in result.output
    result = CliRunner().invoke(main, ["sft", str(samples), "--config", "no_such.yaml"])
    assert result.exit_code == 2 and "sft_paper.yaml" in result.output


def test_skip_bad_sends_bad_records_to_rejects(tmp_path):
    from astra_grpo.data import load_records

    broken = rl_sample("rl-broken")
    broken["messages"] = [{"role": "system", "content": "no question"}]
    samples = write(tmp_path / "s.jsonl", [rl_sample("rl-ok"), broken, {"id": 3}])
    records = load_records([str(samples)], "rl_sample", skip_bad=True, rejects=str(tmp_path / "rejects.jsonl"))
    assert [r["id"] for r in records] == ["rl-ok"]
    rejects = [json.loads(line) for line in (tmp_path / "rejects.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rejects] == ["rl-broken", None]
    assert "needs a user message" in rejects[0]["reason"] and rejects[1]["source"].endswith("s.jsonl:3")


def test_help_documents_every_knob():
    result = CliRunner().invoke(main, ["train", "--help"])
    for flag in ("--clip-eps-high", "--abf / --no-abf", "--loss-average", "--kl-coef", "--max-turns",
                 "--save-state-steps", "--engine"):
        assert flag in result.output
    assert "paper: 256" in result.output


def test_configs_lists_and_locates_bundled_files():
    result = CliRunner().invoke(main, ["configs"])
    assert "grpo_paper.yaml" in result.output and "accelerate/deepspeed_zero3.yaml" in result.output
    path = CliRunner().invoke(main, ["configs", "--path", "accelerate/cpu_2proc.yaml"]).output.strip()
    assert path.endswith("cpu_2proc.yaml") and "num_processes: 2" in open(path).read()


def test_plot_draws_turns_over_training_for_several_runs(tmp_path):
    for name, slope in (("f1", 0.0), ("recall", 0.5), ("precision", -0.2)):
        run = tmp_path / name
        run.mkdir()
        rows = [{"step": s, "rollout/turns_mean": max(1.0, 3 + slope * s), "rollout/reward_mean": 0.1 * s,
                 "loss": 1.0 / s} for s in range(1, 11)]
        write(run / "metrics.jsonl", rows)
    output = tmp_path / "figure8.png"
    result = CliRunner().invoke(main, ["plot", str(tmp_path / "f1"), str(tmp_path / "recall"),
                                       str(tmp_path / "precision"), "-o", str(output), "--smooth", "2"])
    assert result.exit_code == 0, result.output
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "rollout/turns_mean" in result.output and "3 panels" in result.output
    bad = CliRunner().invoke(main, ["plot", str(tmp_path / "f1"), "-o", str(output), "--metric", "nothing"])
    assert bad.exit_code == 1


def test_sft_command_trains_a_tiny_model(tiny_llama, tmp_path, fresh_accelerate_state):
    from astra_core.formats_doc import example

    data = write(tmp_path / "t.jsonl", [dict(example("trajectory"), id=f"t{i}") for i in range(4)])
    result = CliRunner().invoke(main, ["sft", str(data), "--config", "sft_tiny_cpu.yaml", "--model", str(tiny_llama),
                                       "--output-dir", str(tmp_path / "out"), "--max-steps", "1",
                                       "--report-to", "tensorboard"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "final" / "model.safetensors").exists()
    [row] = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert row["step"] == 1 and row["loss"] > 0 and row["trainable_tokens"] > 0
    assert list((tmp_path / "out").rglob("events.out.tfevents.*"))  # the TensorBoard tracker wrote


def broken_checkpoint(tiny_llama, directory, how: str):
    """A copy of a real checkpoint broken the ways a copy or download breaks."""
    import shutil

    if how == "no directory":
        return directory / "missing"
    shutil.copytree(tiny_llama, directory)
    weights = directory / "model.safetensors"
    if how == "no weights":
        weights.unlink()
    elif how == "truncated weights":
        weights.write_bytes(weights.read_bytes()[:300])
    elif how == "no tokenizer":
        for path in directory.glob("tokenizer*"):
            path.unlink()
    return directory


@pytest.mark.parametrize("command", ["sft", "train"])
@pytest.mark.parametrize("how, said", [
    ("no directory", "is not a local transformers checkpoint (no config.json)"),
    ("no weights", "the model does not load (OSError: "),
    ("truncated weights", "the model does not load (SafetensorError: "),
    ("no tokenizer", "the tokenizer does not load ("),
])
def test_a_checkpoint_that_does_not_load_is_one_line_naming_it(tiny_llama, tmp_path, fresh_accelerate_state,
                                                               command, how, said):
    """A wrong --model or a half-copied checkpoint: exit 1 and one line naming the directory, no traceback."""
    from astra_core.formats_doc import example

    model = broken_checkpoint(tiny_llama, tmp_path / "model", how)
    data = (write(tmp_path / "t.jsonl", [dict(example("trajectory"), id="t0")]) if command == "sft"
            else write(tmp_path / "s.jsonl", [rl_sample("rl-0")]))
    result = CliRunner().invoke(main, [command, str(data), "--model", str(model), "--output-dir", str(tmp_path / "out"),
                                       "--report-to", ""])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"Error: {model}") and said in line


def test_rollout_takes_a_bundled_config_and_stops_in_one_line_when_the_policy_cannot_load(tmp_path):
    samples = write(tmp_path / "s.jsonl", [rl_sample("rl-0"), rl_sample("rl-1")])
    result = CliRunner().invoke(main, ["rollout", str(samples), "--config", "grpo_tiny_cpu.yaml",
                                       "--model", str(tmp_path / "no-model")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1].startswith("astra-grpo rollout: cannot load the policy")
    result = CliRunner().invoke(main, ["rollout", str(samples), "--config", "no_such.yaml"])
    assert result.exit_code == 1 and "grpo_paper.yaml" in result.output


def test_rollout_as_a_library_rejects_a_sample_it_cannot_play_before_loading_a_model():
    from astra_core.stage import Rejected
    from astra_grpo.config import RolloutConfig
    from astra_grpo.play import Player, play_samples

    sample = rl_sample("rl-0")
    sample["messages"] = [m for m in sample["messages"] if m["role"] != "user"]
    config = RolloutConfig(model="/nowhere")
    with Player(config) as player:
        [result] = play_samples([sample], config, player)
    assert isinstance(result, Rejected) and "the prompt needs a user message" in str(result)


def test_rollout_stops_at_a_sample_it_cannot_play_as_at_a_malformed_line_unless_skip_bad(tmp_path):
    sample = rl_sample("rl-0")
    sample["messages"] = [m for m in sample["messages"] if m["role"] != "user"]
    samples = write(tmp_path / "s.jsonl", [sample])
    stopped = CliRunner().invoke(main, ["rollout", str(samples), "--model", str(tmp_path / "no-model")])
    assert stopped.exit_code == 1 and "Traceback" not in stopped.output
    assert f"{samples}:1: record 'rl-0': field messages: the prompt needs a user message" in stopped.output
    rejects = tmp_path / "rejects.jsonl"
    kept = CliRunner().invoke(main, ["rollout", str(samples), "--model", str(tmp_path / "no-model"), "--skip-bad",
                                     "--rejects", str(rejects)])
    assert kept.exit_code == 0, kept.output
    [reject] = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert reject["source"] == f"{samples}:1" and "needs a user message" in reject["reason"]


@pytest.mark.parametrize("command", ["sft", "train", "rollout", "plot", "configs"])
def test_every_command_has_help(command):
    assert CliRunner().invoke(main, [command, "--help"]).exit_code == 0


@pytest.mark.nsjail
def test_train_and_rollout_commands_end_to_end(tiny_llama, tmp_path, fresh_accelerate_state):
    """GRPO on the real jailed sandbox with astra-reward's F1, then the trained policy as a JSONL stage.
    A random-init policy writes no tool calls: every group has zero reward variance, so Adaptive
    Batch Filling hits its round cap and tops the batch up (logged)."""
    from astra_core.schema import validate

    samples = write(tmp_path / "s.jsonl", [rl_sample(f"rl-{i}") for i in range(2)])
    out = tmp_path / "out"
    common = ["--model", str(tiny_llama), "--max-turns", "2", "--max-new-tokens", "8", "--sandbox-pool-size", "4"]
    result = CliRunner().invoke(main, ["train", str(samples), "--config", "grpo_tiny_cpu.yaml", *common,
                                       "--output-dir", str(out), "--max-steps", "1", "--group-size", "2",
                                       "--micro-batch-size", "2", "--abf-max-rounds", "2", "--report-to", "",
                                       "--rollouts-out", str(tmp_path / "rollouts.jsonl")])
    assert result.exit_code == 0, result.output
    [row] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["abf/rounds"] == 2 and row["abf/capped"] == 1.0 and row["valid_fraction"] == 0.0
    rollouts = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * 2 * 2  # 2 rounds x 2 prompts x 2 rollouts
    assert sorted({r["status"] for r in rollouts}) == ["discarded", "trained"]
    for record in rollouts:
        validate(record, "rollout")
        assert record["reward_components"]["n"] == 2  # scored by astra-reward against the job

    played = tmp_path / "played.jsonl"
    result = CliRunner().invoke(main, ["rollout", str(samples), *common, "--model", str(out / "final"), "-n", "2",
                                       "-o", str(played)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in played.read_text().splitlines()]
    assert [r["sample_id"] for r in records] == ["rl-0", "rl-0", "rl-1", "rl-1"]
    assert all(r["meta"]["provenance"][-1]["command"] == "astra-grpo rollout" for r in records)
    assert "episodes: 4" in result.output


def test_sft_sent_sigterm_stops_after_its_step_with_the_state_saved(tiny_llama, tmp_path):
    """The real command, signalled from outside as a scheduler's time limit does: one line, exit 143, the state of
    the step it finished on disk for --resume."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from astra_core.formats_doc import example
    from astra_grpo.checkpoint import saved_steps

    data = write(tmp_path / "t.jsonl", [dict(example("trajectory"), id=f"t{i}") for i in range(4)])
    out = tmp_path / "out"
    command = [os.path.join(os.path.dirname(sys.executable), "astra-grpo"), "sft", str(data), "--config",
               "sft_tiny_cpu.yaml", "--model", str(tiny_llama), "--output-dir", str(out), "--max-steps", "100000",
               "--save-state-steps", "0", "--report-to", "none"]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as run:
        metrics, deadline = out / "metrics.jsonl", time.monotonic() + 300
        while (not metrics.exists() or not metrics.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        run.send_signal(signal.SIGTERM)
        err = run.stderr.read()
    assert run.returncode == 143, err
    assert "astra-grpo sft: SIGTERM: stopped after step " in err and "Traceback" not in err
    [step] = saved_steps(out / "state")
    assert f"stopped after step {step}, its training state saved in {out / 'state' / f'step-{step:06d}'}" in err
    assert not (out / "final").exists()


def test_weights_that_cannot_be_written_are_one_line_and_leave_no_half_copy(tiny_llama, tmp_path):
    """A full disk or a quota while saving (here: RLIMIT_FSIZE below the weights' size): before, a safetensors
    traceback and a `final.partial` directory left taking space; now one line naming the directory and what a
    rerun starts from, and the half-written copy removed."""
    import os
    import resource
    import subprocess
    import sys

    from astra_core.formats_doc import example

    data = write(tmp_path / "t.jsonl", [dict(example("trajectory"), id=f"t{i}") for i in range(4)])
    out = tmp_path / "out"
    weights = (tiny_llama / "model.safetensors").stat().st_size

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (weights // 2, weights // 2))

    command = [os.path.join(os.path.dirname(sys.executable), "astra-grpo"), "sft", str(data), "--config",
               "sft_tiny_cpu.yaml", "--model", str(tiny_llama), "--output-dir", str(out), "--max-steps", "1",
               "--report-to", "none"]
    done = subprocess.run(command, capture_output=True, text=True, preexec_fn=small_files, timeout=600)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"Error: could not save the weights in {out / 'final'} (" in done.stderr
    assert "no training state was saved: a rerun starts over" in done.stderr
    assert not (out / "final").exists() and not (out / "final.partial").exists()


def test_outputs_that_cannot_be_written_are_one_line(tiny_llama, tmp_path):
    """No room for even the run's config.yaml (RLIMIT_FSIZE of 100 bytes): one line, not an OSError traceback."""
    import os
    import resource
    import subprocess
    import sys

    from astra_core.formats_doc import example

    data = write(tmp_path / "t.jsonl", [dict(example("trajectory"), id="t0")])
    command = [os.path.join(os.path.dirname(sys.executable), "astra-grpo"), "sft", str(data), "--config",
               "sft_tiny_cpu.yaml", "--model", str(tiny_llama), "--output-dir", str(tmp_path / "out"),
               "--max-steps", "1", "--report-to", "none"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100)))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "Error: could not write the run's outputs: File too large; no training state was saved" in done.stderr


def base_model(tiny_llama, directory):
    """A copy of a checkpoint whose tokenizer has no chat template, as a base model's."""
    import shutil

    shutil.copytree(tiny_llama, directory)
    settings = directory / "tokenizer_config.json"
    settings.write_text(json.dumps({k: v for k, v in json.loads(settings.read_text()).items() if k != "chat_template"}))
    for path in directory.glob("chat_template*"):
        path.unlink()
    return directory


def test_a_base_model_trains_with_the_chat_template_it_is_given(tiny_llama, tiny_qwen, tmp_path,
                                                                 fresh_accelerate_state):
    """A base model's tokenizer has no chat template: SFT stopped with transformers' message about
    tokenizer.chat_template. It says which option gives one; with --chat-template-path (a .jinja file, or a model
    directory whose template to take) it trains, and the checkpoint's tokenizer carries that template."""
    from astra_core.formats_doc import example
    from transformers import AutoTokenizer

    model = base_model(tiny_llama, tmp_path / "base")
    data = write(tmp_path / "t.jsonl", [dict(example("trajectory"), id=f"t{i}") for i in range(2)])
    common = ["sft", str(data), "--model", str(model), "--max-steps", "1", "--report-to", ""]
    refused = CliRunner().invoke(main, [*common, "--output-dir", str(tmp_path / "refused")])
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert "the tokenizer has no chat template (a base model?): give one with --chat-template-path" in refused.output

    qwen_template = AutoTokenizer.from_pretrained(tiny_qwen).chat_template
    (tmp_path / "qwen.jinja").write_text(qwen_template)
    for given in (tmp_path / "qwen.jinja", tiny_qwen):
        out = tmp_path / f"out-{given.name}"
        result = CliRunner().invoke(main, [*common, "--output-dir", str(out), "--chat-template-path", str(given)])
        assert result.exit_code == 0, result.output
        assert AutoTokenizer.from_pretrained(out / "final").chat_template == qwen_template
    missing = CliRunner().invoke(main, [*common, "--chat-template-path", str(tmp_path / "none.jinja")])
    assert missing.exit_code == 1
    assert f"config field chat_template_path: no such file or directory: {tmp_path / 'none.jinja'}" in missing.output


@pytest.mark.parametrize("command", ["sft", "train"])
def test_an_output_dir_that_cannot_be_made_is_one_line_before_any_model_loads(tmp_path, command):
    """--output-dir naming a file printed a FileExistsError traceback (after the model had loaded)."""
    data = write(tmp_path / "s.jsonl", [rl_sample("rl-0")])
    a_file = write(tmp_path / "taken", [{}])
    result = CliRunner().invoke(main, [command, str(data), "--output-dir", str(a_file), "--report-to", ""])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip() == f"Error: config field output_dir: {a_file} is a file, not a directory"
    result = CliRunner().invoke(main, [command, str(data), "--output-dir", str(a_file / "run"), "--report-to", ""])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: cannot create the output directory {a_file / 'run'}: {a_file} is not a " \
                                    "directory"
