"""astra_core.command: a declared stage's batches, bundled configs, short flags, openers and exit codes."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

import click
from astra_core.command import stage_command
from astra_core.config import knob
from astra_core.stage import Malformed, StageError
from click.testing import CliRunner

SHAPE = {"title": "item", "type": "object", "required": ["id", "n"],
         "properties": {"id": {"type": "string"}, "n": {"type": "integer"}}}


@dataclass
class Config:
    size: int = knob(2, "Records per batch.", flag="batch", short="b", minimum=1, maximum=64)
    offset: int = knob(0, "Added to n.")


def build(tmp_path):
    """A group with a batched stage (its batch size a config field) and bundled configs in tmp_path/bundled."""
    bundled = tmp_path / "bundled"
    bundled.mkdir()
    (bundled / "big.yaml").write_text("size: 3\noffset: 100\n")
    group = click.Group("tool")
    seen = {}

    @contextlib.contextmanager
    def opener(config, options, llm_config):
        seen["opened"] = (config.size, options.skip_bad, llm_config)
        yield []

    def add(records, config, log):
        log.append(len(records))
        return [StageError("stop") if r["n"] < 0 else Malformed("above 100", field="n") if r["n"] > 100 else
                ValueError("odd") if r["n"] % 2 else
                {"id": r["id"], "n": r["n"] + config.offset} for r in records]

    stage_command(group, "add", reads=SHAPE, config=Config, uses={"log": opener}, batch=lambda c: c.size,
                  bundled_configs=bundled)(add)
    return group, seen


def lines(*numbers):
    return "".join(json.dumps({"id": f"r{i}", "n": n}) + "\n" for i, n in enumerate(numbers))


def test_the_batch_size_comes_from_the_config_and_a_bundled_config_is_found_by_name(tmp_path):
    group, seen = build(tmp_path)
    result = CliRunner().invoke(group, ["add", "-b", "1"], input=lines(2, 4))
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["n"] for line in result.stdout.splitlines()] == [2, 4]
    assert seen["opened"] == (1, False, None)  # (config, options, llm config) for a three-argument opener
    result = CliRunner().invoke(group, ["add", "--config", "big.yaml"], input=lines(2, 4))
    assert [json.loads(line)["n"] for line in result.stdout.splitlines()] == [102, 104]
    assert seen["opened"][0] == 3
    result = CliRunner().invoke(group, ["add", "--config", "nope.yaml"], input=lines(2))
    assert result.exit_code == 1 and "no such config file 'nope.yaml' (bundled: big.yaml)" in result.output


def test_a_bounded_knob_out_of_range_is_a_usage_error_as_a_flag_and_a_config_error_in_a_file(tmp_path):
    group, seen = build(tmp_path)
    for value in ("0", "65"):
        result = CliRunner().invoke(group, ["add", "-b", value], input=lines(2))
        assert result.exit_code == 2, result.output
        assert "--batch" in result.output and f"must be between 1 and 64, got {value}" in result.output
    (tmp_path / "bundled" / "zero.yaml").write_text("size: 0\n")
    result = CliRunner().invoke(group, ["add", "--config", "zero.yaml"], input=lines(2))
    assert result.exit_code == 1 and "config field size: must be between 1 and 64, got 0" in result.output
    assert "opened" not in seen  # nothing ran
    result = CliRunner().invoke(group, ["add", "-b", "64"], input=lines(2))
    assert result.exit_code == 0, result.output


def test_records_that_fail_internally_exit_3_and_a_stage_error_stops_the_stage(tmp_path):
    group, _ = build(tmp_path)
    result = CliRunner().invoke(group, ["add"], input=lines(1, 3))
    assert result.exit_code == 3 and "rejected 2 (2 errors)" in result.output
    result = CliRunner().invoke(group, ["add"], input=lines(2, -2))
    assert result.exit_code == 1 and result.output.strip().splitlines()[-1] == "tool add: stop"


def test_input_a_stage_finds_malformed_stops_it_as_a_bad_line_would_unless_skip_bad(tmp_path):
    """A rule no schema can express (here n <= 100) is still malformed input: file, line, record and field."""
    group, _ = build(tmp_path)
    result = CliRunner().invoke(group, ["add"], input=lines(2, 102, 4))
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == "tool add: <stdin>:2: record 'r1': field n: above 100"
    rejects = tmp_path / "rejects.jsonl"
    result = CliRunner().invoke(group, ["add", "--skip-bad", "--rejects", str(rejects)], input=lines(2, 102, 4))
    assert result.exit_code == 0 and [json.loads(line)["n"] for line in result.stdout.splitlines()] == [2, 4]
    [reject] = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert reject["reason"] == "malformed: <stdin>:2: record 'r1': field n: above 100" and reject["record"]["n"] == 102


def test_path_knobs_expand_the_home_directory_wherever_they_are_given(tmp_path, monkeypatch):
    """`output_dir: ~/runs/x` in a YAML config made a directory named `~` in the working directory (no shell
    expands a config file). A path knob's `~` is the home directory, from a file or a flag; other knobs keep it."""
    from astra_core.config import load_config

    @dataclass
    class Paths:
        out: str = knob("out", "A directory.", path=True)
        extra: list[str] = knob([], "Files.", path=True)
        unset: str | None = knob(None, "A file.", path=True)
        title: str = knob("t", "Not a path.")

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config_file = tmp_path / "c.yaml"
    config_file.write_text("out: ~/runs/x\nextra: [~/a.jsonl, b.jsonl]\ntitle: ~/not-a-path\n")
    config = load_config(Paths, config_file)
    assert (config.out, config.extra) == (f"{tmp_path}/home/runs/x", [f"{tmp_path}/home/a.jsonl", "b.jsonl"])
    assert (config.unset, config.title) == (None, "~/not-a-path")
    assert load_config(Paths, config_file, {"out": "~"}).out == f"{tmp_path}/home"



def test_a_stage_runs_with_the_collector_set_for_records_in_flight_and_leaves_it_as_it_found_it():
    """Records are seen with young collections every YOUNG_THRESHOLD objects; the caller (here pytest's process)
    gets its thresholds back."""
    import gc

    from astra_core.collector import YOUNG_THRESHOLD

    group, during = click.Group("tool"), []

    async def look(record):
        during.append(gc.get_threshold())
        return record

    stage_command(group, "look", reads=SHAPE)(look)
    before = gc.get_threshold()
    assert before[0] != YOUNG_THRESHOLD
    result = CliRunner().invoke(group, ["look"], input=lines(1, 2))
    assert result.exit_code == 0, result.output
    assert during == [(YOUNG_THRESHOLD, *before[1:])] * 2
    assert gc.get_threshold() == before
