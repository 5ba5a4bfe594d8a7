import pytest
from click.testing import CliRunner


@pytest.fixture
def cli(monkeypatch):
    """Run `astra-qaenv ARGS` in-process; returns the click Result (stderr kept separately)."""
    from astra_qaenv.cli import main

    def run(*args, env=None, input=None):  # noqa: A002 - CliRunner's name for stdin
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        result = CliRunner().invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)
        return result

    return run


@pytest.fixture(scope="session")
def verifier():
    """Real astra-sandbox (nsjail) sessions from a warm pool, shared by the test session."""
    from astra_qaenv.verify import Verifier, VerifierConfig

    with Verifier(VerifierConfig(call_timeout_s=3.0, pool_size=2)) as v:
        yield v
