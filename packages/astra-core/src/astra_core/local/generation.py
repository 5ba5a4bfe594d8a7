"""Batched generation for the embedded server: requests with the same sampling settings share a forward pass."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

from astra_core.local.kv_cache import cache_argument
from astra_core.local.prefix_cache import PrefixCache


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    seed: int | None = None

    def batch_key(self) -> tuple:
        return (self.temperature, self.top_p, self.top_k, self.seed)


@dataclass
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" | "length"


@dataclass
class GuidedCall:
    """Oblige one well-formed tool call (tool_choice "required" or named); see astra_core.local.guided."""

    prompt_text: str
    tools: list[dict]
    name: str | None = None


@dataclass
class GuidedJson:
    """Oblige a JSON value shaped by a schema (response_format json_schema); see astra_core.local.guided."""

    prompt_text: str
    schema: dict


@dataclass
class GenerationJob:
    prompt_ids: list[int]
    max_new_tokens: int
    sampling: Sampling
    n: int = 1
    guided: GuidedCall | GuidedJson | None = None
    future: Future = field(default_factory=Future)


class Generator:
    """Owns the model; one worker thread runs jobs, batching those queued together."""

    def __init__(self, model, tokenizer, *, max_batch: int = 8, stop_token_ids: list[int] | None = None,
                 prefix_cache_tokens: int = 16384):
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        # A request alone in its batch continues the KV cache of an earlier prompt it extends (0: off).
        self.prefix_cache = PrefixCache(model, max_tokens=prefix_cache_tokens) if prefix_cache_tokens else None
        self.stop_token_ids = stop_token_ids or [tokenizer.eos_token_id]
        self._queue: queue.Queue[GenerationJob] = queue.Queue()
        self._worker = threading.Thread(target=self._loop, daemon=True, name="astra-generate")
        self._worker.start()

    def submit(self, job: GenerationJob) -> Future:
        self._queue.put(job)
        return job.future

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            groups: dict[tuple, list[GenerationJob]] = {}
            for job in batch:
                # Seeded and guided requests run alone: their result must not depend on neighbours.
                alone = job.sampling.seed is not None or job.guided is not None
                key = (id(job),) if alone else job.sampling.batch_key()
                groups.setdefault(key, []).append(job)
            for jobs in groups.values():
                try:
                    results = self._run(jobs)
                except Exception as exc:  # noqa: BLE001 - the HTTP handler reports it
                    for job in jobs:
                        job.future.set_exception(exc)
                    continue
                for job, completions in zip(jobs, results, strict=True):
                    job.future.set_result(completions)

    def _run(self, jobs: list[GenerationJob]) -> list[list[Completion]]:
        import torch

        if jobs[0].guided is not None:
            return [self._run_guided(jobs[0])]
        sampling = jobs[0].sampling
        prompts = [job.prompt_ids for job in jobs for _ in range(job.n)]
        limits = [job.max_new_tokens for job in jobs for _ in range(job.n)]
        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        greedy = sampling.temperature <= 0
        kwargs = {"do_sample": not greedy}
        if not greedy:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
        if len(prompts) == 1 and len(prompts[0]) > 1 and self.prefix_cache is not None:
            # generate reads only the last prompt token; the rest comes from (and goes to) the prefix cache
            kwargs.update(cache_argument(self.model, self.prefix_cache.prefill(prompts[0][:-1])[0]))
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=input_ids, attention_mask=attention, max_new_tokens=max(limits),
                eos_token_id=self.stop_token_ids, pad_token_id=pad, **kwargs)
        completions = [self._completion(row[width:].tolist(), limit) for row, limit in zip(output, limits, strict=True)]
        grouped, start = [], 0
        for job in jobs:
            grouped.append(completions[start:start + job.n])
            start += job.n
        return grouped

    def _run_guided(self, job: GenerationJob) -> list[Completion]:
        import torch

        from astra_core.local.guided import guided_json, guided_tool_call

        guided, sampling = job.guided, job.sampling
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        completions = []
        for _ in range(job.n):
            if isinstance(guided, GuidedJson):
                text = guided_json(self.model, self.tokenizer, guided.prompt_text, guided.schema,
                                   temperature=sampling.temperature, max_tokens=job.max_new_tokens,
                                   prefix_cache=self.prefix_cache)
            else:
                text = guided_tool_call(self.model, self.tokenizer, guided.prompt_text, guided.tools,
                                        name=guided.name, temperature=sampling.temperature,
                                        max_tokens=job.max_new_tokens, prefix_cache=self.prefix_cache)
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            completions.append(Completion(text, ids, "stop"))
        return completions

    def _completion(self, new_ids: list[int], limit: int) -> Completion:
        ids, finish = [], "length"
        for token in new_ids[:limit]:
            if token in self.stop_token_ids:
                finish = "stop"
                break
            ids.append(token)
        return Completion(self.tokenizer.decode(ids, skip_special_tokens=True), ids, finish)
