import io
import json
import os
import subprocess
import sys

import pytest
from astra_core.formats_doc import example
from astra_core.jsonl import MalformedLine, UnreadableInput, load_checked, parse_line, read_jsonl, write_jsonl
from astra_core.schema import RecordError


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


LINES = b'{"id": "a"}\n\n{"id": "b", "meta": {"k": 1}}\n'
COMPRESSORS = {"gz": __import__("gzip").compress, "bz2": __import__("bz2").compress, "xz": __import__("lzma").compress}


@pytest.mark.parametrize("suffix", COMPRESSORS)
def test_compressed_files_are_read_as_their_lines(tmp_path, suffix):
    """Datasets are often shipped as .jsonl.gz / .bz2 / .xz: read as is, recognised by their bytes, not their name."""
    path = tmp_path / "records.data"
    path.write_bytes(COMPRESSORS[suffix](LINES))
    assert list(read_jsonl(path)) == [{"id": "a"}, {"id": "b", "meta": {"k": 1}}]


def test_a_compressed_stdin_is_read_as_its_lines(monkeypatch):
    stdin = io.TextIOWrapper(io.BufferedReader(io.BytesIO(COMPRESSORS["gz"](LINES))))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert [r["id"] for r in read_jsonl("-")] == ["a", "b"]


def test_a_bad_line_in_a_compressed_file_is_named_by_its_line(tmp_path):
    path = tmp_path / "in.jsonl.gz"
    path.write_bytes(COMPRESSORS["gz"](b'{"id": "a"}\n{"id": \n'))
    with pytest.raises(MalformedLine) as info:
        list(read_jsonl(path))
    assert str(info.value).startswith(f"{path}:2: invalid JSON")


@pytest.mark.parametrize("suffix", COMPRESSORS)
@pytest.mark.parametrize("damage", ["truncated", "corrupted"])
def test_a_broken_compressed_file_is_an_error_after_the_lines_it_holds(tmp_path, suffix, damage):
    """A download cut short, or bytes damaged on the way: the lines before the damage are read, then one error naming
    the file (where the damage decodes to garbage first, that garbage is a bad line, named by its number)."""
    noise = __import__("random").Random(0)  # bzip2 works in 900 kB blocks: enough varied lines for two
    whole = COMPRESSORS[suffix](b"".join(b'{"id": "r%d", "text": "%s"}\n' % (i, noise.randbytes(60).hex().encode())
                                         for i in range(8000)))
    path = tmp_path / f"cut.jsonl.{suffix}"
    at = len(whole) * 9 // 10
    path.write_bytes(whole[:at] if damage == "truncated" else whole[:at] + bytes(64) + whole[at + 64:])
    seen = []
    with pytest.raises(UnreadableInput if damage == "truncated" else (UnreadableInput, MalformedLine)) as info:
        seen.extend(read_jsonl(path))
    assert seen and [r["id"] for r in seen] == [f"r{i}" for i in range(len(seen))]
    if isinstance(info.value, UnreadableInput):
        assert str(info.value).startswith(f"{path}:{len(seen) + 1}: the compressed data is broken after line "
                                          f"{len(seen)} ")
        assert isinstance(info.value, RecordError)  # every command prints bad input as one line
    else:
        assert str(info.value).startswith(f"{path}:{len(seen) + 1}: invalid JSON")


def test_a_python_without_the_decompressor_says_so(tmp_path, monkeypatch):
    """pyenv builds Python without lzma when liblzma's headers are missing: plain JSONL still reads, xz says why not."""
    monkeypatch.setitem(sys.modules, "lzma", None)  # `import lzma` now raises ImportError
    path = tmp_path / "in.jsonl.xz"
    path.write_bytes(COMPRESSORS["xz"](LINES))
    with pytest.raises(UnreadableInput, match=r"in\.jsonl\.xz:1: lzma-compressed, and this Python has no lzma module"):
        list(read_jsonl(path))
    assert [r["id"] for r in read_jsonl(write(tmp_path, '{"id": "a"}\n'))] == ["a"]


def test_zstd_input_says_to_decompress_it_first(tmp_path):
    path = tmp_path / "in.jsonl.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)  # a zstd frame's magic number
    with pytest.raises(UnreadableInput, match=r"in\.jsonl\.zst:1: zstd-compressed; decompress it first"):
        list(read_jsonl(path))


# -- files that are not JSON Lines: the message says what the file is and how to convert it ----------------------

RECORD = example("trajectory")
ASTRA_CORE = os.path.join(os.path.dirname(sys.executable), "astra-core")
MULTI_LINE = "looks like one JSON document spread over several lines (a JSON array or pretty-printed JSON), " \
             "not JSON Lines (one record per line): convert an array with jq -c '.[]' FILE, " \
             "pretty-printed records with jq -c . FILE"


def records(n: int) -> list[dict]:
    return [dict(RECORD, id=f"traj-{i}") for i in range(n)]


def malformed(raw: bytes, lineno: int = 1) -> str:
    with pytest.raises(MalformedLine) as info:
        parse_line("in.jsonl", lineno, raw)
    return info.value.message


def latin1_line(record: dict) -> bytes:
    """A record as a Latin-1 editor saves it: an 'Ö' in its text (one byte, 0xd6, where UTF-8 has two)."""
    record = dict(record, messages=[*record["messages"][:-1], dict(record["messages"][-1], content="Öslo: 12 °C")])
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("latin-1")


def test_a_line_that_is_not_utf8_names_its_first_bad_byte_and_where_it_is():
    """orjson says 'line 1 column 1 (char 0)' wherever the bad byte is: the hint's position is Python's decoder's."""
    raw = latin1_line(RECORD)
    at = raw.index(b"\xd6")
    assert at > 100  # deep in the line, far from where the parser's message points
    assert malformed(raw) == (
        "invalid JSON: str is not valid UTF-8: surrogates not allowed: line 1 column 1 (char 0); "
        f"the line is not UTF-8 text (byte 0xd6 at byte {at + 1} of the line, counting from 1): JSON Lines is UTF-8, "
        "convert the file, e.g. from Latin-1 with iconv -f latin1 -t utf-8 FILE")
    # the position counts the bytes of the line as read, a byte-order mark too; a cut-off UTF-8 character is bad too
    assert f"(byte 0xd6 at byte {at + 4} of the line" in malformed(b"\xef\xbb\xbf" + raw)
    assert "(byte 0xc3 at byte 8 of the line" in malformed('{"a": "Ö"}'.encode()[:8])


@pytest.mark.parametrize("shape", ["array", "pretty-printed record", "pretty-printed records"])
def test_the_opening_of_a_multi_line_json_document_says_it_is_not_json_lines(shape):
    """json.dump(..., indent=2), the way a researcher writes a JSON file: its first line is '[' or '{' alone."""
    stream = io.StringIO()
    if shape == "array":
        json.dump(records(2), stream, indent=2)
    else:
        for record in records(1 if shape == "pretty-printed record" else 2):
            json.dump(record, stream, indent=2)
            stream.write("\n")
    first = stream.getvalue().encode().splitlines(keepends=True)[0]
    assert first.strip() in (b"[", b"{")
    message = malformed(first)
    assert message.startswith("invalid JSON: unexpected end of data: ")
    assert message.endswith("; the file " + MULTI_LINE)


@pytest.mark.parametrize("raw", [b"[\r\n", b"  {\n", b'[{"id": "a"},\n', b'{"id": "a",\n', b'{"id": "a", "tools": [\n',
                                 b'{"t": "say \\"hi\\",", "u":'])
def test_a_document_that_goes_on_on_its_next_line_is_named_as_such(raw):
    assert malformed(raw).endswith(MULTI_LINE)
    assert malformed(b"\xef\xbb\xbf" + raw).endswith(MULTI_LINE)


@pytest.mark.parametrize("raw", [
    b'{"id": "a"', b'{"id": "a"\n',  # a record cut off after a value (the last line of an interrupted write)
    b'{"id": "a", "text": "Hello,', b'{"id": "a", "text": "say \\",',  # ... in the middle of a string
    b'{"id": "a", "n": 12', b'{"id": "a", "ok": tru',  # ... in the middle of a number or a literal
    b"{oops\n", b"]\n", b'  "tools": [\n',  # other lines of a pretty-printed file, or plain garbage
])
def test_other_malformed_lines_get_no_hint(raw):
    message = malformed(raw)
    assert message.startswith("invalid JSON: ")
    assert ";" not in message and "jq" not in message and "UTF-8" not in message


def test_a_json_array_of_records_on_one_line_says_so():
    assert malformed((json.dumps(records(2)) + "\n").encode()) == (
        "expected a JSON object, got list; the line is a JSON array of 2 records, not one record: "
        "JSON Lines has one record per line (convert with jq -c '.[]' FILE)")
    assert "a JSON array of 1 record, not one record" in malformed(json.dumps(records(1)).encode())
    for other in (b"[1, 2]", b"[]", b'[{"id": "a"}, 1]'):
        assert malformed(other) == "expected a JSON object, got list"


def test_valid_lines_read_as_before():
    compact = json.dumps(RECORD, ensure_ascii=False, separators=(",", ":")).encode()
    for raw in (json.dumps(RECORD).encode() + b"\n", compact, b"\xef\xbb\xbf" + compact + b"\r\n",
                latin1_line(RECORD).decode("latin-1").encode()):
        assert parse_line("in.jsonl", 1, raw, "trajectory").record == json.loads(raw.decode("utf-8-sig"))
    assert parse_line("in.jsonl", 1, json.dumps(RECORD).encode(), "trajectory").record == RECORD


def not_jsonl_files(tmp_path) -> dict[str, tuple]:
    """Files as researchers write them; each: (path, the line the error names, what its message ends with)."""
    array = tmp_path / "array.json"
    with open(array, "w") as handle:
        json.dump(records(2), handle, indent=2)
    pretty = tmp_path / "pretty.jsonl"
    with open(pretty, "w") as handle:
        for record in records(2):
            json.dump(record, handle, indent=2)
            handle.write("\n")
    one_line = tmp_path / "one-line.json"
    one_line.write_text(json.dumps(records(3)) + "\n")
    latin1 = tmp_path / "latin1.jsonl"  # a good record, then one saved in Latin-1
    bad = latin1_line(dict(RECORD, id="traj-1"))
    latin1.write_bytes(json.dumps(dict(RECORD, id="traj-0")).encode() + b"\n" + bad)
    at = bad.index("Ö".encode("latin-1")) + 1
    utf8 = (f"the line is not UTF-8 text (byte 0xd6 at byte {at} of the line, counting from 1): "
            "JSON Lines is UTF-8, convert the file, e.g. from Latin-1 with iconv -f latin1 -t utf-8 FILE")
    return {"array": (array, 1, "; the file " + MULTI_LINE), "pretty": (pretty, 1, "; the file " + MULTI_LINE),
            "one-line": (one_line, 1, "; the line is a JSON array of 3 records, not one record: "
                                      "JSON Lines has one record per line (convert with jq -c '.[]' FILE)"),
            "latin1": (latin1, 2, "; " + utf8)}


@pytest.mark.parametrize("name", ["array", "pretty", "one-line", "latin1"])
def test_a_stage_says_what_a_file_that_is_not_json_lines_is(tmp_path, name):
    path, lineno, hint = not_jsonl_files(tmp_path)[name]
    out = tmp_path / "out.jsonl"
    done = subprocess.run([ASTRA_CORE, "validate", "trajectory", str(path), "-o", str(out)], capture_output=True,
                          text=True)
    assert done.returncode == 1
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    prefix = f"Error: {path}:{lineno}: " + ("expected a JSON object" if name == "one-line" else "invalid JSON: ")
    assert error.startswith(prefix) and error.endswith(hint), error


@pytest.mark.parametrize("name", ["array", "pretty", "one-line", "latin1"])
def test_a_stage_skipping_bad_lines_gives_the_hint_as_the_reason(tmp_path, name):
    path, lineno, hint = not_jsonl_files(tmp_path)[name]
    out, rejects = tmp_path / "out.jsonl", tmp_path / "rejects.jsonl"
    done = subprocess.run([ASTRA_CORE, "validate", "trajectory", str(path), "-o", str(out), "--skip-bad",
                           "--rejects", str(rejects)], capture_output=True, text=True)
    assert "Traceback" not in done.stderr
    written = [json.loads(line) for line in out.read_text().splitlines()]
    rejected = [json.loads(line) for line in rejects.read_text().splitlines()]
    lines = [n for n, line in enumerate(path.read_bytes().splitlines(), start=1) if line.strip()]
    # every line ends in the output or in the rejects (in latin1.jsonl, the good first line in the output)
    assert sorted(int(r["source"].rpartition(":")[2]) for r in rejected) == lines[len(written):]
    assert len(written) + len(rejected) == len(lines)
    (named,) = [r for r in rejected if r["source"] == f"{path}:{lineno}"]
    assert named["reason"].startswith(f"malformed: {path}:{lineno}: ") and named["reason"].endswith(hint)
    assert [r["id"] for r in written] == (["traj-0"] if name == "latin1" else [])
    assert f"read {len(lines)} " in done.stderr


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_nan_and_infinity_written_by_python_are_named(value, bom):
    """`json.dumps` writes NaN and Infinity unless allow_nan=False; JSON has no such values."""
    record = {"id": "r", "note": "naïve", "score": float(value.lower().replace("infinity", "inf"))}
    raw = bom + json.dumps(record, ensure_ascii=False).encode()
    assert value.encode() in raw
    with pytest.raises(MalformedLine) as bad:
        parse_line("scores.jsonl", 1, raw)
    assert str(bad.value).endswith("; NaN and Infinity are not JSON (Python's json.dumps writes them unless "
                                   "allow_nan=False): write null, or the number as a string")


def test_nan_as_a_string_is_a_string():
    assert parse_line("f.jsonl", 1, b'{"id": "r", "note": "NaN", "x": "Infinity"}').record["note"] == "NaN"


@pytest.mark.parametrize("raw, hinted", [(b'{"id": "a", "tools": [\n', False), (b'{"id": "a",\n', False),
                                         (b"{\n", True), (b"  [\n", True), (b"[{\n", True)])
def test_further_down_only_a_bare_opening_bracket_is_taken_for_a_multi_line_document(raw, hinted):
    """Line 1 may open a document in any shape; at line 5, a line cut off after ',' or '[' is likelier a record of
    an interrupted write, and is not told to be converted with jq."""
    assert malformed(raw, lineno=5).endswith(MULTI_LINE) is hinted
    assert malformed(raw, lineno=1).endswith(MULTI_LINE)


def _trajectory(record_id: str, assistant: bool = True) -> dict:
    messages = [{"role": "user", "content": "q"}] + ([{"role": "assistant", "content": "a"}] if assistant else [])
    return {"id": record_id, "messages": messages, "tools": [], "meta": {}}


def _needs_an_assistant_turn(record: dict) -> None:
    if not any(m["role"] == "assistant" for m in record["messages"]):
        raise RecordError("no assistant turn", record_id=record["id"], field="messages")


def test_load_checked_stops_at_the_first_bad_record_naming_file_line_and_field(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_trajectory("a")) + "\n" + json.dumps(_trajectory("b", assistant=False)) + "\n")
    with pytest.raises(RecordError) as raised:
        load_checked([str(path)], "trajectory", stage="train", check=_needs_an_assistant_turn)
    assert str(raised.value).startswith(f"{path}:2") and "b" in str(raised.value)
    assert raised.value.field == "messages" and "no assistant turn" in str(raised.value)


def test_load_checked_skipping_keeps_every_record_in_output_or_rejects(tmp_path, capsys):
    path, rejects = tmp_path / "t.jsonl", tmp_path / "rejects.jsonl"
    lines = [json.dumps(_trajectory("a")), "not json", json.dumps({"id": "c"}),
             json.dumps(_trajectory("d", assistant=False)), json.dumps(_trajectory("e"))]
    path.write_text("\n".join(lines) + "\n")
    kept = load_checked([str(path)], "trajectory", stage="train", check=_needs_an_assistant_turn, skip_bad=True,
                        rejects=str(rejects))
    assert [r["id"] for r in kept] == ["a", "e"]
    rejected = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert [r["source"] for r in rejected] == [f"{path}:2", f"{path}:3", f"{path}:4"]
    assert [r["id"] for r in rejected] == [None, "c", "d"] and {r["stage"] for r in rejected} == {"train"}
    assert rejected[0]["line"].rstrip("\n") == "not json" and "invalid JSON" in rejected[0]["reason"]
    assert "'messages' is a required property" in rejected[1]["reason"] and "no assistant turn" in rejected[2]["reason"]
    assert "train: 3 trajectory record(s) skipped" in capsys.readouterr().err


def test_load_checked_with_nothing_usable_is_an_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_trajectory("d", assistant=False)) + "\n")
    with pytest.raises(RecordError, match="no usable trajectory record in"):
        load_checked((p for p in [str(path)]), "trajectory", stage="train", check=_needs_an_assistant_turn,
                     skip_bad=True)
