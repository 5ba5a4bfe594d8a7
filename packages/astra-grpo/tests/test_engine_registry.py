"""A new engine kind from outside the package: defined here, registered by name (or installed under the entry
point group `astra_grpo.engines`), chosen with `engine: name`, and trained with; nothing inside astra_grpo
changes for it. Only the public interface is used (astra_grpo.engines)."""

import json
from pathlib import Path

import pytest
from astra_grpo.config import ConfigError, GRPOConfig, load_config
from astra_grpo.engines import Engine, Generation, Sampling, cut, engine_kinds, make_engine, register_engine
from astra_grpo.engines.shared import SharedEngine
from astra_grpo.grpo import train_grpo
from test_resume import grpo_config


class CountingEngine(Engine):
    """Replies "Answer n." (n: replies so far, modulo 3, so groups differ), tokenized as a real engine's ids."""

    def __init__(self, tokenizer, stop_id: int, version: int):
        self.tokenizer, self.stop_id, self.version = tokenizer, stop_id, version
        self.replies, self.pushed, self.sleeps, self.closed = 0, [], 0, False

    def generate(self, prompts: list[list[int]], max_new_tokens: list[int], sampling: Sampling,
                 keys: list | None = None) -> list[Generation]:
        out = []
        for budget in max_new_tokens:
            self.replies += 1
            text = f"Answer {self.replies % 3}."
            out.append(cut(self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.stop_id], budget,
                           {self.stop_id}))
        return out

    def push_weights(self, model, version: int | None = None) -> None:
        self.pushed.append(self.advance_version(version))

    def sleep(self) -> None:
        self.sleeps += 1


BUILT: list[CountingEngine] = []


def answer_1(episode):
    """1 for the reply "Answer 1.", else 0: groups with reward variance, so the updates have a gradient."""
    return float(any(m.get("content") == "Answer 1." for m in episode.messages if m["role"] == "assistant")), {}


def counting_engine(config, policy, tokenizer, renderer, version=0, halt=None) -> Engine:
    """An asynchronous run (max_staleness > 0) generates while the trainer pushes: the engine shared behind a lock."""
    BUILT.append(CountingEngine(tokenizer, renderer.stop_ids[0], version))
    return SharedEngine(BUILT[-1], version) if config.max_staleness else BUILT[-1]


@pytest.fixture
def samples(tmp_path):
    from grpo_support import rl_sample

    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(rl_sample(f"rl-{i}")) + "\n" for i in range(3)))
    return path


def test_a_registered_engine_trains_two_grpo_steps(tiny_llama, samples, tmp_path, sandbox, fresh_accelerate_state):
    register_engine("counting", counting_engine)
    BUILT.clear()
    assert "counting" in engine_kinds()
    output = tmp_path / "run"
    final = train_grpo(grpo_config(tiny_llama, output, engine="counting", max_steps=2, save_weights_steps=0),
                       [str(samples)], pool=sandbox, reward_fn=answer_1)

    [engine] = BUILT
    assert engine.replies > 0 and engine.sleeps >= 2  # it played the rollouts, and slept through the updates
    assert engine.pushed == [1, 2] and engine.version == 2  # a push after each update, one version each
    steps = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and any(s["grad_norm"] > 0 for s in steps)
    assert (final / "model.safetensors").exists()
    rollouts = [json.loads(line) for line in Path(str(output) + ".rollouts.jsonl").read_text().splitlines()]
    replies = [m["content"] for r in rollouts for m in r["messages"] if m["role"] == "assistant"]
    assert replies and all(reply.startswith("Answer ") for reply in replies)


def test_a_registered_engine_trains_an_asynchronous_run(tiny_llama, samples, tmp_path, sandbox,
                                                       fresh_accelerate_state):
    register_engine("counting", counting_engine)
    BUILT.clear()
    output = tmp_path / "async"
    train_grpo(grpo_config(tiny_llama, output, engine="counting", max_steps=2, save_weights_steps=0, max_staleness=1),
               [str(samples)], pool=sandbox, reward_fn=answer_1)
    [engine] = BUILT
    assert engine.replies > 0 and len(engine.pushed) == 2 and engine.sleeps == 0  # generating while it trains
    staleness = [json.loads(line)["staleness/max"] for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert len(staleness) == 2 and max(staleness) <= 1


def test_an_engine_installed_under_the_entry_point_group_is_a_kind(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "fixed_engines-0.dist-info").mkdir(parents=True)
    (site / "fixed_engines-0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: fixed-engines\n"
                                                                   "Version: 0\n")
    (site / "fixed_engines-0.dist-info" / "entry_points.txt").write_text(
        "[astra_grpo.engines]\nfixed = fixed_engine:make\n")
    (site / "fixed_engine.py").write_text("def make(config, policy, tokenizer, renderer, version=0, halt=None):\n"
                                          "    return ('fixed', config.engine, version)\n")
    monkeypatch.syspath_prepend(str(site))

    assert {"transformers", "vllm", "fixed"} <= set(engine_kinds())
    config = load_config(GRPOConfig, None, {"engine": "fixed"})
    assert make_engine(config, None, None, None, version=3) == ("fixed", "fixed", 3)


def test_an_unknown_engine_kind_is_refused_naming_the_known_ones():
    with pytest.raises(ConfigError, match=r"^config field engine: unknown engine kind 'vlm'; known: .*transformers "
                                          r"\| vllm"):
        load_config(GRPOConfig, None, {"engine": "vlm"})
