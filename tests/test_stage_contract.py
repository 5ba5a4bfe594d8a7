"""Every stage command of every package, fed bad input the ways users feed it: invalid JSON, a line that is
not an object, a wrong-typed field (an id that is a list, a meta that is a string, a good record whose meta.provenance is
not a list of steps), a byte-order mark, CRLF,
a 5 MB line, duplicate ids, a good line then bad ones; with and without --skip-bad. Always a one-line error naming the line, or a counted reject with
its source: never a traceback, never a silent skip or a score. LLM stages talk to a recorded endpoint."""

from __future__ import annotations

import json

import pytest
from astra_core.cli_doc import tools
from astra_core.command import stage_specs
from astra_core.formats_doc import example
from click.testing import CliRunner

STAGES = [(tool, path, spec) for tool, group in tools().items() for path, spec in stage_specs(group).items()]
IDS = [f"{tool} {path}" for tool, path, _ in STAGES]

BAD_LINES = [
    b"{not json\n",                       # invalid JSON
    b"[1, 2, 3]\n",                       # not an object
    b'{"id": 5}\n',                       # a wrong-typed (or missing) field
    b"{broken\r\n",                       # CRLF
    b'"' + b"x" * (5 * 1024 * 1024) + b'\n',  # a 5 MB line that is not an object
    b'{"id": ["a"]}\n',                   # an id of a type no set can hold (once a crash in every stage)
    b'{"id": "m", "meta": "x"}\n',        # a meta that is not an object (once a crash stamping provenance)
]
STOPPING = [line for line in BAD_LINES if len(line) < 1024]  # (the 5 MB line is for --skip-bad only)


@pytest.fixture(autouse=True)
def _recorded_endpoint(recorded_llm, monkeypatch):
    server = recorded_llm(replies=["{}"])
    monkeypatch.setenv("ASTRA_LLM_BASE_URL", server.base_url)


# Settings that keep a stage which plays its good record small (not what it checks).
SMALL = {"astra-grpo rollout": ["--max-turns", "1", "--max-new-tokens", "8", "--sandbox-pool-size", "1"]}


def invoke(tool: str, path: str, args: list[str], data: bytes, spec=None, tmp_path=None):
    extra = SMALL.get(f"{tool} {path}", [])
    return CliRunner().invoke(tools()[tool], [*path.split(), *args, *extra, *side_files(spec, tmp_path)], input=data)


def side_files(spec, tmp_path) -> list[str]:
    """A documented record for each side file the command requires (--servers, --domains, ...)."""
    args = []
    for flag, kind in (spec.requires if spec else ()):
        path = tmp_path / f"side-{flag}.jsonl"
        path.write_text(json.dumps(example(kind or "environment")) + "\n")
        args += [f"--{flag}", str(path)]
    return args


def _scorable() -> dict:
    return {**example("trajectory"), "job": example("rl_sample")["job"]}


# A record for each command that reads a schema of its own rather than a record kind (by the schema's title).
SCHEMA_EXAMPLES = {
    "scorable conversation": _scorable,
    "state check": lambda: {"id": "s1", "final_state": {"a": 1}, "expected_state": {"a": 2}},
    "run_code request": lambda: {"id": "r1", "code": "print(1)"},
    "knowledge row": lambda: {"id": "k1", "domain": "geography", "question": "What is the capital of Norway?"},
    "entity row": lambda: {"id": "e1"},
    "tool_chain or tool_server": lambda: example("tool_chain"),
    "domain": lambda: example("environment"),
    "built environment": lambda: example("environment"),
    "built environment with its parts": lambda: example("environment"),
}


def good_record_of(spec) -> dict | None:
    if isinstance(spec.reads, str):
        return example(spec.reads)
    make = SCHEMA_EXAMPLES.get(spec.reads_name)
    return make() if make else None


def good_record(spec) -> bytes | None:
    record = good_record_of(spec)
    return json.dumps(record).encode() + b"\n" if record is not None else None


def with_bad_meta(spec) -> list[bytes]:
    """The good record (under new ids) with a `meta` the stage cannot stamp its provenance step into: it passes
    every schema of the stage's own, so only the shared check stands between it and the stamping."""
    record = good_record_of(spec)
    if record is None:
        return []
    metas = [{"provenance": "x"}, {"provenance": [None]}, {"parent_id": ["a"]}]
    return [json.dumps({**record, "id": f"{record.get('id', 'r')}-meta{n}", "meta": meta}).encode() + b"\n"
            for n, meta in enumerate(metas)]


@pytest.mark.parametrize(("tool", "path", "spec"), STAGES, ids=IDS)
def test_a_bad_line_stops_the_stage_with_its_line_named(tool, path, spec, tmp_path):
    for number, bad in enumerate(STOPPING):
        data = (b"\xef\xbb\xbf" if number == 0 else b"") + bad
        result = invoke(tool, path, [], data, spec, tmp_path)
        assert result.exit_code == 1, (bad[:40], result.output[-2000:])
        message = result.output.strip().splitlines()
        assert len(message) == 1 and "<stdin>:1" in message[0] and "Traceback" not in result.output, message


@pytest.mark.parametrize(("tool", "path", "spec"), STAGES, ids=IDS)
def test_with_skip_bad_every_bad_line_is_a_counted_reject_with_its_source(tool, path, spec, tmp_path):
    good = good_record(spec)
    bad_lines = BAD_LINES + with_bad_meta(spec)
    lines = ([good] if good else []) + bad_lines + ([good] if good else [])  # a good line, bad ones, its duplicate
    inputs = tmp_path / "in.jsonl"
    inputs.write_bytes(b"".join(lines))
    rejects = tmp_path / "rejects.jsonl"
    result = invoke(tool, path, [str(inputs), "--skip-bad", "--rejects", str(rejects)], b"", spec, tmp_path)
    assert result.exit_code in (0, 3), result.output[-2000:]
    entries = [json.loads(line) for line in rejects.read_text().splitlines()]
    bad_sources = {f"{inputs}:{n}" for n in range(1 + bool(good), 1 + bool(good) + len(bad_lines))}
    assert bad_sources <= {e.get("source") for e in entries}
    if good:
        duplicate = f"{inputs}:{len(lines)}"
        assert any(e.get("source") == duplicate and "duplicate id" in e["reason"] for e in entries)
    assert "Traceback" not in result.output
    assert f"rejected {len(entries)}" in result.output


def _all_commands(group, prefix=""):
    import click

    for name, command in group.commands.items():
        path = f"{prefix} {name}".strip()
        if isinstance(command, click.Group):
            yield from _all_commands(command, path)
        else:
            yield path, command


def test_no_option_of_any_command_shadows_another():
    """Two options with one click name silently drop a value (a config field named max_tokens once
    swallowed the LLM's --max-tokens): every command's parameter names are unique."""
    for tool, group in tools().items():
        for path, command in _all_commands(group):
            names = [param.name for param in command.params]
            duplicated = sorted({name for name in names if names.count(name) > 1})
            assert not duplicated, f"{tool} {path}: {duplicated}"
