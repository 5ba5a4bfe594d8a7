"""Batched multi-turn generation with transformers on the training model (colocated by construction).

Each live episode keeps its KV cache between its turns (`keys` name the episodes): a turn reads only
what is new since the episode's last turn, the observation tokens, never the whole conversation again.
Live episodes of different lengths generate in one batch: their caches are left-padded to a common
length and their new tokens follow, with an attention mask over the gaps and position ids that count
real tokens only (what `generate` does for left padding). A first-turn prompt that repeats in a call,
a GRPO group's, is read once. The decode loop is written out here (not `model.generate`) because
`generate` cannot continue a batch of caches of different lengths.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import torch
from astra_core.local.kv_cache import cache_argument
from transformers import DynamicCache
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from astra_grpo.engines import Engine, Generation, Sampling


@dataclass
class _Cached:
    """Keys and values of one sequence: per layer (k, v) of shape [heads, len(tokens), head_dim]."""

    tokens: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]


class TransformersEngine(Engine):
    """`model` is the unwrapped policy. Under DeepSpeed ZeRO-3 the trainer gathers the sharded
    weights once around a whole rollout round (processes play different numbers of turns, so a
    per-call collective could not line up)."""

    def __init__(self, model, pad_id: int, stop_ids: list[int], *, batch_size: int = 64, share_prompts: bool = True,
                 keep_cache: bool = True, report_logprobs: bool = False):
        self.model = model
        self.pad_id = pad_id
        self.stop_ids = set(stop_ids)
        self.batch_size = batch_size
        self.share_prompts = share_prompts  # read a prompt repeated in one call (a GRPO group) once
        self.keep_cache = keep_cache        # keep each keyed episode's KV cache for its next turn
        # report each sampled token's log-prob at the sampling temperature (before top-k/top-p), as the trainer
        # computes it: the behaviour policy of the decoupled objective (engines/correction.py)
        self.report_logprobs = report_logprobs
        self._cached: dict[Hashable, _Cached] = {}

    def generate(self, prompts: list[list[int]], max_new_tokens: list[int], sampling: Sampling,
                 keys: list[Hashable] | None = None) -> list[Generation]:
        """One continuation per prompt. `keys` (one per prompt) name the episodes: a prompt that extends
        what its key generated last time continues from that cache; caches of keys not in this call are
        dropped (their episodes ended)."""
        if any(budget < 1 for budget in max_new_tokens):
            raise ValueError("every prompt needs a token budget >= 1")
        keys = list(keys) if keys is not None and self.keep_cache else [None] * len(prompts)
        # Similar lengths together: less padding per batch. Results go back in input order.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[Generation | None] = [None] * len(prompts)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start:start + self.batch_size]
                    outputs = self._generate([prompts[i] for i in chunk], [max_new_tokens[i] for i in chunk],
                                             sampling, [keys[i] for i in chunk])
                    for index, generation in zip(chunk, outputs, strict=True):
                        results[index] = generation
        finally:
            self.model.train(was_training)
            live = set(keys)
            self._cached = {key: entry for key, entry in self._cached.items() if key in live}
        return results  # type: ignore[return-value]

    # -- one batch ----------------------------------------------------------------------------------
    def _generate(self, prompts: list[list[int]], budgets: list[int], sampling: Sampling,
                  keys: list[Hashable | None]) -> list[Generation]:
        caches = [self._continuing(key, prompt) for key, prompt in zip(keys, prompts, strict=True)]
        self._read_new_prompts(prompts, caches)
        new = [prompt[len(cache.tokens):] for prompt, cache in zip(prompts, caches, strict=True)]  # >= 1 token
        past, mask = self._batch(caches)
        block, block_mask = _left_padded(new, self.pad_id, self._device)
        mask = torch.cat([mask, block_mask], dim=1)
        logits = self._forward(block, mask, past)
        processors = _warpers(sampling)
        generated: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        fed: list[list[int]] = [list(prompt) for prompt in prompts]  # tokens whose keys/values `past` holds
        live = [True] * len(prompts)
        for _ in range(max(budgets)):
            tokens = _pick(logits, processors, sampling)
            chosen = _chosen_logprobs(logits, tokens, sampling) if self.report_logprobs else None
            feeding = [False] * len(prompts)
            for row, token in enumerate(tokens):
                if not live[row]:
                    continue
                generated[row].append(token)
                if chosen is not None:
                    logprobs[row].append(chosen[row])
                feeding[row] = True
                if token in self.stop_ids or len(generated[row]) >= budgets[row]:
                    live[row] = False
            if not any(live):
                break
            # Feed every token sampled this step (a just-finished row's last one too, so its cache holds
            # it for the next turn); rows that finished earlier get a masked pad.
            step = torch.tensor([[t if f else self.pad_id] for t, f in zip(tokens, feeding, strict=True)],
                                device=mask.device)
            mask = torch.cat([mask, torch.tensor([[int(f)] for f in feeding], device=mask.device)], dim=1)
            logits = self._forward(step, mask, past)
            for row, token in enumerate(tokens):
                if feeding[row]:
                    fed[row].append(token)
        self._keep(keys, fed, past, mask)
        return [Generation(ids, bool(ids) and ids[-1] in self.stop_ids, logprobs[row] if self.report_logprobs else None)
                for row, ids in enumerate(generated)]

    @property
    def _device(self):
        return next(self.model.parameters()).device

    def _forward(self, input_ids: torch.Tensor, mask: torch.Tensor, past: DynamicCache) -> torch.Tensor:
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -input_ids.shape[1]:]
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                         **cache_argument(self.model, past), use_cache=True)
        return out.logits[:, -1].float()

    # -- caches -------------------------------------------------------------------------------------
    def _continuing(self, key: Hashable | None, prompt: list[int]) -> _Cached | None:
        """The episode's cache when this prompt extends the tokens it holds (by at least one token)."""
        cached = self._cached.get(key) if key is not None else None
        if cached is None or len(cached.tokens) >= len(prompt) or prompt[:len(cached.tokens)] != cached.tokens:
            return None
        return cached

    def _read_new_prompts(self, prompts: list[list[int]], caches: list[_Cached | None]) -> None:
        """Cache every prompt without one but its last token, each distinct prompt read once."""
        missing = [row for row, cache in enumerate(caches) if cache is None]
        if not missing:
            return
        distinct: dict[tuple[int, ...], list[int]] = {}
        for row in missing:
            key = tuple(prompts[row]) if self.share_prompts else (row, *prompts[row])
            distinct.setdefault(key, []).append(row)
        heads = [prompts[rows[0]][:-1] for rows in distinct.values()]
        empty = _Cached([], [])
        if max(len(h) for h in heads) == 0:
            for rows in distinct.values():
                for row in rows:
                    caches[row] = empty
            return
        ids, mask = _left_padded(heads, self.pad_id, self._device)
        past = DynamicCache()
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        self.model(input_ids=ids, attention_mask=mask, position_ids=positions, **cache_argument(self.model, past),
                   use_cache=True)
        for slot, rows in enumerate(distinct.values()):
            entry = _Cached(heads[slot], _row_layers(past, slot, mask[slot])) if heads[slot] else empty
            for row in rows:
                caches[row] = entry

    def _batch(self, caches: list[_Cached]) -> tuple[DynamicCache | None, torch.Tensor]:
        """One cache for the batch: each row's keys/values left-padded to the longest; and its mask."""
        longest = max(len(c.tokens) for c in caches)
        device = self._device
        mask = torch.tensor([[0] * (longest - len(c.tokens)) + [1] * len(c.tokens) for c in caches], device=device,
                            dtype=torch.long)
        if longest == 0:
            return DynamicCache(), mask
        template = next(c for c in caches if c.tokens).layers
        layers = []
        for index, (key, value) in enumerate(template):
            keys = [_left_pad(c.layers[index][0] if c.tokens else key[:, :0], longest) for c in caches]
            values = [_left_pad(c.layers[index][1] if c.tokens else value[:, :0], longest) for c in caches]
            layers.append((torch.stack(keys), torch.stack(values)))
        return DynamicCache(ddp_cache_data=layers), mask

    def _keep(self, keys: list[Hashable | None], fed: list[list[int]], past: DynamicCache, mask: torch.Tensor) -> None:
        for row, key in enumerate(keys):
            if key is not None:
                self._cached[key] = _Cached(fed[row], _row_layers(past, row, mask[row]))

    def reset(self) -> None:
        """Forget every episode's cache (new weights make them stale)."""
        self._cached.clear()

    def push_weights(self, model, version: int | None = None) -> None:
        """Nothing to copy: this engine generates with the trained module itself. Cached keys/values
        were computed with the old weights: dropped."""
        self.advance_version(version)
        self.reset()

    def sleep(self) -> None:
        """Nothing held beyond the trained module and the episodes' caches (dropped)."""
        self.reset()

    def wake(self) -> None:
        """Nothing to restore."""


def make_transformers_engine(config, policy, tokenizer, renderer, version: int = 0, halt=None) -> Engine:
    """`engine: transformers`. An asynchronous run (max_staleness > 0) generates while the trainer updates:
    on a copy of the policy, in a process of its own (engines/process.py)."""
    if config.max_staleness:
        import threading

        from astra_grpo.engines.process import EngineProcess

        halt = halt or threading.Event()
        return EngineProcess(policy, tokenizer.pad_token_id, renderer.stop_ids, batch_size=config.generation_batch_size,
                             seed=config.seed, weight_sync=config.weight_sync, version=version, stopping=halt.is_set)
    engine = TransformersEngine(policy, tokenizer.pad_token_id, renderer.stop_ids,
                                batch_size=config.generation_batch_size)
    engine.version = version
    return engine


def _row_layers(past: DynamicCache, row: int, mask: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One row's keys/values at its real (unmasked) positions, copied out of a batch cache."""
    real = mask.nonzero(as_tuple=True)[0]
    return [(layer.keys[row][:, real].clone(), layer.values[row][:, real].clone()) for layer in past.layers]


def _left_pad(tensor: torch.Tensor, length: int) -> torch.Tensor:
    """[heads, t, dim] -> [heads, length, dim], zeros in front."""
    missing = length - tensor.shape[1]
    if missing == 0:
        return tensor
    return torch.cat([tensor.new_zeros(tensor.shape[0], missing, tensor.shape[2]), tensor], dim=1)


def _left_padded(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (width - len(r)) + r for r in rows], device=device, dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device, dtype=torch.long)
    return ids, mask


def _warpers(sampling: Sampling) -> LogitsProcessorList:
    processors = LogitsProcessorList()
    if sampling.greedy:
        return processors
    if sampling.temperature != 1.0:
        processors.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k:
        processors.append(TopKLogitsWarper(sampling.top_k))
    if sampling.top_p < 1.0:
        processors.append(TopPLogitsWarper(sampling.top_p))
    return processors


def _pick(logits: torch.Tensor, processors: LogitsProcessorList, sampling: Sampling) -> list[int]:
    if sampling.greedy:
        return logits.argmax(dim=-1).tolist()
    scores = processors(None, logits)
    return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(-1).tolist()


def _chosen_logprobs(logits: torch.Tensor, tokens: list[int], sampling: Sampling) -> list[float]:
    """log softmax(logits / temperature) of each row's sampled token (greedy: temperature 1)."""
    scaled = logits if sampling.greedy else logits / sampling.temperature
    picked = torch.tensor(tokens, device=logits.device)[:, None]
    return torch.log_softmax(scaled.float(), dim=-1).gather(1, picked).squeeze(1).tolist()
