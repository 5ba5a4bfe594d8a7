import io
import sys

import pytest
from astra_core.jsonl import MalformedLine, UnreadableInput, read_jsonl, write_jsonl


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
        assert str(info.value).startswith(f"{path}: the compressed data is broken after line {len(seen)} ")
        assert isinstance(info.value, OSError)  # stage commands print an OSError as one line
    else:
        assert str(info.value).startswith(f"{path}:{len(seen) + 1}: invalid JSON")


def test_a_python_without_the_decompressor_says_so(tmp_path, monkeypatch):
    """pyenv builds Python without lzma when liblzma's headers are missing: plain JSONL still reads, xz says why not."""
    monkeypatch.setitem(sys.modules, "lzma", None)  # `import lzma` now raises ImportError
    path = tmp_path / "in.jsonl.xz"
    path.write_bytes(COMPRESSORS["xz"](LINES))
    with pytest.raises(UnreadableInput, match=r"in\.jsonl\.xz: lzma-compressed, and this Python has no lzma module"):
        list(read_jsonl(path))
    assert [r["id"] for r in read_jsonl(write(tmp_path, '{"id": "a"}\n'))] == ["a"]


def test_zstd_input_says_to_decompress_it_first(tmp_path):
    path = tmp_path / "in.jsonl.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)  # a zstd frame's magic number
    with pytest.raises(UnreadableInput, match=r"in\.jsonl\.zst: zstd-compressed; decompress it first"):
        list(read_jsonl(path))
