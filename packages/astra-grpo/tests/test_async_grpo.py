"""Asynchronous GRPO end to end (max_staleness > 0): the transformers engine in its own process, real jailed
sandbox sessions, the real tiny Llama. And max_staleness 0 is the synchronous loop, bit for bit: the loop as it
was before asynchronous GRPO (grpo.py at the commit this work started from, loaded from git) gives the same
losses, gradient norms and weights under the same seed."""

import importlib.util
import json
import multiprocessing
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
from astra_core.schema import validate
from astra_grpo import grpo
from astra_grpo.async_rollout import ProducerFailed
from astra_grpo.grpo import train_grpo
from grpo_support import rl_sample
from test_resume import Killed, coin_reward, grpo_config, kill_after, same_weights

SYNC_LOOP_COMMIT = "48c445a"  # grpo.py before asynchronous GRPO
REPO = Path(__file__).resolve().parents[3]


def config(tiny_llama, output, **overrides):
    return grpo_config(tiny_llama, output, **{"max_steps": 3, "save_weights_steps": 0, "keep_last_states": 3,
                                             "abf_max_rounds": 2, **overrides})


@pytest.fixture
def samples(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(rl_sample(f"rl-{i}")) + "\n" for i in range(3)))
    return path


def metrics(output):
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


def rollouts(output):
    return [json.loads(line) for line in Path(str(output) + ".rollouts.jsonl").read_text().splitlines()]


def sync_loop_before_async():
    """grpo.py as it was before this change, as a module of its own (it imports today's helpers)."""
    source = subprocess.run(["git", "show", f"{SYNC_LOOP_COMMIT}:packages/astra-grpo/src/astra_grpo/grpo.py"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout
    spec = importlib.util.spec_from_loader("astra_grpo._grpo_before_async", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, f"grpo.py@{SYNC_LOOP_COMMIT}", "exec"), module.__dict__)  # noqa: S102 - our own file
    return module


def no_workers_left():
    """Every thread and process a run started is gone (give a terminated child a moment to be reaped)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        threads = [t.name for t in threading.enumerate() if t.name == "astra-grpo-rollouts"]
        children = [p for p in multiprocessing.active_children() if p.name == "astra-grpo-engine"]
        if not threads and not children:
            return True
        time.sleep(0.1)
    return False


def test_max_staleness_0_is_the_synchronous_loop_bit_for_bit(tiny_llama, samples, tmp_path, sandbox,
                                                             fresh_accelerate_state):
    before = sync_loop_before_async().train_grpo(config(tiny_llama, tmp_path / "before"), [str(samples)],
                                                  pool=sandbox, reward_fn=coin_reward)
    fresh_accelerate_state_reset()
    now = train_grpo(config(tiny_llama, tmp_path / "now", max_staleness=0), [str(samples)], pool=sandbox,
                     reward_fn=coin_reward)
    keys = ("loss", "grad_norm", "clip_fraction", "ratio_mean", "update_tokens", "rollout/reward_mean",
            "abf/rounds", "abf/from_buffer")
    old, new = metrics(tmp_path / "before"), metrics(tmp_path / "now")
    assert [{k: m.get(k) for k in keys} for m in old] == [{k: m.get(k) for k in keys} for m in new]
    assert any(m["grad_norm"] for m in new)  # it learned something
    assert same_weights(before, now)
    # the synchronous loop trains fresh groups (0) and ABF's held-over ones (1): never older
    assert all(m["staleness/max"] <= 1 for m in new)


def fresh_accelerate_state_reset():
    from accelerate.state import AcceleratorState, GradientState, PartialState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    PartialState._reset_state()


@pytest.mark.parametrize("weight_sync", ["turn", "episode"])
def test_an_asynchronous_run_trains_within_its_staleness_bound(tiny_llama, samples, tmp_path, sandbox,
                                                               fresh_accelerate_state, weight_sync, capfd):
    out = tmp_path / "async"
    final = train_grpo(config(tiny_llama, out, max_staleness=1, weight_sync=weight_sync, max_steps=4),
                       [str(samples)], pool=sandbox, reward_fn=coin_reward)
    assert (final / "model.safetensors").exists()
    assert not same_weights(final, Path(config(tiny_llama, out).model))  # the weights moved
    steps = metrics(out)
    assert [m["step"] for m in steps] == [1, 2, 3, 4]
    for m in steps:
        assert m["staleness/max"] <= 2  # k = 1, and one more for a group ABF held over
        assert 0 <= m["engine_idle_fraction"] <= 1 and 0 <= m["trainer_idle_fraction"] <= 1
        assert "is/weight_mean" in m  # the decoupled objective's behaviour weights
    records = rollouts(out)
    for record in records:  # policy_versions, staleness, status and reason as the rollout schema documents them
        validate(record, "rollout")
    trained = [r for r in records if r["status"] == "trained"]
    assert trained and all(r["staleness"] == r["step"] - 1 - min(r["policy_versions"] or [r["step"] - 1])
                           for r in trained if r["policy_versions"])
    assert all(r["staleness"] <= 2 for r in trained)
    uids = [r["id"].split("/step")[0] for r in trained if r["member"] == 0]
    assert len(uids) == len(set(uids))  # no group trained twice
    if weight_sync == "episode":  # every episode plays on one version
        assert all(len(set(r["policy_versions"])) <= 1 for r in records)
    else:
        assert all(r["policy_versions"] == sorted(r["policy_versions"]) for r in records)
    assert "staleness (versions: groups)" in capfd.readouterr().err
    assert no_workers_left()


def test_asynchronous_kill_and_resume_never_trains_a_group_twice(tiny_llama, samples, tmp_path, sandbox,
                                                                 fresh_accelerate_state):
    out = tmp_path / "resumed"
    with pytest.raises(Killed):
        train_grpo(config(tiny_llama, out, max_staleness=2, max_steps=4), [str(samples)], pool=sandbox,
                   reward_fn=coin_reward, on_step=kill_after(2))
    assert no_workers_left()
    played = []
    fresh_accelerate_state_reset()
    final = train_grpo(config(tiny_llama, out, max_staleness=2, max_steps=4, resume=True), [str(samples)],
                       pool=sandbox, reward_fn=coin_reward, on_step=played.append)
    assert played == [3, 4] and (final / "model.safetensors").exists()
    records = rollouts(out)
    assert sorted({r["step"] for r in records}) == [1, 2, 3, 4]
    trained = [r["id"].split("/step")[0] for r in records if r["status"] == "trained" and r["member"] == 0]
    assert len(trained) == len(set(trained)) == 4 * 2  # 4 steps of 2 groups, none twice
    # the stream restarts where the last trained round ended: the rounds in flight at the kill are re-rolled
    positions = sorted(int(uid.split("@")[1]) for uid in trained)
    assert positions == sorted(set(positions))
    assert [m["step"] for m in metrics(out)] == [1, 2, 3, 4]


def test_an_engine_process_killed_mid_episode_ends_the_run_with_its_error(tiny_llama, samples, tmp_path, sandbox,
                                                                          fresh_accelerate_state, monkeypatch):
    from astra_grpo.engine_process import EngineProcess

    killed = []
    generate = EngineProcess.generate

    def killed_while_generating(self, prompts, *args, **kwargs):  # the second round's turn: episodes in flight
        if len(killed) == 1:
            threading.Timer(0.01, os.kill, (self.pid, signal.SIGKILL)).start()
        killed.append(len(prompts))
        return generate(self, prompts, *args, **kwargs)

    monkeypatch.setattr(EngineProcess, "generate", killed_while_generating)
    started = time.monotonic()
    with pytest.raises(ProducerFailed, match=r"rollout engine process died \(exit code -9\)"):
        train_grpo(config(tiny_llama, tmp_path / "died", max_staleness=1, max_steps=3, max_turns=3),
                   [str(samples)], pool=sandbox, reward_fn=coin_reward)
    assert len(killed) == 2
    assert time.monotonic() - started < 120  # no hang
    assert no_workers_left()


def test_ctrl_c_during_an_update_stops_cleanly(tiny_llama, samples, tmp_path, sandbox, fresh_accelerate_state,
                                               monkeypatch):
    update = grpo._update
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            time.sleep(0.5)  # the producer is playing ahead meanwhile
            raise KeyboardInterrupt
        return update(*args, **kwargs)

    monkeypatch.setattr(grpo, "_update", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_grpo(config(tiny_llama, tmp_path / "interrupted", max_staleness=1, max_steps=4), [str(samples)],
                   pool=sandbox, reward_fn=coin_reward)
    assert no_workers_left()
    records = rollouts(tmp_path / "interrupted")
    # what the producer played ahead and no step took is in the file, discarded with the reason
    ahead = [r for r in records if r.get("reason")]
    assert ahead and all(r["status"] == "discarded" and "run ended" in r["reason"] for r in ahead)


def test_the_engine_process_reports_the_trainers_log_probs(tiny_llama):
    """The behaviour log-probs the engine process reports are the trainer's for the same weights and tokens."""
    from astra_grpo.engine_process import EngineProcess
    from astra_grpo.engines import Sampling
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    engine = EngineProcess(model, 2, [2], batch_size=4, seed=0)
    try:
        prompts = [[1, 5, 9, 13], [1, 7]]
        generations = engine.generate(prompts, [5, 5], Sampling(temperature=0.7), keys=[0, 1])
        assert all(g.version == 0 and len(g.logprobs) == len(g.token_ids) for g in generations)
        for prompt, generation in zip(prompts, generations, strict=True):
            ids = torch.tensor([prompt + generation.token_ids])
            with torch.no_grad():
                logits = model(ids).logits[0, len(prompt) - 1:-1].float() / 0.7
            expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(generation.token_ids)[:, None])[:, 0]
            assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.05)
        engine.push_weights(model, 7)
        assert all(g.version == 7 for g in engine.generate(prompts, [2, 2], Sampling(), keys=[0, 1]))
    finally:
        engine.close()
    assert no_workers_left()
