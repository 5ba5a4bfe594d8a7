import io
import sys

import pytest
from astra_core.jsonl import MalformedLine, read_jsonl, write_jsonl


def write(tmp_path, text: str):
    path = tmp_path / "in.jsonl"
    path.write_text(text)
    return path


def test_reads_records_and_skips_blank_lines(tmp_path):
    path = write(tmp_path, '{"id": "a"}\n\n{"id": "b"}\n')
    assert [r["id"] for r in read_jsonl(path)] == ["a", "b"]


@pytest.mark.parametrize("line, expected", [
    ('{"id": "a"', "invalid JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('"text"', "expected a JSON object, got str"),
])
def test_malformed_line_names_file_and_line(tmp_path, line, expected):
    path = write(tmp_path, '{"id": "ok"}\n{"id": "ok2"}\n' + line + "\n")
    with pytest.raises(MalformedLine) as info:
        list(read_jsonl(path))
    message = str(info.value)
    assert message.startswith(f"{path}:3: ")
    assert expected in message
    assert info.value.lineno == 3


@pytest.mark.parametrize("line, expected", [
    ('{"id": [1]}', "field id: must be a non-empty string, got array [1]"),
    ('{"id": 7}', "field id: must be a non-empty string, got integer 7"),
    ('{"id": ""}', 'field id: must be a non-empty string, got string ""'),
    ('{"id": "a", "meta": "x"}', "record 'a': field meta: must be an object, got string \"x\""),
    ('{"id": "a", "meta": null}', "record 'a': field meta: must be an object, got null"),
])
def test_the_shared_fields_are_typed_for_records_of_any_kind(tmp_path, line, expected):
    """Stages key records by id and append to meta: a list id once crashed every stage (unhashable), an
    integer id escaped the duplicate check, a string meta crashed the output's provenance stamp."""
    path = write(tmp_path, line + "\n")
    with pytest.raises(MalformedLine) as info:
        list(read_jsonl(path))
    assert str(info.value) == f"{path}:1: {expected}"
    assert [r.get("id") for r in read_jsonl(write(tmp_path, '{"id": "a", "meta": {}}\n{"id": null}\n{"x": 1}\n'))] == \
        ["a", None, None]


def test_invalid_record_names_line_record_and_field(tmp_path):
    path = write(tmp_path, '{"id": "c1", "meta": {}, "server_id": "s", "tools": []}\n')
    with pytest.raises(MalformedLine) as info:
        list(read_jsonl(path, kind="tool_chain"))
    assert str(info.value).startswith(f"{path}:1: record 'c1': field tools: ")


def test_write_then_read_round_trip(tmp_path):
    records = [{"id": str(i), "meta": {}, "value": i, "text": "é ✓"} for i in range(5)]
    path = tmp_path / "out.jsonl"
    assert write_jsonl(path, records) == 5
    assert list(read_jsonl(path)) == records


def test_reads_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"id": "s"}\n')))
    assert [r["id"] for r in read_jsonl("-")] == ["s"]
