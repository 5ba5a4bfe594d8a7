"""`pip install astra-toolgraph` (and the other light packages) must not pull torch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LIGHT = {"astra-toolgraph": ["astra-core", "astra-reward", "astra-sandbox"], "astra-sandbox": ["astra-core"],
         "astra-reward": ["astra-core"]}  # package folders: astra-core's distribution is astra-agent-core


def uv(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "uv", *args], check=True, capture_output=True, text=True, **kwargs)


@pytest.mark.parametrize("package", sorted(LIGHT))
def test_light_package_installs_without_torch(package, tmp_path):
    venv = tmp_path / "venv"
    uv("venv", "--quiet", str(venv), "--python", sys.executable)
    python = venv / "bin" / "python"
    local = [str(ROOT / "packages" / p) for p in (package, *LIGHT[package])]
    uv("pip", "install", "--quiet", "--python", str(python), *local)
    installed = uv("pip", "list", "--python", str(python)).stdout.lower()
    assert package in installed
    for heavy in ("torch", "transformers", "nvidia-", "triton"):
        assert heavy not in installed, f"{package} pulled {heavy}"
    subprocess.run([str(python), "-c", f"import {package.replace('-', '_')}"], check=True)


def test_a_command_needing_a_model_says_what_to_set_when_there_is_none(tmp_path):
    """Without an endpoint and without the local extra: one line naming the variable and the extra."""
    venv = tmp_path / "venv"
    uv("venv", "--quiet", str(venv), "--python", sys.executable)
    uv("pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
       *[str(ROOT / "packages" / p) for p in ("astra-reward", "astra-core")])
    from astra_core.formats_doc import example

    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTRA_")}
    result = subprocess.run([str(venv / "bin" / "astra-reward"), "judge-qa"], input=json.dumps(example("qa_instance")),
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "ASTRA_LLM_BASE_URL" in lines[0] and "astra-agent-core[local]" in lines[0]
