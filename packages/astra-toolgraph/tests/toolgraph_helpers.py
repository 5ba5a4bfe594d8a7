"""Helpers of astra-toolgraph's tests: real MCP servers as a user starts them, and a CLI runner."""

import json
import shutil
import sys
from pathlib import Path

import pytest
from astra_toolgraph.cli import main
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def sqlite_source(db_path: Path, name: str = "sqlite") -> dict:
    """mcp-server-sqlite as a user runs it. Its last release needs mcp<2 (it uses the 1.x server API),
    so uvx gets it an environment of its own; our client speaks to it over stdio all the same."""
    return {"name": name, "domain": "databases", "description": "Query and modify a SQLite database.",
            "command": str(BIN / "uvx"), "args": ["--with", "mcp>=1.6,<2", "mcp-server-sqlite", "--db-path",
                                                   str(db_path)]}


def filesystem_source(root: Path, tools: list[str] | None = None) -> dict:
    command = ROOT / "node_modules" / ".bin" / "mcp-server-filesystem"
    if not command.exists() or shutil.which("node") is None:
        pytest.fail("npm MCP servers missing: run scripts/setup (it runs `npm ci` when node is present)")
    source = {"name": "filesystem", "domain": "files", "description": "Read and write files in one directory.",
              "command": str(command), "args": [str(root)]}
    return {**source, "include_tools": tools} if tools else source


def time_source() -> dict:
    return {"name": "time", "command": str(BIN / "mcp-server-time")}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def invoke(*args: str, input: str | None = None):
    """Run `astra-toolgraph ARGS` in-process; fails the test on a non-zero exit."""
    result = CliRunner().invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result


def evolve_run(*args):
    """`astra-toolgraph evolve ARGS` in-process, whatever its exit."""
    return CliRunner().invoke(main, ["evolve", *map(str, args)])


def without(record: dict, field: str) -> dict:
    return {k: v for k, v in record.items() if k != field}


def assert_rejected_naming(tmp_path: Path, command: list, good: dict, bad: dict, field: str) -> list[dict]:
    """`astra-toolgraph evolve COMMAND[0] IN COMMAND[1:]`: `bad` (line 2) is a malformed reject naming `field`, and
    stops the command without --skip-bad (a one-line error, no traceback); `good` (line 1) passes: its output."""
    inputs = write_jsonl(tmp_path / "in.jsonl", [good, {**bad, "id": "bad"}])
    rejects, out = tmp_path / "rejects.jsonl", tmp_path / "out.jsonl"
    result = evolve_run(*command[:1], inputs, *command[1:], "--skip-bad", "--rejects", rejects, "-o", out)
    assert result.exit_code == 0, result.output
    [reject] = read_jsonl(rejects)
    assert reject["reason"].startswith(f"malformed: {inputs}:2: record 'bad': field {field}: "), reject["reason"]
    stopped = evolve_run(*command[:1], inputs, *command[1:])
    assert stopped.exit_code == 1 and f"{inputs}:2: record 'bad': field {field}:" in stopped.output, stopped.output
    assert "Traceback" not in stopped.output and len(stopped.stderr.strip().splitlines()) == 1, stopped.stderr
    return read_jsonl(out)
