"""validate: structure, tool necessity (LLM, recorded replies) and the leaf-only rule."""

from qaenv_helpers import read, router, write


def instance(uuid_deps, **extra):
    trace = []
    for uuid, deps, level in uuid_deps:
        trace.append({"_uuid": uuid, "hop_level": level, "sub_question": f"Question {uuid}?", "is_parallel": False,
                      "dependency": deps, "sub_answer": f"answer {uuid}"})
    return {"id": f"qa-{len(trace)}-{extra.pop('tag', '')}", "domain": "test", "scenario_type": "Single-Hop",
            "main_question": "Main?", "final_answer": "Final.", "decomposition_trace": trace, "meta": {}, **extra}


def run_validate(cli, tmp_path, records, *args, server=None):
    path = write(tmp_path / "in.jsonl", records)
    env = {"ASTRA_LLM_BASE_URL": server.base_url} if server else {}
    result = cli("validate", path, "--no-judge", "-o", tmp_path / "out.jsonl", "--rejects", tmp_path / "rej.jsonl",
                 *args, env=env)
    assert result.exit_code == 0, result.output
    return read(tmp_path / "out.jsonl"), {r["id"]: r["reason"] for r in read(tmp_path / "rej.jsonl")}


def test_structural_problems_are_rejected_and_scenario_is_set_from_structure(cli, tmp_path):
    good = instance([(1, None, 1), (2, None, 1), (3, [1, 2], 2)], tag="good")
    for step in good["decomposition_trace"]:
        step["needs_tool"] = True
    forward = instance([(1, [2], 1), (2, None, 1)], tag="forward")
    levels = instance([(1, None, 1), (2, [1], 1)], tag="levels")
    kept, rejected = run_validate(cli, tmp_path, [good, forward, levels], "--necessity", "given")
    assert [k["id"] for k in kept] == [good["id"]]
    assert kept[0]["scenario_type"] == "Parallel Multi-Hop" and kept[0]["scenario_declared"] == "Single-Hop"
    assert "depends on later step 2" in rejected[forward["id"]]
    assert "step 2 has hop_level 1" in rejected[levels["id"]]


def test_tool_free_sub_questions_only_at_leaves(cli, tmp_path, recorded_llm):
    chain = instance([(1, None, 1), (2, [1], 2), (3, [2], 3)], tag="chain")
    leaf = instance([(1, None, 1), (2, None, 1), (3, [1, 2], 2)], tag="leaf")

    # Recorded judge replies, in input order: the chain's middle step needs no tool; the other's leaf needs none.
    replies = iter([
        {"judgments": [{"_uuid": 1, "needs_tool": True}, {"_uuid": 2, "needs_tool": False, "reason": "summarize"},
                       {"_uuid": 3, "needs_tool": True}]},
        {"judgments": [{"_uuid": 1, "needs_tool": True}, {"_uuid": 2, "needs_tool": True},
                       {"_uuid": 3, "needs_tool": False, "reason": "a comparison"}]},
    ])
    server = recorded_llm(replies=[router(tool_necessity=[lambda body: next(replies)])])
    kept, rejected = run_validate(cli, tmp_path, [chain, leaf], "--concurrency", "1", server=server)
    assert "sub-question 2 needs no tool but 3 depend(s) on it" in rejected[chain["id"]]
    assert "allowed only at leaves" in rejected[chain["id"]]
    (ok,) = kept
    assert [s["needs_tool"] for s in ok["decomposition_trace"]] == [True, True, False]
    assert ok["decomposition_trace"][2]["necessity_reason"] == "a comparison"
    assert "1. Question 1? (answer: answer 1)" in server.chat_requests[0]["messages"][0]["content"]


def test_necessity_failures_say_why(cli, tmp_path, recorded_llm):
    partial = instance([(1, None, 1), (2, None, 1)], tag="partial")
    none = instance([(1, None, 1)], tag="none")
    replies = iter([{"judgments": [{"_uuid": 1, "needs_tool": True}]},
                    {"judgments": [{"_uuid": 1, "needs_tool": False}]}])
    server = recorded_llm(replies=[router(tool_necessity=[lambda body: next(replies)])])
    kept, rejected = run_validate(cli, tmp_path, [partial, none], "--concurrency", "1", server=server)
    assert kept == []
    assert "judged no sub-question 2" in rejected[partial["id"]]
    assert "no sub-question needs a tool" in rejected[none["id"]]
    # given flags are used without asking the LLM
    flagged = instance([(1, None, 1)], tag="flagged")
    flagged["decomposition_trace"][0]["needs_tool"] = True
    kept, _ = run_validate(cli, tmp_path, [flagged], server=server)
    assert len(kept) == 1 and len(server.chat_requests) == 2


def test_a_dependency_on_a_missing_sub_question_is_malformed_input_naming_the_field(cli, tmp_path):
    """It passed as a structure reject among content checks; as input it is a broken reference: the run stops
    naming file, line, record, field and the missing id, or with --skip-bad it goes to --rejects."""
    good = instance([(1, None, 1), (2, [1], 2)], tag="good")
    dangling = instance([(1, None, 1), (2, [1], 2), (3, [2, 9], 3)], tag="dangling")
    for record in (good, dangling):
        for step in record["decomposition_trace"]:
            step["needs_tool"] = True
    path = write(tmp_path / "in.jsonl", [good, dangling])
    stopped = cli("validate", path, "--no-judge", "-o", tmp_path / "out.jsonl")
    assert stopped.exit_code == 1
    assert (f"{path}:2: record '{dangling['id']}': field decomposition_trace[2].dependency: not a valid "
            "qa_instance: sub-question 3 depends on 9, which no sub-question") in stopped.stderr, stopped.stderr
    kept, rejected = run_validate(cli, tmp_path, [good, dangling], "--skip-bad")
    assert [k["id"] for k in kept] == [good["id"]]
    assert "field decomposition_trace[2].dependency" in rejected[dangling["id"]]
    assert "depends on 9" in rejected[dangling["id"]]
