"""A real GRPO run with Qwen3's real chat template: 2 CPU processes (`accelerate launch`, gloo), a tiny
random-init Qwen3 whose tokenizer carries `qwen3.jinja` and Qwen3's special tokens, multi-turn episodes
in jailed environments, interactive samples whose user turns come from a user simulator over HTTP (its
replies RECORDED), 3 steps. Before the fixed token accounting this run ended at its first user turn."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from astra_grpo.cli import bundled_configs
from grpo_support import interactive_sample, rl_sample, user_replies
from template_families import save_tiny_family_model

pytestmark = pytest.mark.nsjail


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_three_grpo_steps_on_two_processes_with_qwen3s_template(recorded_llm, tmp_path):
    model = save_tiny_family_model(tmp_path / "tiny-qwen3", "qwen3")
    server = recorded_llm(replies=[user_replies] * 200)
    samples = tmp_path / "rl.jsonl"
    records = [{**interactive_sample(), "id": f"shop-{i}"} for i in range(2)] + [rl_sample(f"geo-{i}") for i in range(2)]
    samples.write_text("".join(json.dumps(r) + "\n" for r in records))
    out, rollouts = tmp_path / "out", tmp_path / "rollouts.jsonl"
    command = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file",
               str(bundled_configs() / "accelerate" / "cpu_2proc.yaml"), "--main_process_port", str(free_port()),
               "-m", "astra_grpo.cli", "train", str(samples), "--config", "grpo_tiny_cpu.yaml", "--model", str(model),
               "--output-dir", str(out), "--max-steps", "3", "--batch-size", "2", "--mini-batch-size", "2",
               "--group-size", "2", "--micro-batch-size", "2", "--max-turns", "4", "--max-new-tokens", "24",
               "--sandbox-pool-size", "4", "--abf-max-rounds", "1", "--report-to", "", "--model-dtype", "float32",
               "--user-base-url", server.base_url, "--user-max-tokens", "16", "--rollouts-out", str(rollouts)]
    result = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                            timeout=1500)
    assert result.returncode == 0, result.stderr[-4000:]

    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3]
    episodes = [json.loads(line) for line in rollouts.read_text().splitlines()]
    assert {e["step"] for e in episodes} == {1, 2, 3}
    assert not [e for e in episodes if e["finish_reason"] == "error"], "an episode failed"
    interactive = [e for e in episodes if e["sample_id"].startswith("shop")]
    assert interactive and any(e["user_turns"] >= 1 and e["num_turns"] >= 2 for e in interactive)
    assert any(m["role"] == "user" and m["content"].startswith("Two bags") for e in interactive for m in e["messages"])
    assert (out / "final" / "config.json").exists()
