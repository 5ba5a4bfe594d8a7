"""Batched generation with transformers on the training model (colocated by construction)."""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from astra_grpo.engines import Generation, Sampling, cut


class TransformersEngine:
    """`model` is the unwrapped policy. Under DeepSpeed ZeRO-3 the trainer gathers the sharded
    weights once around a whole rollout round (processes play different numbers of turns, so a
    per-call collective could not line up)."""

    def __init__(self, model, pad_id: int, stop_ids: list[int], *, batch_size: int = 64, share_prompts: bool = True):
        self.model = model
        self.pad_id = pad_id
        self.stop_ids = list(stop_ids)
        self.batch_size = batch_size
        self.share_prompts = share_prompts  # read a prompt repeated in one batch (a GRPO group) once

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
        cache = self._shared_prompt_cache(input_ids, attention)
        output = self.model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config,
                                     past_key_values=cache)
        stops = set(self.stop_ids)
        return [cut(row[width:].tolist(), budget, stops) for row, budget in zip(output, budgets, strict=True)]

    def _shared_prompt_cache(self, input_ids: torch.Tensor, attention: torch.Tensor):
        """The KV cache of every prompt but its last token, computed once per distinct prompt.

        A GRPO group's members all start from one prompt: reading it once instead of G times is
        most of a first turn's cost on CPU (long tool prompts, short replies). None when sharing is
        off or every prompt is distinct (plain `generate` then reads them itself).
        """
        if not self.share_prompts or input_ids.shape[1] < 2:
            return None
        rows = [tuple(row) for row in input_ids.tolist()]
        first_row_of = {}
        for index, row in enumerate(rows):
            first_row_of.setdefault(row, index)
        if len(first_row_of) == len(rows):
            return None
        distinct = list(first_row_of.values())
        slot_of = {row: slot for slot, row in enumerate(first_row_of)}
        mask = attention[distinct, :-1]
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)  # as `generate` numbers left-padded rows
        cache = self.model(input_ids=input_ids[distinct, :-1], attention_mask=mask, position_ids=positions,
                           use_cache=True).past_key_values
        cache.batch_select_indices(torch.tensor([slot_of[row] for row in rows], device=input_ids.device))
        return cache

    def push_weights(self, model) -> None:
        """Nothing to copy: this engine generates with the trained module itself."""

    def sleep(self) -> None:
        """Nothing held beyond the trained module."""

    def wake(self) -> None:
        """Nothing to restore."""
