"""A colocated vLLM engine (extra `vllm`; needs a GPU).

vLLM runs inside each training process (`external_launcher`: it joins the process group torchrun /
accelerate set up, or makes a one-process group from the variables set here), sharing the GPU with
the trainer. Each process has its own vLLM (tensor parallel size 1) and samples its own share of
the episodes. Prompts are token ids and so are the results: no text crosses this boundary.

Memory over one training step, in the order vLLM supports:

    start     load the checkpoint, sleep at level 1 (weights kept in host memory for the first rollout)
    rollout   wake weights (if asleep), wake kv_cache, generate; sleep at level 2 (weights and cache freed)
    update    the trainer has the card
    push      wake weights only, load the trainer's parameters one at a time (under ZeRO-3 each is
              gathered alone, never the whole model beside vLLM), reset the prefix cache
    rollout   wake kv_cache, generate, ...

A tag is never woken when it is awake, and a rollout after a level-2 sleep without a push is refused
(its weights are gone). With `logprobs`, every generated token comes back with the log-prob vLLM
sampled it with (after temperature, top-p, top-k: `logprobs_mode="processed_logprobs"`), for the
truncated importance-sampling correction (engines/correction.py).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time

from astra_grpo.engines import Engine, Generation, Sampling, cut
from astra_grpo.engines import vllm_preflight as preflight

WEIGHTS, KV_CACHE = "weights", "kv_cache"  # vLLM's sleep tags, woken in this order


def _import_vllm():
    try:
        import vllm
    except ImportError as exc:
        raise RuntimeError("the vllm engine needs the `vllm` extra (pip install 'astra-grpo[vllm]') and a GPU; "
                           "use --engine transformers on CPU") from exc
    return vllm


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def launcher_env(rank: int, local_rank: int, world_size: int, environ=os.environ) -> dict[str, str]:
    """Set what vLLM's external launcher reads (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

    Under torchrun / accelerate launch they are already there and agree; a single `python -m` process
    has none, and vLLM would fail on the first. An address and port already set are kept (all processes
    must agree on them); an unset, 0 or `auto` port becomes a free one. vLLM's in-process engine core
    is required by the launcher (VLLM_ENABLE_V1_MULTIPROCESSING=0)."""
    environ["RANK"], environ["LOCAL_RANK"], environ["WORLD_SIZE"] = str(rank), str(local_rank), str(world_size)
    environ["MASTER_ADDR"] = environ.get("MASTER_ADDR") or "localhost"
    if environ.get("MASTER_PORT", "").strip().lower() in ("", "0", "auto"):
        if world_size > 1:
            raise RuntimeError("MASTER_PORT is not set in a multi-process run: start it with accelerate launch "
                               "or torchrun, which agree on one port for all processes")
        environ["MASTER_PORT"] = str(_free_port())
    environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    return {key: environ[key] for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}


def process_placement() -> tuple[int, int, int]:
    """(rank, local rank, processes) of this process, from accelerate (one process when not launched)."""
    from accelerate import PartialState

    state = PartialState()
    return state.process_index, state.local_process_index, state.num_processes


def gathered(param):
    """The full tensor of one parameter: under DeepSpeed ZeRO-3 gathered for the duration (a collective
    every process enters in the same order), else the parameter itself."""
    if not hasattr(param, "ds_id"):
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters([param], modifier_rank=None)


class VLLMEngine(Engine):
    gathers_own_weights = True  # push_weights gathers parameter by parameter: the caller must not gather all

    def __init__(self, model_path: str, stop_ids: list[int], *, max_model_len: int,
                 gpu_memory_utilization: float = 0.3, seed: int = 0, sleep_between_rollouts: bool = True,
                 logprobs: bool = True, placement: tuple[int, int, int] | None = None, check_card: bool | None = None):
        vllm = _import_vllm()
        self._vllm = vllm
        self.stop_ids = list(stop_ids)
        self.sleep_between_rollouts = sleep_between_rollouts
        self.logprobs = logprobs
        rank, local_rank, world = placement or process_placement()
        launcher_env(rank, local_rank, world)
        preflight.check_context(model_path, max_model_len)
        self.rank = rank
        if check_card if check_card is not None else _has_cuda():
            preflight.check_card(model_path, max_model_len, gpu_memory_utilization, local_rank)
        self.llm = vllm.LLM(model=model_path, max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                            seed=seed + rank,  # each process samples its own episodes
                            enable_sleep_mode=sleep_between_rollouts, distributed_executor_backend="external_launcher",
                            logprobs_mode="processed_logprobs", tensor_parallel_size=1)
        self.asleep: set[str] = set()
        self.weights_discarded = False  # after a level-2 sleep, until the next push
        if sleep_between_rollouts:
            self._sleep(level=1)  # keep the checkpoint's weights: the first rollout uses them

    # -- generation -------------------------------------------------------------------------------
    def sampling_params(self, budget: int, sampling: Sampling):
        return self._vllm.SamplingParams(
            n=1, max_tokens=budget, temperature=0.0 if sampling.greedy else sampling.temperature, top_p=sampling.top_p,
            top_k=max(sampling.top_k, 0), stop_token_ids=self.stop_ids, skip_special_tokens=False,
            detokenize=False, logprobs=0 if self.logprobs else None)

    def generate(self, prompts: list[list[int]], max_new_tokens: list[int], sampling: Sampling,
                 keys: list | None = None) -> list[Generation]:
        self.wake()
        requests = [{"prompt_token_ids": ids} for ids in prompts]
        params = [self.sampling_params(budget, sampling) for budget in max_new_tokens]
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        return [self._generation(out.outputs[0], budget) for out, budget in zip(outputs, max_new_tokens, strict=True)]

    def _generation(self, completion, budget: int) -> Generation:
        generation = cut(list(completion.token_ids), budget, set(self.stop_ids))
        if self.logprobs:
            generation.logprobs = chosen_logprobs(completion)[:len(generation.token_ids)]
        return generation

    # -- weights --------------------------------------------------------------------------------------
    def push_weights(self, model, version: int | None = None) -> None:
        """Load the trainer's parameters (HF checkpoint names) into vLLM, one gathered parameter at a time.
        Every process calls it with the same model (under ZeRO-3 each gather is a collective)."""
        self.advance_version(version)
        self._wake([WEIGHTS])
        # vLLM's own model object (unwrapped from its CUDA-graph wrappers), in this process: external_launcher
        # runs the one worker in-process, so nothing is serialised
        [runner_model] = self.llm.apply_model(_the_model)
        started, count, size = time.perf_counter(), 0, 0
        for name, param in model.named_parameters():
            with gathered(param):
                runner_model.load_weights([(name, param.data)])
                count, size = count + 1, size + param.data.numel() * param.data.element_size()
        self.weights_discarded = False
        self.llm.reset_prefix_cache()
        if self.rank == 0:
            print(f"astra-grpo: vLLM weights pushed: {count} parameters, {size / 2**30:.2f} GiB, one gathered at a "
                  f"time, in {time.perf_counter() - started:.1f} s", file=sys.stderr)

    # -- memory ---------------------------------------------------------------------------------------
    def sleep(self) -> None:
        """Free the card for the update: weights and KV cache are dropped (the next push replaces them)."""
        self._sleep(level=2)

    def wake(self) -> None:
        """Everything asleep, weights first; refused when the weights were dropped and not pushed since."""
        if self.weights_discarded:
            raise RuntimeError("vLLM's weights were freed by sleep() and not pushed since: call push_weights "
                               "before generating")
        self._wake([WEIGHTS, KV_CACHE])

    def _sleep(self, level: int) -> None:
        if not self.sleep_between_rollouts or WEIGHTS in self.asleep:
            return  # vLLM's own rule: asleep while its weights are
        self.llm.sleep(level=level)
        self.asleep = {WEIGHTS, KV_CACHE}
        self.weights_discarded = level >= 2

    def _wake(self, tags: list[str]) -> None:
        for tag in tags:
            if tag in self.asleep:
                self.llm.wake_up(tags=[tag])
                self.asleep.discard(tag)


def make_vllm_engine(config, policy, tokenizer, renderer, version: int = 0, halt=None) -> Engine:
    """`engine: vllm`. In an asynchronous run (max_staleness > 0) the producer generates while the trainer pushes:
    shared behind a lock (engines/shared.py)."""
    from astra_core.local.model import resolve_model_path

    engine = VLLMEngine(str(resolve_model_path(config.model)), renderer.stop_ids,
                        max_model_len=config.max_prompt_length + config.max_response_length,
                        gpu_memory_utilization=config.vllm_gpu_memory_utilization, seed=config.seed,
                        sleep_between_rollouts=config.vllm_sleep)
    engine.version = version
    if config.max_staleness:
        from astra_grpo.engines.shared import SharedEngine

        return SharedEngine(engine, version)
    return engine


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _the_model(model):
    return model


def chosen_logprobs(completion) -> list[float]:
    """The log-prob of each generated token (CompletionOutput.logprobs: one {token id: Logprob} per
    position, holding at least the chosen token when SamplingParams.logprobs=0)."""
    if completion.logprobs is None:
        raise RuntimeError("vLLM returned no log-probs: SamplingParams.logprobs must be set")
    values = [position[token].logprob for token, position in zip(completion.token_ids, completion.logprobs,
                                                                  strict=True)]
    if any(value != value for value in values):  # NaN
        print("astra-grpo: warning: vLLM returned a NaN log-prob; its token gets importance weight 0",
              file=sys.stderr)
    return values
