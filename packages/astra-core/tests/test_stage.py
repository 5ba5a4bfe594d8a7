import asyncio
import io
import sys

import orjson
import pytest
from astra_core.jsonl import MalformedLine, read_jsonl
from astra_core.stage import Rejected, Shard, Stage, StageError, StageOptions
from hypothesis import given, settings
from hypothesis import strategies as st


def records(n, prefix="r"):
    return [{"id": f"{prefix}{i}", "meta": {}, "value": i} for i in range(n)]


def write_input(path, recs):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return str(path)


def read(path):
    return list(read_jsonl(path)) if path.exists() else []


def fanout(record):
    """0 -> reject, 1 -> nothing (a drop without reason), 2 -> one output, 3+ -> several."""
    v = record["value"] % 5
    if v == 0:
        raise Rejected(f"value {record['value']} is divisible by 5")
    if v == 1:
        return []
    return [{"id": f"{record['id']}/{k}", "meta": {}, "k": k} for k in range(v - 1)]


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 40))
def test_every_input_ends_in_output_or_rejects(tmp_path_factory, n):
    tmp = tmp_path_factory.mktemp("stage")
    inp = write_input(tmp / "in.jsonl", records(n))
    out, rej = tmp / "out.jsonl", tmp / "rej.jsonl"
    with Stage("test fanout", StageOptions(inputs=(inp,), output=str(out), rejects=str(rej))) as stage:
        stage.run(fanout)
    c = stage.counts
    assert c.read == n == c.produced + c.rejected
    parents = {r["meta"]["parent_id"] for r in read(out)}
    rejected = {r["id"] for r in read(rej)}
    assert parents | rejected == {f"r{i}" for i in range(n)} and not parents & rejected
    assert c.written == len(read(out))
    assert all(r["reason"] for r in read(rej))
    # outputs carry provenance of this stage
    assert all(r["meta"]["provenance"][-1]["command"] == "test fanout" for r in read(out))


def test_summary_on_stderr_and_data_on_stdout(tmp_path, capsysbinary):
    inp = write_input(tmp_path / "in.jsonl", records(6))
    with Stage("test fanout", StageOptions(inputs=(inp,))) as stage:
        stage.run(fanout)
    captured = capsysbinary.readouterr()
    out_lines = captured.out.splitlines()
    assert all(orjson.loads(line)["id"] for line in out_lines)
    err = captured.err.decode()
    assert "read 6" in err and "rejected 3" in err and "reject reasons" in err and "--rejects" in err


def test_resume_skips_done_ids_and_drops_half_written_line(tmp_path):
    inp = write_input(tmp_path / "in.jsonl", records(10))
    out = tmp_path / "out.jsonl"
    seen = []

    def identity(record):
        seen.append(record["id"])
        return record

    # A first run that died after 4 records, mid-way through writing the 5th.
    out.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records(4)) + b'{"id": "r4", "me')
    with Stage("test", StageOptions(inputs=(inp,), output=str(out), resume=True)) as stage:
        stage.run(identity)
    assert seen == [f"r{i}" for i in range(4, 10)]
    assert stage.counts.skipped_resume == 4
    assert [r["id"] for r in read(out)] == [f"r{i}" for i in range(10)]


def test_resume_counts_rejected_and_derived_ids_as_done(tmp_path):
    inp = write_input(tmp_path / "in.jsonl", records(12))
    out, rej = tmp_path / "out.jsonl", tmp_path / "rej.jsonl"
    opts = StageOptions(inputs=(inp,), output=str(out), rejects=str(rej))
    with Stage("test", opts) as stage:
        stage.run(fanout)
    calls = []

    def count(record):
        calls.append(record["id"])
        return fanout(record)

    opts.resume = True
    with Stage("test", opts) as stage:
        stage.run(count)
    assert calls == []
    assert stage.counts.skipped_resume == 12


def test_resume_needs_an_output_file():
    with pytest.raises(StageError, match="--resume needs -o FILE"):
        with Stage("test", StageOptions(resume=True)):
            pass


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 60), shards=st.integers(1, 5))
def test_shards_partition_the_input(n, shards):
    ids = [f"id-{i}" for i in range(n)]
    owners = [[i for i in ids if Shard(k, shards).owns(i)] for k in range(shards)]
    assert sorted(sum(owners, [])) == sorted(ids)


def test_shard_option_filters_records(tmp_path, capsysbinary):
    inp = write_input(tmp_path / "in.jsonl", records(20))
    total = 0
    for k in range(3):
        with Stage("test", StageOptions(inputs=(inp,), shard=Shard(k, 3))) as stage:
            stage.run(lambda r: r)
        total += stage.counts.written
        assert stage.counts.written + stage.counts.other_shards == 20
    assert total == 20


@pytest.mark.parametrize("text", ["1/0", "3/3", "a/b", "2"])
def test_bad_shard_spec(text):
    with pytest.raises(ValueError):
        Shard.parse(text)


def test_malformed_line_stops_the_stage_with_its_location(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": "a"}\nnot json\n')
    with pytest.raises(MalformedLine, match=r"in.jsonl:2: invalid JSON"):
        with Stage("test", StageOptions(inputs=(str(inp),))) as stage:
            stage.run(lambda r: r)


def test_skip_bad_sends_bad_lines_to_rejects(tmp_path, capsysbinary):
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": "a", "meta": {}, "server_id": "s", "tools": ["x"]}\nnot json\n'
                   '{"id": "b", "meta": {}, "server_id": "s", "tools": []}\n')
    rej = tmp_path / "rej.jsonl"
    with Stage("test", StageOptions(inputs=(str(inp),), rejects=str(rej), skip_bad=True),
               in_kind="tool_chain") as stage:
        stage.run(lambda r: r)
    assert stage.counts.read == 3 and stage.counts.written == 1 and stage.counts.rejected == 2
    reasons = [r["reason"] for r in read(rej)]
    assert "line 2" not in reasons[0] and ":2: invalid JSON" in reasons[0]
    assert "record 'b': field tools" in reasons[1]


def test_a_gzipped_input_is_staged_like_its_plain_text(tmp_path, capsysbinary):
    """The same lines gzipped: the same outputs, and a bad line rejected under the .gz file's name and line."""
    import gzip

    lines = ('{"id": "a", "meta": {}, "server_id": "s", "tools": ["x"]}\nnot json\n'
             '{"id": "b", "meta": {}, "server_id": "s", "tools": []}\n')
    runs = {}
    for name, data in (("in.jsonl", lines.encode()), ("in.jsonl.gz", gzip.compress(lines.encode()))):
        (tmp_path / name).write_bytes(data)
        out, rej = tmp_path / f"{name}.out", tmp_path / f"{name}.rej"
        with Stage("test", StageOptions(inputs=(str(tmp_path / name),), output=str(out), rejects=str(rej),
                                        skip_bad=True), in_kind="tool_chain") as stage:
            stage.run(lambda r: r)
        assert (stage.counts.read, stage.counts.written, stage.counts.rejected) == (3, 1, 2)
        runs[name] = (read(out), [r["reason"] for r in read(rej)])
    for record in runs["in.jsonl.gz"][0] + runs["in.jsonl"][0]:
        for step in record["meta"]["provenance"]:
            step.pop("time")  # (to the second: two runs may straddle one)
    assert runs["in.jsonl.gz"][0] == runs["in.jsonl"][0]
    assert f"{tmp_path / 'in.jsonl.gz'}:2: invalid JSON" in runs["in.jsonl.gz"][1][0]
    assert "record 'b': field tools" in runs["in.jsonl.gz"][1][1]


def test_invalid_output_is_rejected_not_written(tmp_path, capsysbinary):
    inp = write_input(tmp_path / "in.jsonl", records(2))
    rej = tmp_path / "rej.jsonl"
    with Stage("test", StageOptions(inputs=(inp,), rejects=str(rej)), out_kind="task") as stage:
        stage.run(lambda r: {"id": r["id"], "question": "q?", "server_id": "s"} if r["value"] else {"id": "x"})
    assert stage.counts.written == 1 and stage.counts.errors == 1
    assert "invalid task" in read(rej)[0]["reason"]


def test_outputs_made_and_dropped_are_counted_apart_from_the_inputs(tmp_path, capsysbinary):
    """A stage that makes several records per input and drops some (an LLM's bad instances): they go to the
    rejects marked derived, and read = written-from + rejected still counts input records only."""
    inp = write_input(tmp_path / "in.jsonl", records(3))
    rej = tmp_path / "rej.jsonl"

    def make_two_keep_one(record):
        made = [{"id": f"{record['id']}/{k}", "meta": {}, "k": k} for k in range(2)]
        stage.drop(made[1], f"too long: {record['id']}/1 has 9 hops")
        return made[:1]

    with Stage("test", StageOptions(inputs=(inp,), rejects=str(rej))) as stage:
        stage.run(make_two_keep_one)
    c = stage.counts
    assert (c.read, c.produced, c.written, c.rejected) == (3, 3, 3, 0)
    assert [(r["id"], r["derived"]) for r in read(rej)] == [("r0/1", True), ("r1/1", True), ("r2/1", True)]
    err = capsysbinary.readouterr().err.decode()
    assert "rejected 0" in err and "outputs made and dropped: 3 (too long ×3; in --rejects)" in err


def test_exceptions_become_rejects_unless_fail_fast(tmp_path, capsysbinary):
    inp = write_input(tmp_path / "in.jsonl", records(3))

    def boom(record):
        if record["value"] == 1:
            raise KeyError("missing")
        return record

    with Stage("test", StageOptions(inputs=(inp,))) as stage:
        stage.run(boom)
    assert stage.counts.errors == 1 and stage.counts.written == 2
    assert "error on record 'r1'" in capsysbinary.readouterr().err.decode()
    with pytest.raises(KeyError):
        with Stage("test", StageOptions(inputs=(inp,), fail_fast=True)) as stage:
            stage.run(boom)


def test_async_run_keeps_order_and_bounds_concurrency(tmp_path, capsysbinary):
    inp = write_input(tmp_path / "in.jsonl", records(30))
    out = tmp_path / "out.jsonl"
    in_flight, peak = 0, 0

    async def slow(record):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.002 * (30 - record["value"]))  # later records finish first
        in_flight -= 1
        return record

    with Stage("test", StageOptions(inputs=(inp,), output=str(out))) as stage:
        asyncio.run(stage.arun(slow, concurrency=4))
    assert [r["id"] for r in read(out)] == [f"r{i}" for i in range(30)]
    assert 1 < peak <= 4


def test_reads_stdin_by_default(monkeypatch, capsysbinary):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"id": "s1"}\n{"id": "s2"}\n')))
    with Stage("test", StageOptions()) as stage:
        stage.run(lambda r: r)
    assert stage.counts.written == 2


def test_rows_without_id_get_a_stable_content_id(tmp_path):
    rows = [{"domain": "weather", "knowledge_corpus": ""}, {"question": "Q?", "domain": "flights"}]
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    seen = []

    def keep(record):
        seen.append(record["id"])
        return {"id": f"{record['id']}/out", "meta": {}}

    for _ in range(2):
        with Stage("test", StageOptions(inputs=(str(inp),), output=str(tmp_path / "out.jsonl")),
                   derive_ids=True) as stage:
            stage.run(keep)
    assert len(set(seen)) == 2 and seen[:2] == seen[2:] and all(i.startswith("row-") for i in seen)
    assert {r["meta"]["parent_id"] for r in read(tmp_path / "out.jsonl")} == set(seen[:2])
    # a resumed run skips them by that id
    with Stage("test", StageOptions(inputs=(str(inp),), output=str(tmp_path / "out.jsonl"), resume=True),
               derive_ids=True) as stage:
        stage.run(keep)
    assert stage.counts.skipped_resume == 2


def test_rows_without_id_stay_as_written_unless_the_stage_derives_ids(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(orjson.dumps({"name": "time"}) + b"\n")
    seen = []
    with Stage("test", StageOptions(inputs=(str(inp),), output=str(tmp_path / "out.jsonl"))) as stage:
        stage.run(lambda r: seen.append(dict(r)) or {"id": r["name"], "meta": {}})
    assert seen == [{"name": "time"}]


@pytest.mark.parametrize(("reason", "key"), [
    ("below min score: 0.3 < 0.7", "below min score"),
    ("no plan reply parsed (plan 0: 'x' is not valid JSON)", "no plan reply parsed"),
    ("LLM reply is not a decomposition in ASTRA's format (no valid JSON reply after 1 attempts: sub_question: ''",
     "LLM reply is not a decomposition in ASTRA's format"),
    ("environment synthesis (2 attempts) failed for sub-question 1", "environment synthesis (2 attempts) failed for "
                                                                     "sub-question 1"),
    ("a very long reason " * 6, "a very long reason a very long reason a very long reason a very long reason a …"),
])
def test_reject_reasons_are_counted_by_whole_words_and_closed_parentheses(reason, key):
    from astra_core.stage import _reason_key

    assert _reason_key(reason) == key
    assert len(key) <= 82


def test_output_and_rejects_named_gz_are_gzip_compressed(tmp_path, capsysbinary):
    import gzip

    inp = write_input(tmp_path / "in.jsonl", records(10))
    out, rej = tmp_path / "out.jsonl.gz", tmp_path / "rej.jsonl.gz"
    with Stage("test fanout", StageOptions(inputs=(inp,), output=str(out), rejects=str(rej))) as stage:
        stage.run(fanout)
    assert out.read_bytes()[:2] == rej.read_bytes()[:2] == b"\x1f\x8b"
    written = [orjson.loads(line) for line in gzip.decompress(out.read_bytes()).splitlines()]
    assert written == read(out) and len(written) == stage.counts.written > 0
    assert len(read(rej)) == stage.counts.rejected > 0


def test_resume_refuses_a_compressed_output(tmp_path, capsysbinary):
    inp = write_input(tmp_path / "in.jsonl", records(2))
    stage = Stage("test", StageOptions(inputs=(inp,), output=str(tmp_path / "out.jsonl.gz"), resume=True))
    with pytest.raises(StageError, match=r"--resume cannot append to a compressed file \(.*out\.jsonl\.gz\)"):
        stage.__enter__()
    assert not (tmp_path / "out.jsonl.gz").exists()  # refused before the output was opened


@pytest.mark.parametrize("output", ["file", "-"])
def test_an_interrupted_run_says_how_many_read_records_are_unfinished_and_how_to_go_on(tmp_path, capsysbinary,
                                                                                        output):
    inp = write_input(tmp_path / "in.jsonl", records(10))
    out = str(tmp_path / "out.jsonl") if output == "file" else "-"

    def interrupted_at_the_fourth(record):
        if record["value"] == 3:
            raise KeyboardInterrupt
        return record

    with pytest.raises(KeyboardInterrupt):
        with Stage("test", StageOptions(inputs=(inp,), output=out)) as stage:
            stage.run(interrupted_at_the_fourth)
    err = capsysbinary.readouterr().err.decode()
    assert "test: read 4 · wrote 3 from 3 · rejected 0" in err
    assert "interrupted: 1 read record not finished (" in err
    assert ("--resume to do only what is left" if output == "file" else "write to -o FILE to be able to --resume") in err


def test_sigterm_stops_a_stage_as_ctrl_c_does_and_exits_143(tmp_path, capsysbinary):
    """A batch scheduler's time limit (Slurm: SIGTERM, then SIGKILL after a grace time) or `kill`: before, the
    stage died at once with no counts and no word on what was left; now it says so as on Ctrl-C, exit 143."""
    import os
    import signal

    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # (else the kill below would end pytest)
    inp = write_input(tmp_path / "in.jsonl", records(10))

    def terminated_at_the_fourth(record):
        if record["value"] == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return record

    with pytest.raises(SystemExit) as stopped:
        with Stage("test", StageOptions(inputs=(inp,), output=str(tmp_path / "out.jsonl"))) as stage:
            assert signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
            stage.run(terminated_at_the_fourth)
    assert stopped.value.code == 143
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handed back
    err = capsysbinary.readouterr().err.decode()
    assert "test: read 4 · wrote 3 from 3 · rejected 0" in err
    assert "terminated (SIGTERM): 1 read record not finished (rerun with the same -o and --resume" in err
    assert [r["id"] for r in read(tmp_path / "out.jsonl")] == ["r0", "r1", "r2"]


def test_a_stage_leaves_a_sigterm_handler_set_by_its_caller_alone(tmp_path):
    import signal

    calls = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        inp = write_input(tmp_path / "in.jsonl", records(3))
        with Stage("test", StageOptions(inputs=(inp,), output=str(tmp_path / "out.jsonl"))) as stage:
            signal.raise_signal(signal.SIGTERM)
            stage.run(lambda record: record)
        assert calls == [signal.SIGTERM] and stage.counts.written == 3
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_output_that_is_also_an_input_is_refused_before_the_input_is_touched(tmp_path):
    """`stage data.jsonl -o data.jsonl` emptied the file before a line was read (read 0, exit 0: the data gone)."""
    inp = write_input(tmp_path / "data.jsonl", records(5))
    before = (tmp_path / "data.jsonl").read_bytes()
    for output, rejects in ((inp, None), (str(tmp_path / "out.jsonl"), str(tmp_path / "." / "data.jsonl"))):
        with pytest.raises(StageError, match="is also an input: writing it would empty it before it is read"):
            Stage("test", StageOptions(inputs=(inp,), output=output, rejects=rejects)).__enter__()
    assert (tmp_path / "data.jsonl").read_bytes() == before


def test_output_and_rejects_must_be_two_files_except_devices(tmp_path):
    inp = write_input(tmp_path / "in.jsonl", records(3))
    with pytest.raises(StageError, match="-o and --rejects name the same file"):
        Stage("test", StageOptions(inputs=(inp,), output=str(tmp_path / "x.jsonl"),
                                   rejects=str(tmp_path / "sub" / ".." / "x.jsonl"))).__enter__()
    with Stage("test", StageOptions(inputs=(inp,), output="/dev/null", rejects="/dev/null")) as stage:
        stage.run(lambda record: record)  # discarding both is fine
    assert stage.counts.written == 3


def test_a_file_another_run_is_writing_is_refused_untouched_and_free_again_after(tmp_path):
    """Shards of a job array given the same -o, or a second --resume while the first runs: each truncated or
    interleaved the other's lines. The first run holds a lock on what it writes; the second stops, naming it."""
    inp = write_input(tmp_path / "in.jsonl", records(4))
    out = tmp_path / "out.jsonl"
    with Stage("first", StageOptions(inputs=(inp,), output=str(out))) as first:
        first.run(lambda record: record)
        written = out.read_bytes()
        with pytest.raises(StageError, match=r"-o .*out\.jsonl is being written by another run"):
            Stage("second", StageOptions(inputs=(inp,), output=str(out))).__enter__()
        assert out.read_bytes() == written  # the refused run truncated nothing
    with Stage("third", StageOptions(inputs=(inp,), output=str(out), resume=True)) as third:
        third.run(lambda record: record)
    assert third.counts.skipped_resume == 4
