"""Kill a run after step k, resume it, and end in exactly the state of an uninterrupted run:
weights, metrics, rollouts (so data position, RNG, optimizer, scheduler and ABF buffer all resumed)."""

import hashlib
import json

import pytest
import torch
from astra_grpo.checkpoint import saved_steps
from astra_grpo.config import GRPOConfig, SFTConfig, load_config
from astra_grpo.grpo import train_grpo
from astra_grpo.sft import train_sft
from grpo_support import rl_sample


class Killed(Exception):
    pass


def kill_after(step):
    def on_step(done):
        if done == step:
            raise Killed(f"killed after step {done}")
    return on_step


def coin_reward(episode):
    """0 or 1 from the generated text: some groups have no variance, so ABF buffers and discards."""
    digest = hashlib.sha256(json.dumps(episode.messages[2:]).encode()).digest()
    return float(digest[0] % 2), {}


def weights(directory):
    from safetensors.torch import load_file

    return load_file(directory / "model.safetensors")


def same_weights(a, b):
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def steps_of(path, keys):
    return [{k: row.get(k) for k in keys} for row in map(json.loads, path.read_text().splitlines())]


@pytest.fixture
def samples(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(rl_sample(f"rl-{i}")) + "\n" for i in range(3)))
    return path


def grpo_config(tiny_llama, output, **overrides):
    values = dict(model=str(tiny_llama), output_dir=str(output), batch_size=2, group_size=2, mini_batch_size=2,
                  micro_batch_size=2, max_steps=4, max_turns=2, max_new_tokens=6, max_response_length=64,
                  learning_rate=1e-3, save_state_steps=1, save_weights_steps=2, keep_last_states=2, report_to=[],
                  abf_max_rounds=3, rollouts_out=str(output) + ".rollouts.jsonl")
    values.update(overrides)
    return load_config(GRPOConfig, None, values)


def test_grpo_resume_is_identical_to_an_uninterrupted_run(tiny_llama, samples, tmp_path, sandbox,
                                                          fresh_accelerate_state):
    whole = train_grpo(grpo_config(tiny_llama, tmp_path / "whole"), [str(samples)], pool=sandbox,
                       reward_fn=coin_reward)

    with pytest.raises(Killed):
        train_grpo(grpo_config(tiny_llama, tmp_path / "resumed"), [str(samples)], pool=sandbox,
                   reward_fn=coin_reward, on_step=kill_after(2))
    assert saved_steps(tmp_path / "resumed" / "state") == [1, 2]
    assert not (tmp_path / "resumed" / "final").exists()
    played = []
    resumed = train_grpo(grpo_config(tiny_llama, tmp_path / "resumed", resume=True), [str(samples)],
                         pool=sandbox, reward_fn=coin_reward, on_step=played.append)
    assert played == [3, 4]  # it continued; it did not start over

    assert same_weights(whole, resumed)
    assert same_weights(tmp_path / "whole" / "weights" / "step-000002", tmp_path / "resumed" / "weights" / "step-000002")
    keys = ["step", "loss", "rollout/reward_mean", "abf/rounds", "abf/buffer", "abf/discarded", "grad_norm"]
    whole_metrics = steps_of(tmp_path / "whole" / "metrics.jsonl", keys)
    assert whole_metrics == steps_of(tmp_path / "resumed" / "metrics.jsonl", keys)
    assert [m["step"] for m in whole_metrics] == [1, 2, 3, 4]
    assert any(m["abf/buffer"] or m["abf/discarded"] for m in whole_metrics)  # ABF state mattered
    rollouts = [(tmp_path / f"{name}.rollouts.jsonl").read_text().splitlines() for name in ("whole", "resumed")]
    strip = [[{k: v for k, v in json.loads(line).items() if k != "meta"} for line in lines] for lines in rollouts]
    assert strip[0] == strip[1]
    assert saved_steps(tmp_path / "whole" / "state") == [3, 4]  # only the newest K full states are kept
    assert sorted(p.name for p in (tmp_path / "whole" / "weights").iterdir()) == ["step-000002"]


def test_sft_resume_is_identical_to_an_uninterrupted_run(tiny_llama, tmp_path, fresh_accelerate_state):
    from astra_core.formats_doc import example

    data = tmp_path / "trajectories.jsonl"
    base = json.dumps(example("trajectory"))
    data.write_text("".join(base.replace("Oslo", city).replace("traj-81b0-0", f"t{i}") + "\n"
                            for i, city in enumerate(["Oslo", "Rome", "Lima", "Kyiv", "Baku"])))

    def config(name, **extra):
        return load_config(SFTConfig, None, dict(model=str(tiny_llama), output_dir=str(tmp_path / name), batch_size=2,
                                                 micro_batch_size=1, max_steps=4, learning_rate=1e-3, report_to=[],
                                                 save_state_steps=1, save_weights_steps=0, **extra))

    whole = train_sft(config("whole"), [str(data)])
    with pytest.raises(Killed):
        train_sft(config("resumed"), [str(data)], on_step=kill_after(3))
    played = []
    resumed = train_sft(config("resumed", resume=True), [str(data)], on_step=played.append)
    assert played == [4]
    assert same_weights(whole, resumed)
    keys = ["step", "loss", "lr", "grad_norm", "epoch"]
    assert steps_of(tmp_path / "whole" / "metrics.jsonl", keys) == steps_of(tmp_path / "resumed" / "metrics.jsonl", keys)


def signal_after(step, signum):
    import os

    def on_step(done):
        if done == step:
            os.kill(os.getpid(), signum)  # as a scheduler's time limit would, in the middle of the run
    return on_step


def test_sigterm_stops_grpo_after_its_step_with_the_state_saved_and_resume_is_identical(
        tiny_llama, samples, tmp_path, sandbox, fresh_accelerate_state):
    """SIGTERM at step 2 of 4, with full states due only every 3 steps: the run finishes step 2, saves its state
    there anyway, stops (exit code 143, no final weights); `--resume` ends exactly where an uninterrupted run does."""
    import signal

    from astra_grpo.preemption import Stopped

    whole = train_grpo(grpo_config(tiny_llama, tmp_path / "whole", save_state_steps=3), [str(samples)],
                       pool=sandbox, reward_fn=coin_reward)
    with pytest.raises(Stopped) as stopped:
        train_grpo(grpo_config(tiny_llama, tmp_path / "resumed", save_state_steps=3), [str(samples)], pool=sandbox,
                   reward_fn=coin_reward, on_step=signal_after(2, signal.SIGTERM))
    assert stopped.value.exit_code == 143
    assert "SIGTERM: stopped after step 2" in str(stopped.value) and "--resume continues" in str(stopped.value)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handed back
    assert saved_steps(tmp_path / "resumed" / "state") == [2]
    assert not (tmp_path / "resumed" / "final").exists()
    played = []
    resumed = train_grpo(grpo_config(tiny_llama, tmp_path / "resumed", save_state_steps=3, resume=True),
                         [str(samples)], pool=sandbox, reward_fn=coin_reward, on_step=played.append)
    assert played == [3, 4]
    assert same_weights(whole, resumed)
    keys = ["step", "loss", "rollout/reward_mean", "abf/buffer", "grad_norm"]
    assert steps_of(tmp_path / "whole" / "metrics.jsonl", keys) == steps_of(tmp_path / "resumed" / "metrics.jsonl", keys)


def test_sigusr1_stops_sft_after_its_step_with_the_state_saved(tiny_llama, tmp_path, fresh_accelerate_state):
    """Slurm's `--signal=USR1@300` warning: exit code 138, the state of the step it finished, no state saving
    configured at all."""
    import signal

    from astra_core.formats_doc import example
    from astra_grpo.preemption import Stopped

    data = tmp_path / "trajectories.jsonl"
    data.write_text("".join(json.dumps(dict(example("trajectory"), id=f"t{i}")) + "\n" for i in range(4)))
    config = load_config(SFTConfig, None, dict(model=str(tiny_llama), output_dir=str(tmp_path / "out"), batch_size=2,
                                               micro_batch_size=1, max_steps=4, learning_rate=1e-3, report_to=[],
                                               save_state_steps=0, save_weights_steps=0))
    with pytest.raises(Stopped) as stopped:
        train_sft(config, [str(data)], on_step=signal_after(1, signal.SIGUSR1))
    assert stopped.value.exit_code == 138 and "SIGUSR1: stopped after step 1" in str(stopped.value)
    assert saved_steps(tmp_path / "out" / "state") == [1]
    played = []
    train_sft(load_config(SFTConfig, None, {**config.__dict__, "resume": True}), [str(data)], on_step=played.append)
    assert played == [2, 3, 4]
