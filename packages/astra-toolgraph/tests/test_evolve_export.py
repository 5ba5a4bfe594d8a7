"""The engine's exports fed wrong-typed records: each is a malformed-input reject naming the field (a
one-line error naming file, line and field without --skip-bad), never an internal error; a valid record
beside them still exports."""

import pytest
from astra_core.schema import validate
from astra_toolgraph import data
from toolgraph_helpers import assert_rejected_naming, read_jsonl, without, write_jsonl
from toolgraph_helpers import evolve_run as run

TASK = {"id": "task-coffee", "server_id": "env-sample-shop", "question": "Two bags of coffee, please.",
        "user": {"instruction": "You want two bags of coffee.", "private_info": "email: ada@example.com"},
        "expected_state": {"orders": {}}, "verification": {"verdict": "PASS", "rationale": "ok"},
        "meta": {"provenance": []}}
TRAJECTORY = {"id": "traj-coffee", "task_id": "task-coffee", "tools": [],
              "messages": [{"role": "system", "content": "You help."}, {"role": "user", "content": "Coffee, please."},
                           {"role": "assistant", "content": "Ordered."}],
              "user": {"instruction": "You want coffee."}, "user_stop": "###STOP###",
              "verification": {"verdict": "SUCCESS", "rationale": "ok"}, "meta": {"provenance": []}}


@pytest.fixture
def domain_file(tmp_path):
    return write_jsonl(tmp_path / "domain.jsonl", [data.sample_domain()])


@pytest.mark.parametrize(("bad", "field"), [
    ({**TASK, "verification": "PASS"}, "verification"),
    ({**TASK, "user": "buy coffee"}, "user"),
    ({**TASK, "user": {"instruction": 5}}, "user.instruction"),
    ({**TASK, "expected_state": "x"}, "expected_state"),
    ({**TASK, "ignore_fields": "a.b"}, "ignore_fields"),
    (without(TASK, "user"), "(record)"),
    (without(TASK, "expected_state"), "(record)"),
])
def test_export_rl_rejects_a_wrong_typed_task_naming_the_field(tmp_path, domain_file, bad, field):
    [sample] = assert_rejected_naming(tmp_path, ["export-rl", "--domains", domain_file], TASK, bad, field)
    validate(sample, "rl_sample")
    assert sample["messages"][1]["content"] == TASK["user"]["instruction"]


def test_export_rl_names_the_field_a_missing_user_or_state_lacks(tmp_path, domain_file):
    inputs = write_jsonl(tmp_path / "in.jsonl", [{**without(TASK, "user"), "id": "bad"}])
    result = run("export-rl", inputs, "--domains", domain_file)
    assert result.exit_code == 1 and "'user' is a required property" in result.output


def test_export_rl_checks_the_domains_file(tmp_path):
    domains = write_jsonl(tmp_path / "domains.jsonl", [{"id": "env-sample-shop"}])
    result = run("export-rl", write_jsonl(tmp_path / "in.jsonl", [TASK]), "--domains", domains)
    assert result.exit_code == 1, result.output
    assert f"{domains}:1: record 'env-sample-shop': field (record): not a valid domain: 'tools' is a required" \
           in result.output
    domains = write_jsonl(tmp_path / "domains.jsonl", [{**data.sample_domain(), "code": 5}])
    result = run("export-rl", tmp_path / "in.jsonl", "--domains", domains)
    assert result.exit_code == 1 and f"{domains}:1: record 'env-sample-shop': field code:" in result.output


@pytest.mark.parametrize(("bad", "field"), [
    ({**TRAJECTORY, "verification": "SUCCESS"}, "verification"),
    ({**TRAJECTORY, "user": "find stuff"}, "user"),
    ({**TRAJECTORY, "user": ["x"]}, "user"),
    ({**TRAJECTORY, "user": {"instruction": 5}}, "user.instruction"),
    ({**TRAJECTORY, "user": {"instruction": "x", "tools": "phone"}}, "user.tools"),
    ({**TRAJECTORY, "user_stop": 5}, "user_stop"),
])
def test_export_user_sft_rejects_a_wrong_typed_trajectory_naming_the_field(tmp_path, bad, field):
    [record] = assert_rejected_naming(tmp_path, ["export-user-sft"], TRAJECTORY, bad, field)
    validate(record, "trajectory")
    assert "You want coffee." in record["messages"][0]["content"]
    assert record["messages"][-1]["content"].endswith("###STOP###")


def test_export_user_sft_still_rejects_a_trajectory_without_a_user_by_reason(tmp_path):
    inputs = write_jsonl(tmp_path / "in.jsonl", [{**TRAJECTORY, "user": None}])
    rejects = tmp_path / "rejects.jsonl"
    result = run("export-user-sft", inputs, "--rejects", rejects)
    assert result.exit_code == 0 and result.stdout == ""
    assert [r["reason"] for r in read_jsonl(rejects)] == ["trajectory has no user simulator profile (`user`)"]

