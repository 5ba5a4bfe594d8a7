import io
import time

import orjson
from astra_core.progress import Progress, count_lines, duration, status_line
from astra_core.stage import Stage, StageOptions


def test_status_line_has_counts_rate_eta_and_note():
    assert status_line("astra-x run", 2, 6, 20.0, note="plan 3: rollouts") == \
        "astra-x run: 2/6 records · 10.0 s/record · ETA 40s · 20s elapsed · plan 3: rollouts"
    assert status_line("s", 300, 900, 10.0, unit="step") == "s: 300/900 steps · 30.0 steps/s · ETA 20s · 10s elapsed"
    assert status_line("s", 0, None, 75.0) == "s: 0 records done · 1m 15s elapsed"
    # resumed at step 2: the rate counts this run's steps only
    assert status_line("s", 3, 4, 10.0, unit="step", initial=2) == "s: 3/4 steps · 10.0 s/step · ETA 10s · 10s elapsed"


def test_duration_reads_as_hours_minutes_seconds():
    assert [duration(s) for s in (9.6, 185, 3725)] == ["10s", "3m 05s", "1h 02m"]


def test_count_lines_counts_records_of_files_and_gives_up_on_stdin(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": 1}\n{"id": 2}\n')
    (tmp_path / "b.jsonl").write_text('{"id": 3}')  # no final newline
    assert count_lines([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]) == 3
    assert count_lines([str(tmp_path / "a.jsonl"), "-"]) is None
    assert count_lines([str(tmp_path / "a.jsonl")], limit_bytes=4) is None


def test_a_compressed_input_has_no_line_count(tmp_path):
    """Newlines in compressed bytes are not records: no total (and no false ETA) rather than a wrong one."""
    import gzip

    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b"".join(b'{"id": %d}\n' % i for i in range(500))))
    assert count_lines([str(tmp_path / "a.jsonl.gz")]) is None


class Log(io.StringIO):
    def isatty(self):
        return False


def test_a_long_run_without_terminal_prints_status_lines_and_a_short_one_none():
    log = Log()
    with Progress("slow", 4, stream=log, interval=0.05) as progress:
        progress.note("rollouts")
        time.sleep(0.3)
        progress.update(2)
        time.sleep(0.2)
    lines = log.getvalue().splitlines()
    assert len(lines) >= 3
    assert lines[0].startswith("slow: 0/4 records · ") and lines[0].endswith("rollouts")
    assert "2/4 records" in lines[-1] and "ETA" in lines[-1]

    quick = Log()
    with Progress("quick", 4, stream=quick, interval=0.5) as progress:
        progress.update(4)
    assert quick.getvalue() == ""


def test_no_progress_silences_status_lines():
    log = Log()
    with Progress("slow", 1, stream=log, interval=0.02, show=False):
        time.sleep(0.1)
    assert log.getvalue() == ""


def test_a_slow_stage_reports_records_done_of_its_input_lines(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ASTRA_PROGRESS_INTERVAL", "0.05")
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps({"id": f"r{i}", "meta": {}}) + b"\n" for i in range(3)))

    def slow(record):
        time.sleep(0.12)
        return record

    with Stage("astra-test slow", StageOptions(inputs=(str(source),), output=str(tmp_path / "out.jsonl"))) as stage:
        stage.run(slow)
    err = capsys.readouterr().err.splitlines()
    statuses = [line for line in err if line.startswith("astra-test slow: ") and "elapsed" in line]
    assert statuses and all("/3 records" in line for line in statuses)
    assert err[-1].startswith("astra-test slow: read 3 · wrote 3 from 3")  # the counts come last
