"""Environment sessions for episodes: astra-sandbox's warm, jailed session pool."""

from __future__ import annotations

import sys


def open_sandbox_pool(size: int, *, jail: bool = True, call_timeout_s: float = 5.0):
    """A `SessionPool` (use as a context manager): one isolated session per episode."""
    from astra_sandbox import SandboxConfig, SessionPool

    if not jail:
        print("astra-grpo: WARNING: environments run WITHOUT nsjail (--no-sandbox-jail); their code is "
              "not isolated from this machine", file=sys.stderr)
    return SessionPool(size=size, config=SandboxConfig(jail=jail, call_timeout_s=call_timeout_s))
