"""Shared fixtures: one warm jailed pool for the whole test session (real nsjail)."""

import pytest
from astra_sandbox import SandboxConfig, SessionPool

# Short limits keep the hostile cases (infinite loops, bombs) fast.
FAST = SandboxConfig(wall_time_s=2.0, cpu_time_s=2, call_timeout_s=1.0, memory_mb=256, max_output_kb=64)

_SECURITY = {"tried": 0, "contained": 0, "not contained": []}


@pytest.fixture(scope="session")
def config() -> SandboxConfig:
    return FAST


@pytest.fixture(scope="session")
def pool(config):
    with SessionPool(size=2, config=config) as pool:
        yield pool


@pytest.fixture(scope="session")
def security_tally():
    """Tests of hostile code record (name, contained) here; the count is printed after the run."""

    def record(name: str, contained: bool) -> None:
        _SECURITY["tried"] += 1
        _SECURITY["contained"] += contained
        if not contained:
            _SECURITY["not contained"].append(name)

    return record


def pytest_terminal_summary(terminalreporter):
    if _SECURITY["tried"]:
        users = "one user" if FAST.one_user else "two users"
        line = (f"astra-sandbox security ({users}): {_SECURITY['tried']} hostile snippets tried, "
                f"{_SECURITY['contained']} contained")
        if _SECURITY["not contained"]:
            line += f" (NOT contained: {', '.join(_SECURITY['not contained'])})"
        terminalreporter.write_line(line)
