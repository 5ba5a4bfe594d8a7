"""LLM Q–A synthesis: parsing ASTRA's reply format, both modes, the hop budget, rejects (replies recorded)."""

import json

from qaenv_helpers import read, write

TWO_HOP = {"scenario_type": "Multi-Hop", "main_question": "What is the population of the capital of Valdoria?",
           "final_answer": "Ravpelmar, 3291200.", "decomposition_trace": [
               {"_uuid": 1, "hop_level": 1, "sub_question": "What is the capital of Valdoria?", "is_parallel": False,
                "dependency": None, "sub_answer": "Ravpelmar"},
               {"_uuid": 2, "hop_level": 2, "sub_question": "What is the population of Ravpelmar?",
                "is_parallel": False, "dependency": [1], "sub_answer": 3291200, "tool_necessity": True}]}
ONE_HOP = {"scenario_type": "Single-Hop", "main_question": "What is the currency of Valdoria?",
           "final_answer": "The valdor.", "decomposition_trace": [
               {"_uuid": 1, "hop_level": 1, "sub_question": "What is the currency of Valdoria?", "is_parallel": False,
                "dependency": None, "sub_answer": "valdor"}]}


def synthesize_one_row(tmp_path, cli, server):
    """`astra-qaenv synthesize` of one knowledge row against a recorded-reply server; out in qa.jsonl, rej.jsonl."""
    rows = write(tmp_path / "k.jsonl", [{"domain": "geography", "knowledge_corpus": "Valdoria's capital is ..."}])
    return cli("synthesize", rows, "-o", tmp_path / "qa.jsonl", "--rejects", tmp_path / "rej.jsonl",
               env={"ASTRA_LLM_BASE_URL": server.base_url})


def test_unconditional_keeps_in_budget_instances_and_rejects_the_rest(tmp_path, cli, recorded_llm):
    # Recorded reply: the model wrote two instances, one outside the hop budget 2-4.
    server = recorded_llm(replies=[json.dumps([TWO_HOP, ONE_HOP])])
    result = synthesize_one_row(tmp_path, cli, server)
    assert result.exit_code == 0, result.output
    (kept,) = read(tmp_path / "qa.jsonl")
    assert kept["decomposition_trace"][1]["sub_answer"] == "3291200"  # answers become strings
    assert kept["decomposition_trace"][1]["needs_tool"] is True  # ASTRA's tool_necessity is read
    assert kept["synthesis"]["mode"] == "unconditional" and kept["knowledge"].startswith("Valdoria")
    assert kept["meta"]["parent_id"].startswith("row-")
    (rejected,) = read(tmp_path / "rej.jsonl")
    assert "1 hop level(s), outside 2-4" in rejected["reason"]
    prompt = server.chat_requests[0]["messages"][0]["content"]
    assert "between 2 and 4" in prompt and "Valdoria's capital" in prompt and "Parallel Multi-Hop" in prompt


def test_conditional_mode_keeps_the_given_question(tmp_path, cli, recorded_llm):
    server = recorded_llm(replies=[json.dumps({**ONE_HOP, "main_question": "rephrased by the model"})])
    rows = write(tmp_path / "q.jsonl", [{"question": "Which currency does Valdoria use?", "domain": "geography"}])
    result = cli("synthesize", rows, "-o", tmp_path / "qa.jsonl", env={"ASTRA_LLM_BASE_URL": server.base_url})
    assert result.exit_code == 0
    (kept,) = read(tmp_path / "qa.jsonl")
    assert kept["main_question"] == "Which currency does Valdoria use?"
    assert kept["synthesis"]["mode"] == "conditional"
    assert "Which currency does Valdoria use?" in server.chat_requests[0]["messages"][0]["content"]


def test_an_unparseable_reply_is_rejected_with_what_the_model_said(tmp_path, cli, recorded_llm):
    server = recorded_llm(replies=["Sure! Here are some questions about geography."])
    rows = write(tmp_path / "k.jsonl", [{"domain": "geography", "knowledge_corpus": ""}])
    result = cli("synthesize", rows, "--attempts", "2", "-o", tmp_path / "qa.jsonl", "--rejects",
                 tmp_path / "rej.jsonl", env={"ASTRA_LLM_BASE_URL": server.base_url})
    assert result.exit_code == 0
    assert read(tmp_path / "qa.jsonl") == []
    (rejected,) = read(tmp_path / "rej.jsonl")
    assert "not a decomposition in ASTRA's format" in rejected["reason"]
    assert "Here are some questions" in rejected["reason"]
    assert len(server.chat_requests) == 2  # the model was asked again with the error


def test_a_wrong_typed_knowledge_row_is_rejected_before_the_llm_sees_it(tmp_path, cli, recorded_llm):
    server = recorded_llm(replies=[json.dumps([TWO_HOP])])
    rows = write(tmp_path / "k.jsonl", [{"domain": "geography", "knowledge_corpus": 42},
                                        {"domain": "geography", "knowledge_corpus": "Valdoria's capital is ..."}])
    result = cli("synthesize", rows, "--skip-bad", "-o", tmp_path / "qa.jsonl", "--rejects", tmp_path / "rej.jsonl",
                 env={"ASTRA_LLM_BASE_URL": server.base_url})
    assert result.exit_code == 0, result.output
    (rejected,) = read(tmp_path / "rej.jsonl")
    assert rejected["source"] == f"{rows}:1" and "field knowledge_corpus" in rejected["reason"]
    assert len(server.chat_requests) == 1 and len(read(tmp_path / "qa.jsonl")) == 1


def test_an_instance_whose_dependency_names_a_missing_sub_question_is_rejected_with_the_reason(tmp_path, cli,
                                                                                              recorded_llm):
    """The LLM wrote it (recorded reply), so it is a reject with the field and the missing id, not bad input;
    it used to be written out and reach validate and build-env."""
    dangling = json.loads(json.dumps(TWO_HOP))
    dangling["main_question"] = "What is the area of the capital of Valdoria?"
    dangling["decomposition_trace"][1]["dependency"] = [7]
    server = recorded_llm(replies=[json.dumps([TWO_HOP, dangling])])
    result = synthesize_one_row(tmp_path, cli, server)
    assert result.exit_code == 0, result.output
    (kept,) = read(tmp_path / "qa.jsonl")
    assert kept["main_question"] == TWO_HOP["main_question"]
    (rejected,) = read(tmp_path / "rej.jsonl")
    assert rejected["record"]["main_question"] == dangling["main_question"]
    assert rejected["reason"].startswith("unknown dependency: decomposition_trace[1].dependency: sub-question 2 "
                                         "depends on 7, which no sub-question")


def test_the_counts_give_rows_read_written_and_rejected_and_the_dropped_instances_apart(tmp_path, cli, recorded_llm):
    """Recorded replies: row 1 gets two instances (one in the hop budget), row 2 one out of it. The two dropped
    instances were counted as rejects of the 2 rows read ('rejected 3'); they are derived, so the rows' counts
    are read 2 = 1 written from + 1 rejected, and the instances dropped are a figure of their own."""
    server = recorded_llm(replies=[json.dumps([TWO_HOP, ONE_HOP]), json.dumps([ONE_HOP])])
    rows = write(tmp_path / "k.jsonl", [{"domain": "geography", "knowledge_corpus": "Valdoria's capital is ..."},
                                        {"domain": "geography", "knowledge_corpus": "Valdoria's currency is ..."}])
    result = cli("synthesize", rows, "--concurrency", "1", "-o", tmp_path / "qa.jsonl", "--rejects",
                 tmp_path / "rej.jsonl", env={"ASTRA_LLM_BASE_URL": server.base_url})
    assert result.exit_code == 0, result.output
    assert "astra-qaenv synthesize: read 2 · wrote 1 from 1 · rejected 1 ·" in result.stderr, result.stderr
    assert "outputs made and dropped: 2 (hop budget ×2; in --rejects)" in result.stderr
    assert "reject reasons: all 1 instance(s) the LLM wrote were dropped (see their rejects) ×1\n" in result.stderr
    (kept,) = read(tmp_path / "qa.jsonl")
    assert kept["main_question"] == TWO_HOP["main_question"]
    rejects = read(tmp_path / "rej.jsonl")  # the dropped instances are still kept there, each with its reason
    assert sum(r.get("derived", False) for r in rejects) == 2
    assert sorted(r["reason"].split(":")[0] for r in rejects) == ["all 1 instance(s) the LLM wrote were dropped "
                                                                  "(see their rejects)", "hop budget", "hop budget"]
    assert [r["source"] for r in rejects if "source" in r] == [f"{rows}:2"]
