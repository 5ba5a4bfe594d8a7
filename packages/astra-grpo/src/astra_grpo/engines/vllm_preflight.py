"""Checks the vLLM engine runs before it starts: does the model have the positions, does the card have the memory.

vLLM itself refuses a `max_model_len` beyond the model's positions and a memory share that is not
free, but only after the trainer has loaded its model and optimizer, deep inside its start-up, in
words about vLLM's fields. These checks run first and speak in this project's config fields.

Positions follow vLLM's rule (its `_get_and_verify_max_len`): the smallest of the config's length
keys and the tokenizer's `model_max_length`; a RoPE scaling `factor` multiplies it, except for the
YaRN / Llama-3 / LongRoPE families, whose `max_position_embeddings` is already the scaled length
(as transformers' YaRN also assumes). So long-context YaRN needs both `rope_parameters` and a
raised `max_position_embeddings` in the checkpoint's `config.json`; the trainer (transformers) reads
the same file, so trainer and sampler compute the same rotary embedding.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from astra_grpo.config import ConfigError

# vLLM's length keys (transformers_utils/model_arch_config_convertor.py), smallest wins.
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# RoPE types whose max_position_embeddings is already the scaled length (vLLM does not multiply).
PRESCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "float8_e4m3fn": 1}
GIB = 1024 ** 3


@dataclass(frozen=True)
class Positions:
    limit: int          # longest sequence vLLM will accept for this checkpoint
    explanation: str    # where the number comes from, for the error message


def read_model_config(model_path: str | Path) -> dict:
    path = Path(model_path) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"config field model: cannot read {path}: {exc}") from exc
    return config.get("text_config") or config  # multimodal checkpoints keep the language model's here


def rope_parameters(config: dict) -> dict | None:
    """The RoPE scaling entry (transformers 5 `rope_parameters`, or the older `rope_scaling`), None if unscaled."""
    entry = config.get("rope_parameters") or config.get("rope_scaling")
    if not entry:
        return None
    rope_type = entry.get("rope_type") or entry.get("type") or "default"
    return None if rope_type == "default" else {**entry, "rope_type": rope_type}


def positions(model_path: str | Path) -> Positions:
    config = read_model_config(model_path)
    lengths = {key: int(config[key]) for key in LENGTH_KEYS if isinstance(config.get(key), (int, float))}
    tokenizer_config = Path(model_path) / "tokenizer_config.json"
    if tokenizer_config.exists():
        tokenizer_length = json.loads(tokenizer_config.read_text()).get("model_max_length")
        if isinstance(tokenizer_length, (int, float)) and tokenizer_length < 1e12:
            lengths["tokenizer model_max_length"] = int(tokenizer_length)
    if not lengths:
        return Positions(math.inf, "config.json has no length key")  # vLLM then trusts max_model_len
    key = min(lengths, key=lengths.get)
    limit, explanation = lengths[key], f"{key} {lengths[key]:,}"
    rope = rope_parameters(config)
    if rope is None:
        explanation += ", no RoPE scaling"
    elif rope["rope_type"] in PRESCALED_ROPE:
        explanation += f", {rope['rope_type']} RoPE scaling (factor {rope.get('factor')}) already counted in it"
    elif rope.get("factor"):
        limit = int(limit * float(rope["factor"]))
        explanation += f" x {rope['rope_type']} RoPE factor {rope['factor']}"
    return Positions(limit, explanation)


def yarn_suggestion(config: dict, needed: int) -> str:
    """What to put into config.json for YaRN to cover `needed` positions (Qwen's documented recipe)."""
    rope = rope_parameters(config) or {}
    native = int(rope.get("original_max_position_embeddings") or config.get("original_max_position_embeddings")
                 or config.get("max_position_embeddings") or needed)
    if config.get("model_type", "").startswith("qwen3"):
        native = min(native, 32768)  # Qwen3's native window; its 40,960 positions already stretch it
    factor = math.ceil(needed / native * 2) / 2  # in steps of 0.5
    theta = (config.get("rope_parameters") or {}).get("rope_theta") or config.get("rope_theta")
    entry = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": native}
    if theta is not None:
        entry["rope_theta"] = theta  # transformers 5 keeps rope_theta inside rope_parameters
    return (f'"rope_parameters": {json.dumps(entry)}, "max_position_embeddings": {int(native * factor)}')


def check_context(model_path: str | Path, max_model_len: int) -> Positions:
    """max_model_len (= max_prompt_length + max_response_length) must fit the checkpoint's positions."""
    found = positions(model_path)
    if max_model_len <= found.limit:
        return found
    config = read_model_config(model_path)
    raise ConfigError(
        f"config fields max_prompt_length + max_response_length: {max_model_len:,} tokens exceed the "
        f"{found.limit:,} positions of {Path(model_path) / 'config.json'} ({found.explanation}); vLLM would "
        f"refuse them and the trainer would run past its RoPE range. Shorten the sequences, or give the "
        f"checkpoint RoPE scaling that covers them (trainer and vLLM both read config.json), e.g. for YaRN: "
        f"{yarn_suggestion(config, max_model_len)}")


def kv_bytes_per_token(config: dict) -> int:
    """KV-cache bytes one token takes over all layers (keys and values, the checkpoint's dtype)."""
    heads = int(config.get("num_attention_heads") or 1)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or int(config.get("hidden_size") or 0) // heads)
    layers = int(config.get("num_hidden_layers") or 0)
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "bfloat16").removeprefix("torch.")
    return 2 * layers * kv_heads * head_dim * DTYPE_BYTES.get(dtype, 2)


def weight_bytes(model_path: str | Path) -> int:
    """Bytes of the checkpoint's weight files (what vLLM loads onto the card)."""
    files = list(Path(model_path).glob("*.safetensors")) or list(Path(model_path).glob("*.bin"))
    return sum(f.stat().st_size for f in files)


def check_memory(*, utilization: float, total: int, free: int, weights: int, kv_per_token: int,
                 max_model_len: int, device: str = "cuda") -> int:
    """The bytes vLLM will take (utilization x total): they must be free now, and hold the weights plus the
    KV cache of one sequence of max_model_len tokens. Returns that budget."""
    if not 0 < utilization < 1:
        raise ConfigError(f"config field vllm_gpu_memory_utilization: must be in (0, 1), got {utilization}")
    budget = math.ceil(utilization * total)
    one_sequence = kv_per_token * max_model_len
    if budget > free:
        raise ConfigError(
            f"config field vllm_gpu_memory_utilization: {utilization} of {device} is {budget / GIB:.1f} GiB but "
            f"only {free / GIB:.1f} of {total / GIB:.1f} GiB are free with the trainer loaded; vLLM needs its "
            f"share free at start. Lower it to at most {math.floor(free / total * 100) / 100:.2f} (or shard the "
            f"trainer more: ZeRO-3, more processes).")
    if budget < weights + one_sequence:
        need = (weights + one_sequence) / total
        raise ConfigError(
            f"config field vllm_gpu_memory_utilization: {utilization} of {device} is {budget / GIB:.1f} GiB, less "
            f"than the weights ({weights / GIB:.1f} GiB) plus the KV cache of one {max_model_len:,}-token "
            f"sequence ({one_sequence / GIB:.1f} GiB). Raise it to at least {math.ceil(need * 100) / 100:.2f} "
            f"(if that much is free) or shorten max_prompt_length + max_response_length.")
    return budget


def check_card(model_path: str | Path, max_model_len: int, utilization: float, device_index: int) -> int:
    """check_memory against the card this process runs on (torch.cuda.mem_get_info)."""
    import torch

    free, total = torch.cuda.mem_get_info(device_index)
    config = read_model_config(model_path)
    return check_memory(utilization=utilization, total=total, free=free, weights=weight_bytes(model_path),
                        kv_per_token=kv_bytes_per_token(config), max_model_len=max_model_len,
                        device=f"cuda:{device_index}")
