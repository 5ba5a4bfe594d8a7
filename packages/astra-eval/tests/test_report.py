"""Summary tables and comparisons computed from eval_result records with known outcomes."""

from __future__ import annotations

import json

import pytest
from astra_eval import report
from astra_eval.results import eval_result, make_item
from eval_helpers import cli, records


def _records(model: str, rows: list[tuple]) -> list[dict]:
    out = []
    for benchmark, category, item, trial, score, extra in rows:
        item_record = make_item(benchmark, category, item, trial, 0, **extra)
        record = eval_result(item_record, success=score == 1.0, score=score,
                             details={"process_accuracy": extra.pop("process", score)} if benchmark == "acebench"
                             else {})
        record["meta"]["provenance"] = [{"command": f"astra-eval run {benchmark}", "model": model}]
        out.append(record)
    return out


ROWS = (
    [("bfcl", "multi_turn_base", f"b{i}", 0, 1.0 if i < 3 else 0.0, {}) for i in range(4)]  # 75
    + [("bfcl", "multi_turn_miss_func", f"m{i}", 0, 1.0 if i < 1 else 0.0, {}) for i in range(4)]  # 25
    + [("tau2", "retail", "r1", t, 1.0 if t < 3 else 0.0, {}) for t in range(4)]
    + [("tau2", "retail", "r2", t, 1.0, {}) for t in range(4)]
    + [("tau2", "telecom", "t1", t, 0.0, {}) for t in range(4)]
    + [("acebench", "multi_turn", "en/a", t, 1.0 if t % 2 else 0.0, {"language": "en", "process": 0.5})
       for t in range(4)]
    + [("acebench", "multi_step", "en/s", t, 1.0, {"language": "en"}) for t in range(4)]
    + [("aime", "aime2024", "p", 0, 0.5, {"setting": "topk20"}), ("aime", "aime2025", "p", 0, 0.25, {"setting": "topk20"}),
       ("aime", "aime2024", "p", 0, 0.75, {"setting": "topk-1"}), ("aime", "aime2025", "p", 0, 0.0, {"setting": "topk-1"})]
)


def test_figures_follow_the_papers_definitions():
    figures = report.figures(_records("m", ROWS))
    assert figures[("BFCL-MT", "Base")] == 75.0 and figures[("BFCL-MT", "Missing Func")] == 25.0
    assert figures[("BFCL-MT", "Overall")] == 50.0  # mean of the categories present
    assert figures[("tau2-Bench", "Retail")] == pytest.approx(87.5)  # pass^1: (3/4 + 4/4) / 2
    assert figures[("tau2 retail", "pass^4")] == 50.0  # only r2 succeeded in all four trials
    assert figures[("tau2 retail", "pass@4")] == 100.0
    assert figures[("tau2-Bench", "Overall")] == pytest.approx((87.5 + 0.0) / 2)
    assert figures[("ACEBench", "Overall")] == pytest.approx((50.0 + 100.0) / 2)
    assert figures[("ACEBench process", "Multi Turn")] == 50.0
    assert figures[("AIME top-k 20", "Avg")] == pytest.approx(37.5)
    assert figures[("AIME", "Final")] == pytest.approx((37.5 + 37.5) / 2)


def test_summary_prints_one_row_per_model_and_compare_writes_a_chart(tmp_path):
    base, rl = tmp_path / "base.jsonl", tmp_path / "rl"
    rl.mkdir()
    base.write_text("".join(json.dumps(r) + "\n" for r in _records("base-model", ROWS)))
    better = [(b, c, i, t, 1.0, e) for b, c, i, t, _, e in ROWS]
    (rl / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records("rl-model", better)))
    table = cli("summary", str(base), str(rl)).stdout
    assert "Missing Func" in table and "pass^4" in table and "AIME2025" in table
    rows = [line for line in table.splitlines() if line.startswith(("base-model", "rl-model"))]
    assert len(rows) >= 8 and any("100.00" in line for line in rows if line.startswith("rl-model"))
    as_json = json.loads(cli("summary", "--json", str(base)).stdout)
    assert as_json["base-model"]["BFCL-MT: Overall"] == 50.0
    png = tmp_path / "compare.png"
    compared = cli("compare", str(base), str(rl), "--label", "base", "--label", "RL", "--png", str(png)).stdout
    assert "RL" in compared and "base" in compared
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_failures_are_counted_by_reason():
    item = make_item("aime", "aime2024", "p", 0, 0, setting="topk20")
    failed = eval_result(item, success=False, score=0.0, error="timeout: item did not finish within 1s")
    assert report.failures([failed]) == {"timeout": 1}


def test_summary_divides_by_items_attempted_and_prints_errors_per_benchmark(tmp_path):
    rows = [("bfcl", "multi_turn_base", f"b{i}", 0, 1.0 if i == 0 else 0.0, {}) for i in range(4)]
    rows += [("tau2", "retail", f"r{i}", 0, 1.0 if i < 2 else 0.0, {}) for i in range(4)]
    run = _records("m", rows)
    run[1]["error"] = "endpoint: POST chat/completions failed: HTTP 400"
    run[6]["error"] = "JSONDecodeError: Expecting value"
    run[7]["error"] = "ValueError: AssistantMessage must have either content or tool calls"
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in run))
    figures = json.loads(cli("summary", "--json", str(path)).stdout)["m"]
    assert figures["BFCL-MT: Base"] == 25.0 and figures["tau2 retail: pass^1"] == 50.0  # errored items count as 0
    table = cli("summary", str(path)).stdout
    assert "m bfcl: 1 of 4 items (endpoint ×1)" in table
    assert "m tau2: 2 of 4 items (JSONDecodeError ×1, ValueError ×1)" in table


def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_summary_reads_stdin_as_it_reads_a_file(tmp_path):
    run = _jsonl(_records("m", ROWS))
    (tmp_path / "run.jsonl").write_text(run)
    from_file = json.loads(cli("summary", "--json", str(tmp_path / "run.jsonl")).stdout)
    assert json.loads(cli("summary", "--json", "-", input=run).stdout) == from_file
    assert json.loads(cli("summary", "--json", input=run).stdout) == from_file
    assert from_file["m"]["BFCL-MT: Base"] == 75.0


def test_a_success_that_is_not_a_boolean_is_a_reject_with_its_reason_never_a_pass(tmp_path):
    rows = [("bfcl", "multi_turn_base", f"b{i}", 0, 0.0, {}) for i in range(4)]
    run = _records("m", rows)
    run[1]["success"], run[1]["score"] = "false", 1.0  # a string: truthy, and its score says pass
    del run[2]["success"]
    path = tmp_path / "run.jsonl"
    path.write_text(_jsonl(run))
    done = cli("summary", "--json", str(path), "--rejects", str(tmp_path / "rejects.jsonl"), check=False)
    assert done.returncode == 1  # figures printed from the good records, the rejects an input error
    assert json.loads(done.stdout)["m"]["BFCL-MT: Base"] == 0.0  # the two good records, both failed
    assert "astra-eval summary: read 4 · counted 2 · rejected 2" in done.stderr
    assert f"{path}:2: malformed: field success:" in done.stderr and f"{path}:3: malformed:" in done.stderr
    wrong_type, missing = records(tmp_path / "rejects.jsonl")
    assert wrong_type["source"] == f"{path}:2" and "'false' is not of type 'boolean'" in wrong_type["reason"]
    assert json.loads(wrong_type["line"]) == run[1] and wrong_type["stage"] == "astra-eval summary"
    assert missing["source"] == f"{path}:3" and "'success' is a required property" in missing["reason"]
    compared = cli("compare", str(path), "--label", "m", check=False)
    assert compared.returncode == 1 and "astra-eval compare: read 4 · counted 2 · rejected 2" in compared.stderr


@pytest.mark.parametrize("score", [5, -2, 1.5])
def test_a_score_outside_0_1_is_a_reject_never_a_figure(tmp_path, score):
    run = _records("m", [("bfcl", "multi_turn_base", f"b{i}", 0, 1.0 if i == 0 else 0.0, {}) for i in range(2)])
    run[1]["score"] = score
    path = tmp_path / "run.jsonl"
    path.write_text(_jsonl(run))
    for command in ("summary", "compare"):
        done = cli(command, str(path), "--rejects", str(tmp_path / "rejects.jsonl"), check=False)
        assert done.returncode == 1 and "100.00" in done.stdout  # the good record alone
        assert f"{path}:2: malformed: field score:" in done.stderr, done.stderr
        (reject,) = records(tmp_path / "rejects.jsonl")
        assert reject["source"] == f"{path}:2" and json.loads(reject["line"])["score"] == score


def test_a_second_record_of_a_trial_is_a_reject_naming_both(tmp_path):
    run = _records("m", [("bfcl", "multi_turn_base", f"b{i}", 0, 1.0 if i == 0 else 0.0, {}) for i in range(2)])
    again = {**run[0], "id": run[0]["id"] + "-again"}
    other_model = _records("n", [("bfcl", "multi_turn_base", "b0", 0, 0.0, {})])  # another model's trial: not a repeat
    path = tmp_path / "run.jsonl"
    path.write_text(_jsonl([*run, again, *other_model]))
    done = cli("summary", "--json", str(path), "--rejects", str(tmp_path / "rejects.jsonl"), check=False)
    assert done.returncode == 1
    figures = json.loads(done.stdout)
    assert figures["m"]["BFCL-MT: Base"] == 50.0 and figures["n"]["BFCL-MT: Base"] == 0.0
    (reject,) = records(tmp_path / "rejects.jsonl")
    assert reject["source"] == f"{path}:3" and reject["record"] == again
    assert reject["reason"].startswith(f"duplicate trial: trial 0 of item 'b0' (bfcl multi_turn_base) is both record "
                                       f"{run[0]['id']!r} ({path}:1), which counts, and record {again['id']!r} ({path}:3)")
    compared = cli("compare", str(path), check=False)  # one RUN is one model: the other model's b0 repeats it too
    assert compared.returncode == 1 and "read 4 · counted 2 · rejected 2" in compared.stderr


def test_counts_go_to_stderr_and_a_missing_input_is_a_one_line_input_error(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text(_jsonl(_records("m", [("bfcl", "multi_turn_base", "b0", 0, 1.0, {})])))
    done = cli("summary", str(path))
    assert done.stderr.strip() == "astra-eval summary: read 1 · counted 1 · rejected 0"
    assert cli("compare", str(path)).stderr.strip() == "astra-eval compare: read 1 · counted 1 · rejected 0"
    for command in ("summary", "compare"):
        missing = cli(command, str(path), str(tmp_path / "nope.jsonl"), check=False)
        assert missing.returncode == 1 and missing.stdout == "", missing.stderr
        assert missing.stderr.strip() == f"Error: [Errno 2] No such file or directory: '{tmp_path / 'nope.jsonl'}'"


def test_run_flags_are_config_fields_and_a_bad_value_names_the_field():
    done = cli("run", "aime", "--year", "aime2024,aime2099", check=False)
    assert done.returncode == 2 and "config field years: unknown aime2099" in done.stderr
    done = cli("run", "acebench", "--language", "fr", check=False)
    assert done.returncode == 2 and "config field languages" in done.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["aime", "--samples", "0"], "Invalid value for '--samples': must be >= 1, got 0"),
    (["aime", "--limit", "-1"], "Invalid value for '--limit': must be >= 1, got -1"),
    (["aime", "--item-timeout", "0"], "config field item_timeout: must be > 0, got 0.0"),
    (["bfcl", "--oracle", "--oracle-drop-rate", "2"], "Invalid value for '--oracle-drop-rate': must be between 0 and 1"),
    (["tau2", "--top-p", "1.5"], "Invalid value for '--top-p': must be between 0 and 1, got 1.5"),
    (["acebench", "--max-messages", "0"], "Invalid value for '--max-messages': must be >= 1, got 0"),
])
def test_run_flags_out_of_range_are_usage_errors_naming_the_flag(args, says):
    done = cli("run", *args, check=False)
    assert done.returncode == 2 and says in done.stderr, done.stderr


def test_chart_legend_sits_outside_every_panel_and_names_each_run():
    runs = {"base model": report.figures(_records("m", ROWS)),
            "after RL": report.figures(_records("m", [(b, c, i, t, 1.0, e) for b, c, i, t, _, e in ROWS]))}
    fig = report.bar_figure(runs)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    [legend] = fig.legends
    assert [text.get_text() for text in legend.get_texts()] == ["base model", "after RL"]
    box = legend.get_window_extent(renderer)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert len(panels) == 5  # BFCL-MT, tau2, ACEBench and the two AIME settings
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in panels)
    assert all("%" in ax.get_ylabel() for ax in panels)
    report.pyplot().close(fig)


def test_tau2_ticks_say_what_overall_averages_and_that_airline_is_extra():
    rows = ROWS + [("tau2", "airline", "a1", t, 1.0, {}) for t in range(4)]
    fig = report.bar_figure({"model": report.figures(_records("m", rows))})
    [tau2] = [ax for ax in fig.axes if ax.get_title() == "tau2-Bench"]
    ticks = [label.get_text() for label in tau2.get_xticklabels()]
    assert ticks == ["Retail", "Telecom", "Overall (Retail, Telecom)", "Airline (not in Overall)"]
    report.pyplot().close(fig)
