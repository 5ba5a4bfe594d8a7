"""Environment sessions for episodes: astra-sandbox's warm, jailed session pool, or OpenEnv servers."""

from __future__ import annotations

import sys


def open_sandbox_pool(size: int, *, jail: bool = True, call_timeout_s: float = 5.0):
    """A `SessionPool` (use as a context manager): one isolated session per episode."""
    from astra_sandbox import SandboxConfig, SessionPool

    if not jail:
        print("astra-grpo: WARNING: environments run WITHOUT nsjail (--no-sandbox-jail); their code is "
              "not isolated from this machine", file=sys.stderr)
    return SessionPool(size=size, config=SandboxConfig(jail=jail, call_timeout_s=call_timeout_s))


def plays_openenv(sample: dict) -> bool:
    """The sample's environment is an OpenEnv server (environment.openenv)."""
    return "openenv" in sample["environment"]


def runs_code(sample: dict) -> bool:
    """The sample's environment is code, played in an astra-sandbox session."""
    return not ({"tau2", "openenv"} & sample["environment"].keys())


def open_openenv_pool(timeout_s: float, needed_by: str):
    """An `OpenEnvPool` (use as a context manager): one OpenEnv session per episode. Without the `openenv` extra,
    MissingExtra saying in one line what to install."""
    from astra_core.extras import require

    require("openenv.core", extra="astra-grpo[openenv]", needed_by=needed_by)
    from astra_grpo.openenv_sessions import OpenEnvPool

    return OpenEnvPool(timeout_s)
