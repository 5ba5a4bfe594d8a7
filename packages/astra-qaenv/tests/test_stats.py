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
                                          "job": job, "messages": [], "tools": [], "meta": {}}])
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
