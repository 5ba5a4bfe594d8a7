"""Dataset statistics (paper A.1.2) and their plots."""

from astra_qaenv.stats import plot, summarize
from qaenv_helpers import read, write


def instance(domain, scenario, deps, needs=None):
    trace = [{"_uuid": i + 1, "hop_level": 1, "sub_question": "q", "is_parallel": False, "dependency": d,
              "sub_answer": "a", "needs_tool": True if needs is None else needs[i]} for i, d in enumerate(deps)]
    from astra_qaenv.trace import dag_levels

    levels = dag_levels(trace)
    for s in trace:
        s["hop_level"] = levels[str(s["_uuid"])]
    return {"id": f"qa-{domain}-{len(deps)}", "domain": domain, "scenario_type": scenario, "main_question": "Q",
            "final_answer": "A", "decomposition_trace": trace, "meta": {}}


def test_summary_counts_match_the_definitions():
    records = [
        instance("geo", "Single-Hop", [None]),
        instance("geo", "Multi-Hop", [None, [1], [2]]),
        instance("film", "Parallel Multi-Hop", [None, None, [1, 2]], needs=[True, True, False]),
    ]
    s = summarize(records)
    assert s["samples"] == 3 and s["domains"] == {"geo": 2, "film": 1}
    assert s["sub_questions"] == 7 and s["sub_questions_per_sample"]["mean"] == round(7 / 3, 2)
    assert s["tool_calls_histogram"] == {1: 1, 2: 1, 3: 1}
    assert s["hop_levels_histogram"] == {1: 1, 2: 1, 3: 1}
    assert s["tool_sub_question_share"] == round(6 / 7, 4)
    assert s["parallelizable_step_share"] == round(2 / 7, 4)  # the two independent film lookups


def test_rl_samples_are_read_through_their_job(tmp_path, cli):
    job = [{"id": 1, "question": "q", "answer": "a", "hop_level": 1, "dependency": None},
           {"id": 2, "question": "q", "answer": "b", "hop_level": 1, "dependency": None}]
    path = write(tmp_path / "rl.jsonl", [{"id": "rl-1", "domain": "geo", "scenario_type": "Parallel Single-Hop",
                                          "job": job, "messages": [{"role": "user", "content": "q"}], "tools": [],
                                          "environment": {"code": ""}, "reward": {"kind": "f1"}, "meta": {}}])
    result = cli("stats", path, "-o", tmp_path / "s.json", "--plots", tmp_path / "plots")
    assert result.exit_code == 0
    import json

    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["parallelizable_step_share"] == 1.0 and summary["tool_calls_per_sample"]["mean"] == 2
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert pngs == ["domains.png", "hop_levels.png", "hops.png", "parallelizable.png", "scenario_types.png",
                    "tool_calls.png"]
    assert all((tmp_path / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_plot_handles_an_empty_summary(tmp_path):
    assert len(plot(summarize([]), tmp_path)) == 6
    assert read(tmp_path / "missing.jsonl") == []


def test_every_documented_kind_is_described_even_without_hop_levels(tmp_path, cli):
    """The formats.md examples: an rl_sample whose job has no hop_level or dependency and an environment without its
    instance (one written by hand, not by build-env) count as samples; only the figures they cannot give leave them
    out."""
    import json

    from astra_core.formats_doc import example

    environment = {k: v for k, v in example("environment").items() if k not in ("instance", "subenvs")}  # hand-made
    path = write(tmp_path / "mixed.jsonl", [example("qa_instance"), environment, example("rl_sample")])
    result = cli("stats", path, "-o", tmp_path / "s.json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["samples"] == 3
    assert summary["tool_calls_per_sample"]["samples"] == 3  # the job's needs_tool; the environment's verified calls
    assert summary["sub_questions_per_sample"]["samples"] == 2  # not the environment's
    assert summary["hop_levels_per_sample"]["samples"] == 1  # only the instance has a DAG
    assert "read 3" in result.stderr and "rejected 0" in result.stderr


def test_invalid_records_are_rejected_with_file_line_and_field(tmp_path, cli):
    good = instance("geo", "Multi-Hop", [None, [1]])
    wrong_item = {**good, "id": "qa-wrong", "decomposition_trace": [5]}
    no_trace = {k: v for k, v in good.items() if k != "decomposition_trace"} | {"id": "qa-none"}
    cycle = {**good, "id": "qa-cycle", "decomposition_trace": [{**s, "dependency": [2 - i]}
                                                               for i, s in enumerate(good["decomposition_trace"])]}
    bad_job = {"id": "rl-bad", "messages": [{"role": "user", "content": "q"}], "tools": [],
               "environment": {"code": ""}, "reward": {"kind": "f1"}, "meta": {},
               "job": [{"id": 1, "question": "q", "answer": "a", "hop_level": "1"}]}
    path = write(tmp_path / "qa.jsonl", [good, wrong_item, no_trace, cycle, bad_job])

    stopped = cli("stats", path)
    assert stopped.exit_code == 1, stopped.stderr
    assert stopped.stderr.strip().splitlines() == [
        f"Error: {path}:2: record 'qa-wrong': field decomposition_trace[0]: not a valid qa_instance, environment or "
        "rl_sample: 5 is not of type 'object'"]

    result = cli("stats", path, "--skip-bad", "--rejects", tmp_path / "rej.jsonl", "-o", tmp_path / "s.json")
    assert result.exit_code == 0, result.stderr
    assert "read 5" in result.stderr and "rejected 4" in result.stderr
    rejects = {r["id"]: r for r in read(tmp_path / "rej.jsonl")}
    assert rejects["qa-wrong"]["source"] == f"{path}:2" and "line" in rejects["qa-wrong"]
    assert "'decomposition_trace' is a required property" in rejects["qa-none"]["reason"]
    assert rejects["qa-cycle"]["reason"].startswith("invalid decomposition_trace: step 1 depends on later step 2")
    assert rejects["qa-cycle"]["source"] == f"{path}:4" and rejects["qa-cycle"]["record"]["id"] == "qa-cycle"
    assert "field job[0].hop_level" in rejects["rl-bad"]["reason"]
    import json

    assert json.loads((tmp_path / "s.json").read_text())["samples"] == 1
