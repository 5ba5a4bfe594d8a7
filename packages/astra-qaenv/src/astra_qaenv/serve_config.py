"""The config of `astra-qaenv serve-openenv`, apart from the OpenEnv code that serves (`openenv_server`), so that
declaring the command imports no OpenEnv, FastAPI or gradio."""

from __future__ import annotations

from dataclasses import dataclass

from astra_core.config import knob

from astra_qaenv.verify import VerifierConfig


@dataclass(frozen=True)
class ServeConfig(VerifierConfig):
    """Every `--sandbox-...` limit of the episodes, the warm pool they run on, and OpenEnv's concurrency config."""

    pool_size: int = knob(4, "Warm sandbox workers: episodes that can be played at once.", flag="sandbox-pool-size",
                          minimum=1)
    max_sessions: int | None = knob(None, "OpenEnv sessions open at once (its ConcurrencyConfig.max_concurrent_envs; "
                                          "default: the sandbox pool's size). A session over it is refused.",
                                    minimum=1)
    session_timeout_s: float | None = knob(None, "Close a session idle this long (ConcurrencyConfig.session_timeout; "
                                                 "default: never).", minimum=0)
