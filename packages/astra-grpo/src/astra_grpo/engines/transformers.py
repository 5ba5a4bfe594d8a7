"""Batched generation with transformers on the training model (colocated by construction)."""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from astra_grpo.engines import Generation, Sampling, cut


class TransformersEngine:
    """`model` is the unwrapped policy. Under DeepSpeed ZeRO-3 the trainer gathers the sharded
    weights once around a whole rollout round (processes play different numbers of turns, so a
    per-call collective could not line up)."""

    def __init__(self, model, pad_id: int, stop_ids: list[int], *, batch_size: int = 64):
        self.model = model
        self.pad_id = pad_id
        self.stop_ids = list(stop_ids)
        self.batch_size = batch_size

    def generate(self, prompts: list[list[int]], max_new_tokens: list[int], sampling: Sampling) -> list[Generation]:
        if any(budget < 1 for budget in max_new_tokens):
            raise ValueError("every prompt needs a token budget >= 1")
        # Similar lengths together: less left-padding per batch. Results go back in input order.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[Generation | None] = [None] * len(prompts)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start:start + self.batch_size]
                    outputs = self._generate([prompts[i] for i in chunk], [max_new_tokens[i] for i in chunk], sampling)
                    for index, generation in zip(chunk, outputs, strict=True):
                        results[index] = generation
        finally:
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def _generate(self, prompts: list[list[int]], budgets: list[int], sampling: Sampling) -> list[Generation]:
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        config = GenerationConfig(
            do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k or None, max_new_tokens=max(budgets), eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id)
        output = self.model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
        stops = set(self.stop_ids)
        return [cut(row[width:].tolist(), budget, stops) for row, budget in zip(output, budgets, strict=True)]

    def push_weights(self, model) -> None:
        """Nothing to copy: this engine generates with the trained module itself."""

    def sleep(self) -> None:
        """Nothing held beyond the trained module."""

    def wake(self) -> None:
        """Nothing to restore."""
