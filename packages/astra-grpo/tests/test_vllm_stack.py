"""The trainer on the transformers that a GPU user's `astra-grpo[vllm]` resolves to.

vllm pins transformers to a range of its own, older than the dev environment's (vllm 0.33: < 5.21, which
has no boolean `logits_to_keep` and still names the KV cache `past_key_values`). scripts/setup lays that
version, with its tokenizers and huggingface-hub, as uv.lock resolves the vllm extra, over the dev
environment in .venv-vllm/trainer-stack. This runs the tests of everything the trainer asks of
transformers (log-probs and updates against reference loops, KV caches across turns, chat rendering
and SFT masks of real templates, the vLLM importance correction) in a process that imports it first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
STACK = REPO / ".venv-vllm" / "trainer-stack"
MODULES = [
    "packages/astra-core/tests/test_kv_cache.py",
    "packages/astra-grpo/tests/test_objective.py",
    "packages/astra-grpo/tests/test_robustness.py",
    "packages/astra-grpo/tests/test_engines.py",
    "packages/astra-grpo/tests/test_chat.py",
    "packages/astra-grpo/tests/test_template_matrix.py",
    "packages/astra-grpo/tests/test_vllm_correction.py",
]


def vllm_transformers_version() -> str:
    packages = tomllib.loads((REPO / "uv.lock").read_text())["package"]
    [vllm] = [p for p in packages if p["name"] == "vllm"]
    [dependency] = [d for d in vllm["dependencies"] if d["name"] == "transformers"]
    return dependency.get("version") or next(p["version"] for p in packages if p["name"] == "transformers")


def test_the_trainer_works_on_the_transformers_of_the_vllm_extra(tmp_path):
    if not (STACK / "transformers").is_dir():
        pytest.fail("the vllm extra's transformers is not laid out: run scripts/setup (it makes .venv-vllm/trainer-stack)")
    env = {**os.environ, "PYTHONPATH": str(STACK), "ASTRA_CACHE_DIR": str(tmp_path / "cache")}
    seen = subprocess.run([sys.executable, "-c", "import transformers; print(transformers.__version__)"],
                          env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert seen == vllm_transformers_version()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-m", "not slow", *MODULES],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"with transformers {seen}:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
