import json

import pytest
from astra_core.cli import main
from click.testing import CliRunner


def stage_command() -> str:
    """The installed `astra-core` command, run as a user runs it (a process of its own)."""
    import os
    import sys

    return os.path.join(os.path.dirname(sys.executable), "astra-core")


def trajectories(path, n):
    from astra_core.formats_doc import example

    path.write_text("".join(json.dumps(dict(example("trajectory"), id=f"t{i}")) + "\n" for i in range(n)))
    return path


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


def test_a_stage_whose_reader_closes_stdout_stops_quietly_with_its_counts(tmp_path):
    """`astra-core validate ... | head -1`: exit 141 (as `cat` cut short by `head`), the counts and why it stopped
    on stderr; no traceback, no 'Exception ignored' from Python's flush at exit, no '[Errno 32] Broken pipe'."""
    import subprocess

    many = trajectories(tmp_path / "many.jsonl", 5000)
    with subprocess.Popen([stage_command(), "validate", "trajectory", str(many)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as process:
        first = process.stdout.readline()
        process.stdout.close()
        err = process.stderr.read().decode()
    assert json.loads(first)["id"] == "t0"
    assert process.returncode == 141, err
    assert "stopped: the reader of stdout closed it (after " in err
    assert "astra-core validate: read " in err
    assert "Traceback" not in err and "Exception ignored" not in err and "Broken pipe" not in err


def test_a_stage_sent_sigterm_while_it_waits_for_stdin_says_what_it_did_and_exits_143(tmp_path):
    """`kill` (or a scheduler's time limit) while a stage reads a pipe that stays open: the records it finished are
    in its output, its counts and what is left are on stderr, no traceback."""
    import signal
    import subprocess
    import time

    out = tmp_path / "out.jsonl"
    with subprocess.Popen([stage_command(), "validate", "trajectory", "-", "-o", str(out)], stdin=subprocess.PIPE,
                          stderr=subprocess.PIPE) as process:
        process.stdin.write(trajectories(tmp_path / "in.jsonl", 3).read_bytes())
        process.stdin.flush()
        deadline = time.monotonic() + 60
        while (not out.exists() or out.read_text().count("\n") < 3) and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        err = process.stderr.read().decode()
    assert process.returncode == 143, err
    assert "astra-core validate: read 3 · wrote 3 from 3 · rejected 0" in err
    assert "terminated (SIGTERM): 0 read records not finished" in err
    assert "Traceback" not in err
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["t0", "t1", "t2"]


def test_a_file_that_cannot_grow_stops_the_stage_in_one_line_and_resume_does_the_rest(tmp_path):
    """A full disk or a quota mid-run (here: RLIMIT_FSIZE, EFBIG): before, two chained tracebacks (the failed flush,
    then the failed close); now the counts, what is unfinished and one line naming the file; after freeing space,
    --resume drops the half-written line and writes each record once."""
    import resource
    import subprocess

    records, out = trajectories(tmp_path / "in.jsonl", 200), tmp_path / "out.jsonl"
    command = [stage_command(), "validate", "trajectory", str(records), "-o", str(out)]

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    stopped = subprocess.run(command, capture_output=True, text=True, preexec_fn=small_files)
    assert stopped.returncode == 1, stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert f"Error: cannot write {out}: File too large" in stopped.stderr
    assert "read records not finished (rerun with the same -o and --resume" in stopped.stderr \
        or "read record not finished (rerun with the same -o and --resume" in stopped.stderr
    assert 0 < out.stat().st_size <= 20_000
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [f"t{i}" for i in range(200)]


@pytest.mark.parametrize("where", ["-o", "--rejects", "stdout"])
def test_a_full_device_is_one_line_naming_where_the_stage_writes(tmp_path, where):
    import subprocess

    records = trajectories(tmp_path / "in.jsonl", 3)
    with records.open("a") as handle:
        handle.write('{"id": "bad", "messages": "not a list"}\n')
    command = [stage_command(), "validate", "trajectory", str(records), "--skip-bad"]
    command += {"-o": ["-o", "/dev/full"], "--rejects": ["-o", str(tmp_path / "out.jsonl"), "--rejects", "/dev/full"],
                "stdout": []}[where]
    with open("/dev/full", "wb") as full:
        done = subprocess.run(command, stdout=full if where == "stdout" else None, stderr=subprocess.PIPE, text=True)
    name = "<stdout>" if where == "stdout" else "/dev/full"
    assert done.returncode == 1, done.stderr
    assert f"Error: cannot write {name}: No space left on device" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


@pytest.mark.parametrize("damage", ["truncated gzip", "zstd"])
def test_an_unreadable_input_is_one_line_or_with_skip_bad_a_reject(tmp_path, damage):
    """A gzip download cut off (or a zstd file, which this Python cannot read): the installed command said it in a
    traceback. Now one line naming file and line; with --skip-bad the rest of that file is one reject naming where,
    and the records before it and the next file's are validated."""
    import gzip
    import subprocess

    packed = tmp_path / "cut.jsonl.gz"
    if damage == "zstd":
        packed.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(16))  # a zstd frame's magic number
        before, lineno = 0, 1
    else:
        whole = trajectories(tmp_path / "whole.jsonl", 400).read_bytes().replace(b'"id": "t', b'"id": "cut-t')
        packed.write_bytes(gzip.compress(whole)[:-300])
        before, lineno = None, None
    later = trajectories(tmp_path / "later.jsonl", 3)
    command = [stage_command(), "validate", "trajectory", str(packed), str(later), "-o", str(tmp_path / "out.jsonl")]

    stopped = subprocess.run(command, capture_output=True, text=True)
    assert stopped.returncode == 1 and "Traceback" not in stopped.stderr
    error = stopped.stderr.strip().splitlines()[-1]
    assert error.startswith(f"Error: {packed}:")

    rejects = tmp_path / "rejects.jsonl"
    (tmp_path / "out.jsonl").unlink()
    skipped = subprocess.run([*command, "--skip-bad", "--rejects", str(rejects)], capture_output=True, text=True)
    assert "Traceback" not in skipped.stderr
    [reject] = [json.loads(line) for line in rejects.read_text().splitlines()]
    written = [json.loads(line)["id"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    if before is None:  # the lines before the break were all validated, then the next file's
        before, lineno = len(written) - 3, len(written) - 3 + 1
        assert before > 0 and f"the compressed data is broken after line {before} " in reject["reason"]
    else:
        assert "zstd-compressed; decompress it first" in reject["reason"]
    assert written[before:] == ["t0", "t1", "t2"] and all(i.startswith("cut-") for i in written[:before])
    assert reject["source"] == f"{packed}:{lineno}" and error == f"Error: {reject['reason'].removeprefix('malformed: ')}"
    assert f"read {before + 3 + 1} · wrote {before + 3} from {before + 3} · rejected 1" in skipped.stderr


@pytest.mark.parametrize("flag, where", [("-o", "a directory"), ("-o", "in no directory"),
                                         ("--rejects", "in no directory")])
def test_an_output_that_cannot_be_opened_is_one_line_naming_it(tmp_path, flag, where):
    """-o naming a directory printed an IsADirectoryError traceback; a file in a directory that does not exist, a
    bare '[Errno 2]'. Now one line naming the option and the file, before any record is read."""
    import subprocess

    records = trajectories(tmp_path / "in.jsonl", 2)
    target = tmp_path if where == "a directory" else tmp_path / "missing" / "out.jsonl"
    done = subprocess.run([stage_command(), "validate", "trajectory", str(records), flag, str(target)],
                          capture_output=True, text=True)
    reason = "Is a directory" if where == "a directory" else "No such file or directory"
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"Error: cannot write {flag} {target}: {reason}"]
