"""Whole runs on three families whose replies are not Hermes JSON: a Qwen3.5-format, a GLM-4.5 and a gpt-oss
template (their real templates from the trl wheel, on tiny tokenizers holding their special tokens; a tiny
random-init Qwen3-architecture model). Each is what a researcher would run, command by command:

1. `astra-grpo train` on the random-init model: it writes no readable call, and its first step says so;
2. `astra-grpo sft` on a gold trajectory (an honest warm start: the tiny model overfits it in 100 steps);
3. `astra-grpo train`, 2 steps in jailed environments: the rollouts run the tools the model calls, in the
   family's own format, and score above 0;
4. `astra-core serve --model` the trained checkpoint: asked with tools, it answers with the call, read back
   through the model's own template (its tokenizer carries the response template it was trained with).

`make test` runs gpt-oss (harmony channels, a call that stops the turn on `<|call|>`: the farthest from Hermes);
the Qwen3.5 and GLM-4.5 runs (half a minute each) are in `make test-slow`, and the template matrix
(test_template_matrix.py) reads and renders their calls in `make test`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from astra_core.formats_doc import example
from template_families import save_tiny_family_model

pytestmark = pytest.mark.nsjail

BIN = Path(sys.executable).parent
FAMILIES = {"qwen3_5_think": "qwen3_5", "glm4moe": "glm4_moe", "gptoss": "gpt_oss"}
COMMON = ["--report-to", "", "--save-weights-steps", "0", "--save-state-steps", "0"]


def run(*command: str, timeout: int = 600) -> subprocess.CompletedProcess:
    done = subprocess.run([str(BIN / command[0]), *command[1:]], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def call(index: int, name: str, **arguments) -> dict:
    return {"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def gold_trajectory(sample: dict) -> dict:
    """The sample played right: the capital, then its population, then the answer."""
    return {**example("trajectory"), "id": "gold", "task_id": sample["id"], "tools": sample["tools"],
            "messages": sample["messages"] + [
                {"role": "assistant", "content": None, "tool_calls": [call(1, "get_capital", country="Norway")]},
                {"role": "tool", "tool_call_id": "call_1", "name": "get_capital", "content": '{"capital": "Oslo"}'},
                {"role": "assistant", "content": None, "tool_calls": [call(2, "get_population", city="Oslo")]},
                {"role": "tool", "tool_call_id": "call_2", "name": "get_population",
                 "content": '{"population": "709,000"}'},
                {"role": "assistant", "content": "Oslo, the capital of Norway, has 709,000 people."}]}


def step_value(stderr: str, step: int, key: str) -> float:
    line = next(line for line in stderr.splitlines() if line.startswith(f"step {step}: "))
    return float(next(part.split("=")[1] for part in line.split() if part.startswith(f"{key}=")))


def train(samples: Path, model: Path, out: Path, steps: int) -> subprocess.CompletedProcess:
    return run("astra-grpo", "train", str(samples), "--config", "grpo_tiny_cpu.yaml", "--model", str(model),
               "--output-dir", str(out), "--rollouts-out", str(out / "rollouts.jsonl"), "--max-steps", str(steps),
               "--abf-max-rounds", "1", "--sandbox-pool-size", "4", *COMMON)


@pytest.mark.parametrize("family", [pytest.param(family, marks=[] if family == "gptoss" else pytest.mark.slow)
                                    for family in FAMILIES])
def test_a_warm_started_tiny_model_calls_tools_in_its_familys_format_and_scores(family, tmp_path):
    sample = example("rl_sample")
    samples = tmp_path / "rl.jsonl"
    samples.write_text(json.dumps(sample) + "\n")
    model = save_tiny_family_model(tmp_path / "random-init", family)

    # 1. Random weights: the first step's line counts the readable calls, and says so when there is none (with a
    # seeded sampler, never for the multi-token markers of Qwen3.5 and gpt-oss; GLM's `<tool_call>` is one token,
    # and any text after it names a call).
    untrained = train(samples, model, tmp_path / "untrained", steps=1)
    readable = step_value(untrained.stderr, 1, "rollout/readable_calls_mean")
    warned = "no episode of the first step made a tool call that could be read" in untrained.stderr
    assert warned == (readable == 0)
    if family != "glm4moe":
        assert warned and f"replies read as {FAMILIES[family]}" in untrained.stderr

    # 2. An honest warm start: SFT on the gold trajectory, laid out in the family's own format.
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps(gold_trajectory(sample)) + "\n")
    run("astra-grpo", "sft", str(gold), "--model", str(model), "--output-dir", str(tmp_path / "sft"),
        "--max-steps", "100", "--batch-size", "2", "--micro-batch-size", "2", "--learning-rate", "3e-3",
        "--lr-scheduler", "constant", "--warmup-ratio", "0", "--num-epochs", "1000", "--max-length", "4096",
        "--logging-steps", "50", *COMMON)

    # 3. Two GRPO steps: the tools run, the rewards are above 0.
    trained = train(samples, tmp_path / "sft" / "final", tmp_path / "grpo", steps=2)
    assert step_value(trained.stderr, 1, "rollout/readable_calls_mean") > 0
    episodes = [json.loads(line) for line in (tmp_path / "grpo" / "rollouts.jsonl").read_text().splitlines()]
    assert {e["step"] for e in episodes} == {1, 2} and not [e for e in episodes if e["finish_reason"] == "error"]
    ran = [(m["name"], m["content"]) for e in episodes for m in e["messages"] if m["role"] == "tool" and "name" in m]
    assert ("get_capital", '{"capital": "Oslo"}') in ran
    called = [c["function"] for e in episodes for m in e["messages"] for c in m.get("tool_calls") or []]
    assert {"name": "get_capital", "arguments": '{"country": "Norway"}'} in called
    assert max(e["reward"] for e in episodes) > 0

    # 4. The trained checkpoint, served, answers with the call: read its own way, typed.
    final = tmp_path / "grpo" / "final"
    assert json.loads((final / "tokenizer_config.json").read_text())["response_template"]
    port_file = tmp_path / "port"
    server = subprocess.Popen([str(BIN / "astra-core"), "serve", "--model", str(final), "--port", "0", "--port-file",
                               str(port_file), "--exit-with-parent"], stderr=subprocess.PIPE, text=True)
    try:
        import time

        import httpx

        deadline = time.monotonic() + 120
        while not port_file.exists() or not port_file.read_text().strip():
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
            time.sleep(0.2)
        reply = httpx.post(f"http://127.0.0.1:{port_file.read_text().strip()}/v1/chat/completions", timeout=120,
                           json={"messages": sample["messages"], "tools": sample["tools"], "temperature": 0}).json()
    finally:
        server.terminate()
        server.wait(timeout=30)
    [choice] = reply["choices"]
    assert choice["finish_reason"] == "tool_calls", choice
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_capital"]
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {"country": "Norway"}
