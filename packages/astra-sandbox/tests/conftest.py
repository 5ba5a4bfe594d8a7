"""Shared fixtures: one warm jailed pool for the whole test session (real nsjail)."""

import pytest
from astra_sandbox import SandboxConfig, SessionPool

# Short limits keep the hostile cases (infinite loops, bombs) fast.
FAST = SandboxConfig(wall_time_s=2.0, cpu_time_s=2, call_timeout_s=1.0, memory_mb=256, max_output_kb=64)


@pytest.fixture(scope="session")
def config() -> SandboxConfig:
    return FAST


@pytest.fixture(scope="session")
def pool(config):
    with SessionPool(size=2, config=config) as pool:
        yield pool
