"""A colocated vLLM engine (extra `vllm`; needs a GPU).

vLLM runs inside each training process (`external_launcher`: it joins the process group torchrun /
accelerate set up), sharing the GPU with the trainer: it sleeps (frees weights and KV cache) while
the trainer updates, wakes for rollouts, and receives the trainer's weights after every update.
Prompts are token ids and so are the results: no text crosses this boundary.
"""

from __future__ import annotations

import os

from astra_grpo.engines import Generation, Sampling, cut


def _import_vllm():
    try:
        import vllm
    except ImportError as exc:
        raise RuntimeError("the vllm engine needs the `vllm` extra (pip install 'astra-grpo[vllm]') and a GPU; "
                           "use --engine transformers on CPU") from exc
    return vllm


class VLLMEngine:
    def __init__(self, model_path: str, stop_ids: list[int], *, max_model_len: int,
                 gpu_memory_utilization: float = 0.3, seed: int = 0, sleep_between_rollouts: bool = True):
        vllm = _import_vllm()
        self._vllm = vllm
        self.stop_ids = list(stop_ids)
        self.sleep_between_rollouts = sleep_between_rollouts
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # same process as the trainer
        self.llm = vllm.LLM(model=model_path, max_model_len=max_model_len, seed=seed,
                            gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=sleep_between_rollouts,
                            distributed_executor_backend="external_launcher")
        self.asleep = False
        if sleep_between_rollouts:
            self.sleep()

    def sampling_params(self, budget: int, sampling: Sampling):
        return self._vllm.SamplingParams(
            n=1, max_tokens=budget, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1, stop_token_ids=self.stop_ids,
            skip_special_tokens=False, detokenize=False)

    def generate(self, prompts: list[list[int]], max_new_tokens: list[int], sampling: Sampling) -> list[Generation]:
        self.wake()
        requests = [{"prompt_token_ids": ids} for ids in prompts]
        params = [self.sampling_params(budget, sampling) for budget in max_new_tokens]
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        stops = set(self.stop_ids)
        return [cut(list(out.outputs[0].token_ids), budget, stops)
                for out, budget in zip(outputs, max_new_tokens, strict=True)]

    def push_weights(self, model) -> None:
        """Copy the trainer's parameters into vLLM's model (names are the HF checkpoint names)."""
        self.wake(tags=["weights"])
        runner_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        runner_model.load_weights((name, param.detach()) for name, param in model.state_dict().items())
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        if self.sleep_between_rollouts and not self.asleep:
            self.llm.sleep(level=1)  # level 1 offloads weights to CPU: they survive for the next wake
            self.asleep = True

    def wake(self, tags: list[str] | None = None) -> None:
        if self.asleep:
            self.llm.wake_up(tags=tags)
            self.asleep = tags is not None and "kv_cache" not in tags
