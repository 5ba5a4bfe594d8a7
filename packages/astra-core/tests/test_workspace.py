"""The workspace layout every package follows (issue: workspace and conventions)."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())


def test_the_seven_packages_exist():
    assert PACKAGES == sorted(f"astra-{n}" for n in ("core", "toolgraph", "qaenv", "sandbox", "reward", "grpo", "eval"))


@pytest.mark.parametrize("package", PACKAGES)
def test_package_layout_and_console_script(package):
    root = ROOT / "packages" / package
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    module = package.replace("-", "_")
    # astra-core's distribution is astra-agent-core (astra-core on PyPI is an unrelated project)
    assert project["name"] == {"astra-core": "astra-agent-core"}.get(package, package) and project["version"]
    assert project["requires-python"] == ">=3.12"
    assert project["scripts"][package] == f"{module}.cli:main"
    assert (root / "README.md").read_text().strip()
    assert (root / "src" / module / "__init__.py").exists()
    script = Path(sys.executable).parent / package
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=True)
    assert "Usage:" in result.stdout


def test_python_version_file_pins_312():
    assert (ROOT / ".python-version").read_text().strip() == "3.12"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test " in readme or "make test\n" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
