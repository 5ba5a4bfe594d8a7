"""Shared fixtures: one warm jailed pool for the whole test session (real nsjail)."""

import pytest
import sandbox_tally
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


def _tally() -> dict:
    return {**_SECURITY, "users": "one user" if FAST.one_user else "two users"}


def pytest_sessionfinish(session):
    """A pytest-xdist worker (`make test`) hands its tally to the controller, whose root conftest.py prints the sum."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput.setdefault("astra_summaries", {})["sandbox_tally:security_line"] = _tally()


def pytest_terminal_summary(terminalreporter):
    line = sandbox_tally.security_line([_tally()])
    if line:
        terminalreporter.write_line(line)
