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
