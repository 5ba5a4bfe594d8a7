"""The light packages' declared floors are true: installed at the lowest version of every dependency they name
(`uv pip install --resolution lowest-direct`), their own test suites pass.

A user's environment often holds an older release of a library we depend on; pip keeps it when it satisfies our
`>=`. Each floor below was raised after failing here (click 8.2.0's CliRunner, aiohttp 3.9.0's timeouts, pyyaml 6.0
without a Python 3.12 wheel, matplotlib 3.8.0 beside numpy 2). The torch stack's floors (astra-core[local],
astra-grpo) were checked by laying the floor releases over the dev environment; their wheels are gigabytes, so
that is not repeated here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
LIGHT = {"astra-core": [], "astra-reward": [], "astra-sandbox": [], "astra-toolgraph": ["plots"],
         "astra-qaenv": ["plots"]}
# What the light packages' tests need beyond the packages, at the dev environment's versions.
TEST_TOOLS = ("pytest", "hypothesis", "mcp-server-time", "uv")
# Tests of what the light packages do not install: the local model (torch), the browser, other packages' scripts,
# the parquet extra (pyarrow), the ray extra (stages on Ray: test_ray_*.py).
NOT_LIGHT = ["-m", "not slow and not llm", "--ignore-glob", "packages/*/tests/test_ray_*.py",
             "--ignore", "packages/astra-core/tests/test_kv_cache.py",
             "--ignore", "packages/astra-core/tests/test_parquet_output.py",
             "--ignore", "packages/astra-core/tests/test_embedded_server.py",
             "--ignore", "packages/astra-core/tests/test_view_browser.py",
             "--ignore", "packages/astra-core/tests/test_workspace.py",
             "--ignore", "packages/astra-core/tests/test_light_install.py"]


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=1800, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, args))} exited {result.returncode}:\n{result.stdout[-4000:]}" \
                                   f"\n{result.stderr[-4000:]}"
    return result


def floors() -> dict[str, str]:
    """Every `>=` a light package (with its tested extras) declares on a third-party distribution."""
    found: dict[str, str] = {}
    for name, extras in LIGHT.items():
        project = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())["project"]
        declared = project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]
        for requirement in map(Requirement, declared):
            low = [s.version for s in requirement.specifier if s.operator == ">="]
            if low and not requirement.name.startswith("astra-"):
                found[requirement.name] = low[0]
    return found


def test_the_light_packages_pass_their_tests_at_their_declared_floors(tmp_path):
    venv = tmp_path / "floors"
    run(sys.executable, "-m", "uv", "venv", "--quiet", "--python", sys.executable, venv)
    python = venv / "bin" / "python"
    packages = [f"{ROOT / 'packages' / name}[{','.join(extras)}]" if extras else ROOT / "packages" / name
                for name, extras in LIGHT.items()]
    tools = [f"{tool}=={version(tool)}" for tool in TEST_TOOLS]
    run(sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", python, "--resolution", "lowest-direct",
        *packages, *tools)

    installed = json.loads(run(sys.executable, "-m", "uv", "pip", "list", "--python", python, "--format", "json")
                           .stdout)
    versions = {p["name"].lower().replace("_", "-"): Version(p["version"]) for p in installed}
    expected = {name: Version(floor) for name, floor in floors().items()}
    assert {name: versions.get(name) for name in expected} == expected  # the resolution really is the floors

    run(python, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", *NOT_LIGHT,
        *(f"packages/{name}/tests" for name in LIGHT), cwd=ROOT)
