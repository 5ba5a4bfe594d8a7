"""A stand-in `vllm` module for the engine's unit tests (vLLM itself needs a GPU).

It enforces the rules the real engine has (test_vllm_contract.py holds the engine's calls to the
real package's names and signatures): generating needs every tag awake and weights that were not
dropped by a level-2 sleep since the last load; loading needs the weights awake; waking a tag that
is awake, or sleeping while the weights sleep, is an error here (vLLM would only log a warning
and do nothing, which hides a wrong order).
"""

from __future__ import annotations

import types

import torch

SLEEP_TAGS = ("weights", "kv_cache")


class FakeModel:
    def __init__(self, llm: FakeLLM):
        self.llm = llm
        self.loads: list[list[tuple[str, torch.Tensor]]] = []  # one list per load_weights call

    def load_weights(self, weights):
        if "weights" in self.llm.asleep:
            raise AssertionError("load_weights while vLLM's weights sleep")
        batch = [(name, tensor.detach().clone()) for name, tensor in weights]
        self.loads.append(batch)
        self.llm.events.append(("load", tuple(name for name, _ in batch)))
        self.llm.weights_valid = True
        return {name for name, _ in batch}


class FakeLLM:
    instances: list[FakeLLM] = []

    def __init__(self, model: str, **kwargs):
        self.kwargs = {"model": model, **kwargs}
        self.events: list = []
        self.asleep: set[str] = set()
        self.weights_valid = True
        self.model = FakeModel(self)
        FakeLLM.instances.append(self)

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True):
        if self.asleep:
            raise AssertionError(f"generate while {sorted(self.asleep)} sleep")
        if not self.weights_valid:
            raise AssertionError("generate with weights dropped by sleep(level=2) and not reloaded")
        self.events.append("generate")
        outputs = []
        for prompt, params in zip(prompts, sampling_params, strict=True):
            ids = [t + 1 for t in prompt["prompt_token_ids"]] + params.stop_token_ids[:1] + [99]
            ids = ids[:params.max_tokens]
            logprobs = None
            if params.logprobs is not None:  # one {token: Logprob} per position, the chosen token among them
                logprobs = [{token: types.SimpleNamespace(logprob=-0.5 * (k + 1), rank=1), token + 1000:
                             types.SimpleNamespace(logprob=-9.0, rank=2)} for k, token in enumerate(ids)]
            completion = types.SimpleNamespace(token_ids=ids, logprobs=logprobs)
            outputs.append(types.SimpleNamespace(outputs=[completion]))
        return outputs

    def apply_model(self, func):
        return [func(self.model)]

    def sleep(self, level: int = 1, mode: str = "abort"):
        if "weights" in self.asleep:
            raise AssertionError("sleep while the weights already sleep")
        self.events.append(("sleep", level))
        self.asleep = set(SLEEP_TAGS)
        self.weights_valid = level < 2

    def wake_up(self, tags: list[str] | None = None):
        for tag in tags or SLEEP_TAGS:
            if tag not in self.asleep:
                raise AssertionError(f"wake_up({tag!r}) while it is awake")
            self.asleep.discard(tag)
        self.events.append(("wake", tuple(tags) if tags else None))
        return not self.asleep

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False):
        self.events.append("reset")
        return True


def fake_vllm_module() -> types.ModuleType:
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = lambda **kwargs: types.SimpleNamespace(**kwargs)
    FakeLLM.instances.clear()
    return module
