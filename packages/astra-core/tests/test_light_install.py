"""`pip install astra-toolgraph` (and the other light packages) must not pull torch."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LIGHT = {"astra-toolgraph": ["astra-core", "astra-reward"], "astra-sandbox": ["astra-core"],
         "astra-reward": ["astra-core"]}


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
