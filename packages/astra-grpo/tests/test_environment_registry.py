"""A new environment kind from outside the package (issue 61): a small stateful environment defined here, registered
by name, named by samples as `{"environment": {"counter": {...}}}`, checked, opened, played and scored through
its declaration, and trained on for two GRPO steps with nothing inside astra_grpo changed. Only the public interface
is used (astra_grpo.environments, astra_grpo.engines, train_grpo)."""

import contextlib
import json
from dataclasses import dataclass

import pytest
from astra_core.schema import RecordError
from astra_grpo.data import check_rl_sample
from astra_grpo.engines import Engine, Generation, Sampling, cut, register_engine
from astra_grpo.environments import EnvironmentKind, environment_kinds, register_environment
from astra_grpo.grpo import train_grpo
from test_resume import grpo_config

ADD = {"type": "function", "function": {"name": "add", "description": "Add n to the counter.",
                                        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}},
                                                       "required": ["n"]}}}


@dataclass
class Result:
    output: str
    ok: bool = True
    kind: str = "ok"


class CounterSession:
    """A counter starting where the sample says; `add` moves it, reaching `stop_at` ends the episode."""

    def __init__(self, start: int, stop_at: int | None):
        self.value, self.stop_at, self.done, self.calls = start, stop_at, False, []

    def call(self, name: str, arguments, call_id: str) -> Result:
        self.calls.append(call_id)
        if name != "add" or not isinstance(arguments, dict) or not isinstance(arguments.get("n"), int):
            return Result("Error: add takes an integer n", False, "error")
        self.value += arguments["n"]
        self.done = self.stop_at is not None and self.value >= self.stop_at
        return Result(f"The counter is {self.value}.")

    def state(self) -> dict:
        return {"value": self.value}


class Counter(EnvironmentKind):
    """`{"counter": {"start": 3, "stop_at": 99}}`: one counter per episode; the run's resources count sessions."""

    name = "counter"

    def __init__(self):
        self.opened, self.sessions = 0, []

    def check(self, sample: dict) -> None:
        if not isinstance(sample["environment"]["counter"].get("start"), int):
            raise RecordError("the counter needs an integer start", record_id=sample.get("id"),
                              field="environment.counter.start")

    @contextlib.contextmanager
    def open(self, config, *, eager: bool):
        self.opened += 1
        yield self.sessions

    @contextlib.contextmanager
    def session(self, resources, sample: dict):
        spec = sample["environment"]["counter"]
        resources.append(CounterSession(spec["start"], spec.get("stop_at")))
        yield resources[-1]

    def state(self, resources, episode) -> dict:
        return episode.session.state() if episode.session is not None else {
            "value": episode.sample["environment"]["counter"]["start"]}


class AddingEngine(Engine):
    """Calls add(2), then add(1), alternating over episodes; answers once it has seen the counter."""

    def __init__(self, tokenizer, stop_id: int):
        self.tokenizer, self.stop_id, self.episodes = tokenizer, stop_id, 0

    def generate(self, prompts, max_new_tokens, sampling: Sampling, keys=None) -> list[Generation]:
        out = []
        for prompt, budget in zip(prompts, max_new_tokens, strict=True):
            if "The counter is" in self.tokenizer.decode(prompt):
                text = "Done."
            else:
                self.episodes += 1
                call = {"name": "add", "arguments": {"n": 2 if self.episodes % 2 else 1}}
                text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
            out.append(cut(self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.stop_id], budget,
                           {self.stop_id}))
        return out

    def push_weights(self, model, version: int | None = None) -> None:
        self.advance_version(version)


def counter_sample(sample_id: str, start) -> dict:
    return {"id": sample_id, "messages": [{"role": "user", "content": f"Bring the counter from {start} to 5."}],
            "tools": [ADD], "environment": {"counter": {"start": start}},
            "reward": {"kind": "state", "expected_state": {"value": 5}}, "meta": {"provenance": []}}


@pytest.fixture
def counter():
    kind = Counter()
    register_environment(kind)
    yield kind
    environment_kinds().pop("counter")


def test_a_registered_environment_is_checked_by_its_own_declaration(counter):
    check_rl_sample(counter_sample("ok", 3))
    with pytest.raises(RecordError) as caught:
        check_rl_sample(counter_sample("bad", "three"))
    assert caught.value.field == "environment.counter.start"
    unknown = {**counter_sample("typo", 3), "environment": {"countr": {"start": 3}}}
    with pytest.raises(RecordError) as caught:
        check_rl_sample(unknown)
    assert caught.value.field == "environment" and "known: code, counter, openenv, tau2" in caught.value.message


def test_two_grpo_steps_on_a_registered_environment_with_its_state_as_the_reward(counter, tiny_llama, tmp_path,
                                                                                  fresh_accelerate_state):
    register_engine("adding", lambda config, policy, tokenizer, renderer, version=0, halt=None:
                    AddingEngine(tokenizer, renderer.stop_ids[0]))
    samples = tmp_path / "counter.jsonl"
    samples.write_text("".join(json.dumps(counter_sample(f"c-{i}", 3)) + "\n" for i in range(2)))
    output = tmp_path / "run"
    train_grpo(grpo_config(tiny_llama, output, engine="adding", max_steps=2, save_weights_steps=0,
                           save_state_steps=0, max_new_tokens=48, max_response_length=300), [str(samples)])

    assert counter.opened == 1  # the run's resources, opened once before the first step
    assert counter.sessions and all(s.calls for s in counter.sessions)  # every episode played in its own counter
    assert all(call_id for s in counter.sessions for call_id in s.calls)  # the common signature: with call ids
    steps = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and all(not s["update_skipped"] for s in steps)
    assert any(s["grad_norm"] > 0 for s in steps)
    rollouts = [json.loads(line) for line in (tmp_path / "run.rollouts.jsonl").read_text().splitlines()]
    for record in rollouts:  # the state verifier over the counter's final state: 3 + 2 reaches 5, 3 + 1 does not
        added = json.loads(record["messages"][1]["tool_calls"][0]["function"]["arguments"])["n"]
        assert record["reward"] == (1.0 if 3 + added == 5 else 0.0), record
    assert {r["reward"] for r in rollouts} == {0.0, 1.0}
