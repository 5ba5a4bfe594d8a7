"""`astra-core view`: entries from any JSONL (kinds, rejects, bad lines), the report file, the CLI and --serve."""

import io
import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
from astra_core.cli import main
from astra_core.formats_doc import example
from astra_core.records import KINDS
from astra_core.view import load
from astra_core.view.report import render
from astra_core.view.serve import Index, make_server
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[3]
ASTRA_CORE = str(Path(sys.executable).parent / "astra-core")
HOSTILE = '<img src=x onerror=alert(1)> and </script><script>alert(2)</script>'


def write_lines(path: Path, *lines) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def embedded_data(html: str) -> dict:
    match = re.search(r'<script type="application/json" id="astra-data">(.*?)</script>', html, re.S)
    return json.loads(match.group(1))


def reject(record: dict, reason: str) -> dict:
    return {"id": record["id"], "reason": reason, "stage": "astra-reward judge-trajectory", "record": record}


@pytest.fixture
def examples(tmp_path) -> Path:
    return write_lines(tmp_path / "examples.jsonl", *(example(kind) for kind in KINDS))


# -- entries ----------------------------------------------------------------------------------------------------


def test_every_documented_example_is_recognized_as_its_kind(examples):
    entries = load([str(examples)])
    assert [e["kind"] for e in entries] == list(KINDS)
    assert [e["record"] for e in entries] == [example(kind) for kind in KINDS]
    assert all(e["problems"] == [] and not e["rejected"] for e in entries)
    assert [e["line"] for e in entries] == list(range(1, len(KINDS) + 1))


def test_index_facts_come_from_the_record():
    by_kind = {e["kind"]: e for e in load(["-"], stdin=io.BytesIO(
        "".join(json.dumps(example(k)) + "\n" for k in KINDS).encode()))}
    assert by_kind["rollout"]["reward"] == 0.6667
    assert by_kind["trajectory"]["reward"] == 1.0  # scores.overall
    assert by_kind["eval_result"]["verdict"] == "failure"
    assert by_kind["task"]["title"].startswith("Which tables")
    assert by_kind["tool_chain"]["title"] == "list_tables → describe_table → read_query"
    assert {e["file"] for e in by_kind.values()} == {"<stdin>"}


def test_a_record_missing_a_field_is_still_its_kind_with_the_problem_named(tmp_path):
    broken = {k: v for k, v in example("trajectory").items() if k != "tools"}
    [entry] = load([str(write_lines(tmp_path / "t.jsonl", broken))])
    assert entry["kind"] == "trajectory"
    assert any("tools" in problem for problem in entry["problems"])
    assert entry["record"] == broken


def test_a_declared_kind_wins_and_an_unrecognizable_record_is_unknown(tmp_path):
    declared = {**example("task"), "kind": "task"}
    entries = load([str(write_lines(tmp_path / "x.jsonl", declared, {"id": "z", "colour": "blue"}))])
    assert [e["kind"] for e in entries] == ["task", "unknown"]
    assert entries[1]["id"] == "z"


def test_the_most_specific_fitting_schema_wins():
    # an rl_sample also fits the trajectory schema (id, messages, tools, meta); it must not be shown as one
    [entry] = load(["-"], stdin=io.BytesIO(json.dumps(example("rl_sample")).encode()))
    assert entry["kind"] == "rl_sample"


def test_bad_lines_become_invalid_entries_never_a_crash(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "first", "colour": 1}\n{"id": "cut off\n\n[1, 2]\n\xff\xfe not utf8\n'
                     + json.dumps(example("task")).encode() + b"\n")
    entries = load([str(path)])
    assert [e["kind"] for e in entries] == ["unknown", "invalid", "invalid", "invalid", "task"]
    assert [e["line"] for e in entries] == [1, 2, 4, 5, 6]
    assert "invalid JSON" in entries[1]["error"] and entries[1]["record"].startswith('{"id": "cut off')
    assert entries[2]["error"] == "expected a JSON object, got list"
    assert "invalid JSON" in entries[3]["error"]
    assert "not UTF-8 text (byte 0xff at byte 1 of the line" in entries[3]["error"]


def test_a_file_that_is_not_json_lines_says_what_it_is_in_the_viewer_too(tmp_path):
    records = [example("trajectory"), example("task")]
    pretty, one_line = tmp_path / "records.json", tmp_path / "array.jsonl"
    pretty.write_text(json.dumps(records, indent=2))
    one_line.write_text(json.dumps(records) + "\n")
    opening, *_ = load([str(pretty)])
    assert opening["kind"] == "invalid" and "not JSON Lines (one record per line)" in opening["error"]
    [array] = load([str(one_line)])
    assert array["error"] == ("expected a JSON object, got list; the line is a JSON array of 2 records, not one "
                              "record: JSON Lines has one record per line (convert with jq -c '.[]' FILE)")


def test_rejects_files_show_the_wrapped_record_with_its_reason(tmp_path):
    trajectory = example("trajectory")
    rejects = write_lines(tmp_path / "judged.rejects.jsonl", reject(trajectory, "below min score: overall 0.2 < 0.5"),
                          {"id": None, "reason": "malformed: invalid JSON", "stage": "astra-core validate",
                           "source": "in.jsonl:3", "line": "{not json"})
    kept, bad = load([str(rejects)])
    assert kept["rejected"] and kept["kind"] == "trajectory" and kept["record"] == trajectory
    assert kept["reasons"] == ["below min score: overall 0.2 < 0.5"]
    assert kept["stage"] == "astra-reward judge-trajectory"
    assert bad["rejected"] and bad["kind"] == "invalid" and bad["reasons"] == ["malformed: invalid JSON"]


def test_a_reject_is_recognized_by_its_shape_or_its_file_name(tmp_path):
    task = example("task")
    [shaped] = load([str(write_lines(tmp_path / "anything.jsonl", reject(task, "no server")))])
    [named] = load([str(write_lines(tmp_path / "rejects.plans.jsonl", task))])
    [kept] = load([str(write_lines(tmp_path / "tasks.jsonl", task))])
    assert shaped["rejected"] and shaped["reasons"] == ["no server"] and shaped["kind"] == "task"
    assert named["rejected"] and named["kind"] == "task"
    assert not kept["rejected"]


# -- the report file --------------------------------------------------------------------------------------------


def test_the_report_is_self_contained_and_embeds_every_record(examples):
    html = render(load([str(examples)]))
    assert "<script src" not in html and "<link" not in html and "http://" not in html and "https://" not in html
    data = embedded_data(html)
    assert data["mode"] == "embedded"
    assert [e["record"] for e in data["entries"]] == [example(kind) for kind in KINDS]
    assert 'id="index"' in html and "function transcript" in html and ".transcript" in html


def test_record_content_cannot_break_out_of_the_page(tmp_path):
    record = {**example("trajectory"), "id": HOSTILE}
    record["messages"] = [*record["messages"], {"role": "assistant", "content": HOSTILE}]
    html = render(load([str(write_lines(tmp_path / "t.jsonl", record))]), title=HOSTILE)
    assert "<img" not in html and "<script>alert" not in html
    assert html.count("</script>") == 2  # the data's and the code's own
    assert html.count("<script") == 2
    assert embedded_data(html)["entries"][0]["record"] == record  # same content once parsed


def test_huge_strings_are_embedded_whole(tmp_path):
    record = {**example("trajectory"), "id": "huge"}
    record["messages"] = [{"role": "user", "content": "x" * 5_000_000}]
    html = render(load([str(write_lines(tmp_path / "t.jsonl", record))]))
    assert len(embedded_data(html)["entries"][0]["record"]["messages"][0]["content"]) == 5_000_000


def test_the_static_files_ship_in_the_wheel(tmp_path):
    subprocess.run([sys.executable, "-m", "uv", "build", "--wheel", "--quiet", str(ROOT / "packages" / "astra-core"),
                    "--out-dir", str(tmp_path)], check=True, capture_output=True)
    [wheel] = tmp_path.glob("astra_agent_core-*.whl")  # the distribution of astra_core
    names = zipfile.ZipFile(wheel).namelist()
    assert {"astra_core/view/static/report.js", "astra_core/view/static/report.css",
            "astra_core/view/report.py"} <= set(names)


# -- the command ------------------------------------------------------------------------------------------------


def test_cli_writes_the_report_and_counts_on_stderr(tmp_path, examples):
    rejects = write_lines(tmp_path / "t.rejects.jsonl", reject(example("trajectory"), "too short"), "{oops")
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["view", str(examples), str(rejects), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stderr == f"view: {len(KINDS) + 2} records from 2 files (2 rejected, 1 invalid) -> {out}\n"
    entries = embedded_data(out.read_text())["entries"]
    assert [e["kind"] for e in entries[-2:]] == ["trajectory", "invalid"]
    assert entries[-2]["reasons"] == ["too short"]


def test_cli_reads_stdin(tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["view", "-", "-o", str(out)], input=json.dumps(example("rollout")) + "\n")
    assert result.exit_code == 0, result.output
    [entry] = embedded_data(out.read_text())["entries"]
    assert entry["file"] == "<stdin>" and entry["kind"] == "rollout"


def test_cli_as_a_process_writes_html_to_stdout(examples):
    done = subprocess.run([ASTRA_CORE, "view", str(examples), "-o", "-"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("<!DOCTYPE html>")
    assert len(embedded_data(done.stdout)["entries"]) == len(KINDS)
    assert done.stderr == f"view: {len(KINDS)} records from 1 files (0 rejected, 0 invalid) -> <stdout>\n"


def test_cli_fails_clearly_on_a_missing_file(tmp_path):
    result = CliRunner().invoke(main, ["view", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and "nope.jsonl' does not exist" in result.stderr
    assert not (tmp_path / "r.html").exists()


def test_cli_shows_a_gzipped_file_as_its_records(tmp_path, examples):
    import gzip

    packed = tmp_path / "examples.jsonl.gz"
    packed.write_bytes(gzip.compress(examples.read_bytes()))
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["view", str(packed), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert [e["kind"] for e in embedded_data(out.read_text())["entries"]] == list(KINDS)


def test_cli_stops_in_one_line_on_a_truncated_compressed_file(tmp_path, examples):
    import gzip

    packed = tmp_path / "cut.jsonl.gz"
    packed.write_bytes(gzip.compress(examples.read_bytes())[:-12])
    for serve in ([], ["--serve", "--port", "0"]):
        result = CliRunner().invoke(main, ["view", str(packed), "-o", str(tmp_path / "r.html"), *serve])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
        assert result.stderr.startswith(f"Error: {packed}:")
        assert ": the compressed data is broken after line " in result.stderr
    assert not (tmp_path / "r.html").exists()


def test_serve_reads_the_records_of_a_compressed_file_on_demand(tmp_path, examples):
    import bz2

    packed = tmp_path / "examples.jsonl.bz2"
    packed.write_bytes(bz2.compress(examples.read_bytes()))
    assert_holds_the_examples(Index([str(packed)]), str(packed))


def assert_holds_the_examples(index: Index, name: str) -> None:
    """`index` (closed after) has every example record, each read on demand, named by `name` and its line."""
    try:
        assert [s["kind"] for s in index.summaries] == list(KINDS)
        assert index.entry(len(KINDS) - 1)["record"] == example(KINDS[-1])
        assert index.entry(2)["file"] == name and index.entry(2)["line"] == 3
    finally:
        index.close()


def test_serve_reads_a_pipe_named_as_a_file(tmp_path, examples):
    """`view --serve <(zcat x.gz)`: the shell names a pipe. It was read as a seekable file (after peeking at its
    first bytes for compression): the page showed 0 records."""
    import os

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    threading.Thread(target=lambda: pipe.write_bytes(examples.read_bytes()), daemon=True).start()
    built: dict[str, Index] = {}  # (read in a thread: the old reading waited forever on a second open of the pipe)
    reader = threading.Thread(target=lambda: built.update(index=Index([str(pipe)])), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert "index" in built, "reading the pipe did not finish"
    assert_holds_the_examples(built["index"], str(pipe))


# -- --serve ----------------------------------------------------------------------------------------------------


def get(url: str):
    with urllib.request.urlopen(url, timeout=10) as reply:
        body = reply.read().decode()
        return json.loads(body) if reply.headers["Content-Type"] == "application/json" else body


@pytest.fixture
def served(examples):
    index = Index([str(examples), "-"], stdin=io.BytesIO(b'{"broken\n' + json.dumps(example("plan")).encode()))
    server = make_server(index, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    index.close()


def test_serve_pages_summaries_and_reads_records_on_demand(served):
    page = get(served + "/")
    assert embedded_data(page) == {"mode": "serve", "total": len(KINDS) + 2}
    assert "function transcript" in page
    first = get(served + "/api/entries?offset=0&limit=3")
    assert first["total"] == len(KINDS) + 2
    assert [e["kind"] for e in first["entries"]] == list(KINDS[:3])
    assert all("record" not in e for e in first["entries"])
    tail = get(served + f"/api/entries?offset={len(KINDS)}&limit=100")["entries"]
    assert [(e["file"], e["line"], e["kind"]) for e in tail] == [("<stdin>", 1, "invalid"), ("<stdin>", 2, "plan")]
    assert get(served + "/api/entry?i=4")["record"] == example(KINDS[4])
    assert get(served + f"/api/entry?i={len(KINDS) + 1}")["record"] == example("plan")


def test_serve_refuses_bad_requests(served):
    for path in ("/api/entry?i=999", "/api/entry", "/api/entries?offset=x", "/nothing"):
        with pytest.raises(urllib.error.HTTPError) as caught:
            get(served + path)
        assert caught.value.code in (400, 404)


def test_serve_command_on_a_port_in_use_is_one_line(examples):
    """It was a traceback (OSError: Address already in use)."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run([ASTRA_CORE, "view", str(examples), "--serve", "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"Error: cannot listen on 127.0.0.1:{port}: Address already in use (--port 0 picks a free port)"


def test_serve_command_on_a_free_port(examples, tmp_path):
    """...stopped by SIGTERM (`kill`) as by Ctrl-C: the copy of its standard input is removed (it was left in the
    temporary directory)."""
    process = subprocess.Popen([ASTRA_CORE, "view", str(examples), "-", "--serve", "--port", "0"],
                               stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(tmp_path)})
    process.stdin.write(json.dumps(example("plan")) + "\n")
    process.stdin.close()
    try:
        announced = process.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", announced)
        assert match, announced
        assert announced.startswith(f"view: {len(KINDS) + 1} records from 2 files (0 rejected, 0 invalid) at ")
        assert get(match.group(0) + "api/entries?offset=0&limit=1000")["total"] == len(KINDS) + 1
        assert get(match.group(0) + "api/entry?i=0")["record"] == example(KINDS[0])
        assert get(match.group(0) + f"api/entry?i={len(KINDS)}")["record"] == example("plan")
        assert list(tmp_path.glob("astra-view-*"))
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert process.returncode == 0, process.stderr.read()
    assert not list(tmp_path.glob("astra-view-*"))
