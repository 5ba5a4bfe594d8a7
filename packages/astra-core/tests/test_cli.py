import json

from astra_core.cli import main
from click.testing import CliRunner


def test_validate_passes_good_records_and_rejects_bad_ones(tmp_path):
    good = {"id": "c1", "meta": {}, "server_id": "s", "tools": ["a", "b"]}
    bad = {"id": "c2", "meta": {}, "server_id": "s", "tools": []}
    path = tmp_path / "chains.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    rejects = tmp_path / "rejects.jsonl"
    result = CliRunner().invoke(main, ["validate", "tool_chain", str(path), "--rejects", str(rejects)])
    assert result.exit_code == 1
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["c1"]
    (entry,) = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert entry["id"] == "c2" and "tools" in entry["reason"]
    assert "read 2" in result.stderr and "rejected 1" in result.stderr


def test_validate_reports_a_malformed_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"id": "a"}\n{oops\n')
    result = CliRunner().invoke(main, ["validate", "task", str(path)])
    assert result.exit_code == 1
    assert f"{path}:2: invalid JSON" in result.stderr


def test_schema_prints_json_schema():
    result = CliRunner().invoke(main, ["schema", "qa_instance"])
    assert result.exit_code == 0
    assert "decomposition_trace" in json.loads(result.stdout)["properties"]
