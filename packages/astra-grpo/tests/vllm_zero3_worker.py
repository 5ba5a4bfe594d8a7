"""Launched by test_vllm_engine.py on 2 CPU processes under DeepSpeed ZeRO-3: VLLMEngine.push_weights into a
stand-in vLLM, recording for every load how many of the trainer's parameters were gathered at that moment.
    accelerate launch --config_file cpu_2proc_zero3.yaml vllm_zero3_worker.py OUT_DIR"""

import sys
from pathlib import Path

import torch
from vllm_support import fake_vllm_module

sys.modules["vllm"] = fake_vllm_module()

from astra_grpo.config import GRPOConfig, load_config  # noqa: E402
from astra_grpo.engines.vllm import VLLMEngine  # noqa: E402
from astra_grpo.runtime import make_accelerator  # noqa: E402
from grpo_support import tiny_model  # noqa: E402


def main(out: Path) -> None:
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    config = load_config(GRPOConfig, None, {"group_size": 2, "batch_size": 2, "mini_batch_size": 2,
                                            "micro_batch_size": 2, "report_to": []})
    accelerator = make_accelerator(config, 1)
    model = tiny_model("llama", seed=0, vocab_size=256, hidden=32)
    model_dir = out / "model"
    if accelerator.is_main_process:
        model.config.save_pretrained(model_dir)
    accelerator.wait_for_everyone()
    prepared, _ = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    policy = accelerator.unwrap_model(prepared)
    params = list(policy.parameters())
    assert all(hasattr(p, "ds_id") and p.data.numel() == 0 for p in params), "not ZeRO-3 partitioned"

    engine = VLLMEngine(str(model_dir), [2], max_model_len=64, check_card=False)
    loads = []

    def record(weights):
        [(name, tensor)] = list(weights)
        gathered = sum(p.ds_status == ZeroParamStatus.AVAILABLE for p in params)
        loads.append({"name": name, "tensor": tensor.detach().clone(), "gathered": gathered})

    engine.llm.model.load_weights = record
    engine.push_weights(policy)
    partitioned_after = all(p.data.numel() == 0 for p in params)
    with torch.no_grad(), __import__("deepspeed").zero.GatheredParameters(params, modifier_rank=None):
        full = {name: p.detach().clone() for name, p in policy.named_parameters()}
    torch.save({"loads": loads, "full": full, "partitioned_after": partitioned_after,
                "processes": accelerator.num_processes, "env": {k: engine_env(k) for k in ("RANK", "WORLD_SIZE")}},
               out / f"rank{accelerator.process_index}.pt")


def engine_env(key: str) -> str:
    import os

    return os.environ[key]


if __name__ == "__main__":
    main(Path(sys.argv[1]))
