"""verify-tasks, verify and reflect fed wrong-typed records (their input and their --tasks / --trajectories /
--plans side files): each is malformed input naming the field (a reject with --skip-bad, else a one-line error
naming file, line and field), never an AttributeError/KeyError/TypeError; the bundled samples still pass."""

import json

import pytest
from astra_toolgraph.cli import main
from click.testing import CliRunner
from evolve_support import REFLECTION
from toolgraph_helpers import assert_rejected_naming, evolve_run, read_jsonl, without, write_jsonl


def sample(what: str) -> list[dict]:
    output = CliRunner().invoke(main, ["evolve", "sample-domain", "--what", what]).output
    return [json.loads(line) for line in output.splitlines() if line.strip()]


[PLAN] = sample("plan")
SEED = sample("tasks")
ACTION = SEED[0]["expected_actions"][0]
# The first seed task as verify-tasks completes it: its expected state and the replay that gave it.
COMPLETED = {**SEED[0], "expected_state": {"orders": {}}, "ignore_fields": [],
             "synthesis": {"replay": [{**ACTION, "ok": True, "observation": "order O9 placed"}],
                           "changes_state": True}}
CHECKED = {"id": "traj-coffee", "task_id": COMPLETED["id"], "plan_id": PLAN["id"], "tools": [],
           "messages": [{"role": "system", "content": "You help."}, {"role": "user", "content": "Coffee, please."},
                        {"role": "assistant", "content": "Ordered."}],
           "user": COMPLETED["user"], "user_stop": "###STOP###", "state_check": {"reward": 1.0, "diff": []},
           "meta": {"provenance": []}}
FAILED_TASK = {**COMPLETED, "verification": {"verdict": "FAIL", "rationale": "The stock is too low.", "by": "judge"}}
FAILED_TRAJECTORY = {**CHECKED, "verification": {"verdict": "FAIL", "rationale": "The assistant never ordered.",
                                                 "attribution": "TRAJECTORY"}}


@pytest.fixture
def plans(tmp_path):
    return write_jsonl(tmp_path / "plans.jsonl", [PLAN])


@pytest.mark.parametrize(("bad", "field"), [
    ({**COMPLETED, "user": "buy coffee"}, "user"),
    ({**COMPLETED, "user": {"instruction": 5}}, "user.instruction"),
    ({**COMPLETED, "plan_id": 5}, "plan_id"),
    ({**COMPLETED, "plan_id": ["plan-shop-seed"]}, "plan_id"),
    ({**COMPLETED, "specification": {"steps": 2}}, "specification"),
    ({**COMPLETED, "expected_answer": 5}, "expected_answer"),
    ({**COMPLETED, "expected_actions": "place_order"}, "expected_actions"),
    ({**COMPLETED, "expected_actions": [{"name": 5}]}, "expected_actions[0].name"),
    ({**COMPLETED, "expected_actions": [{**ACTION, "arguments": "C1"}]}, "expected_actions[0].arguments"),
    ({**COMPLETED, "expected_state": "x"}, "expected_state"),
    ({**COMPLETED, "synthesis": "replayed"}, "synthesis"),
    ({**COMPLETED, "synthesis": {**COMPLETED["synthesis"], "replay": [{**ACTION, "ok": True, "observation": 5}]}},
     "synthesis.replay[0].observation"),
    ({**COMPLETED, "synthesis": {"replay": []}}, "synthesis"),
    (without(COMPLETED, "synthesis"), "(record)"),
    (without(COMPLETED, "user"), "(record)"),
])
def test_verify_tasks_rejects_a_wrong_typed_task_naming_the_field(tmp_path, plans, bad, field):
    [task] = assert_rejected_naming(tmp_path, ["verify-tasks", "--plans", plans, "--no-judge-tasks"], COMPLETED,
                                    bad, field)
    assert task["verification"]["verdict"] == "PASS"


def test_verify_tasks_names_what_a_task_with_an_expected_state_lacks(tmp_path, plans):
    inputs = write_jsonl(tmp_path / "in.jsonl", [without(COMPLETED, "synthesis")])
    result = evolve_run("verify-tasks", inputs, "--plans", plans, "--no-judge-tasks")
    assert result.exit_code == 1 and "'synthesis' is a required property" in result.output, result.output


@pytest.mark.nsjail
def test_verify_tasks_still_verifies_the_bundled_seed_tasks(tmp_path, plans):
    from astra_toolgraph import data

    domains = write_jsonl(tmp_path / "domain.jsonl", [data.sample_domain()])
    inputs = write_jsonl(tmp_path / "seed.jsonl", SEED)
    result = evolve_run("verify-tasks", inputs, "--plans", plans, "--domains", domains, "--no-judge-tasks",
                        "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.output
    assert [t["verification"]["verdict"] for t in read_jsonl(tmp_path / "out.jsonl")] == ["PASS"] * len(SEED)


@pytest.mark.parametrize(("bad", "field"), [
    ({**CHECKED, "state_check": "passed"}, "state_check"),
    ({**CHECKED, "state_check": {"reward": "1.0", "diff": []}}, "state_check.reward"),
    ({**CHECKED, "state_check": {"reward": 1.0, "diff": "none"}}, "state_check.diff"),
    ({**CHECKED, "state_check": {"reward": 1.0}}, "state_check"),
    ({**CHECKED, "state_check": {"reward": 1.0, "diff": [], "answer_given": "yes"}}, "state_check.answer_given"),
    (without(CHECKED, "state_check"), "(record)"),
    ({**CHECKED, "task_id": 5}, "task_id"),
    ({**CHECKED, "task_id": None}, "task_id"),
    (without(CHECKED, "task_id"), "(record)"),
    ({**CHECKED, "user_stop": 5}, "user_stop"),
    ({**CHECKED, "messages": [{"role": "assistant", "content": None,
                               "tool_calls": [{"id": "c1", "type": "function",
                                               "function": {"name": "get_order", "arguments": {"id": 1}}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
])
def test_verify_rejects_a_wrong_typed_trajectory_naming_the_field(tmp_path, plans, bad, field):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", SEED)
    [trajectory] = assert_rejected_naming(
        tmp_path, ["verify", "--tasks", tasks, "--plans", plans, "--no-judge-trajectories"], CHECKED, bad, field)
    assert trajectory["verification"]["verdict"] == "SUCCESS"


@pytest.mark.parametrize(("bad", "field"), [
    ({**COMPLETED, "plan_id": 5}, "plan_id"), ({**COMPLETED, "specification": 5}, "specification"),
    ({**COMPLETED, "expected_answer": ["x"]}, "expected_answer"), ({**COMPLETED, "user": "x"}, "user"),
])
def test_verify_checks_its_tasks_file_naming_file_line_and_field(tmp_path, plans, bad, field):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{**bad, "id": "bad"}])
    inputs = write_jsonl(tmp_path / "in.jsonl", [CHECKED])
    for extra in ([], ["--skip-bad", "--rejects", tmp_path / "rejects.jsonl"]):
        result = evolve_run("verify", inputs, "--tasks", tasks, "--plans", plans, "--no-judge-trajectories", *extra)
        assert result.exit_code == 1 and f"{tasks}:1: record 'bad': field {field}:" in result.output, result.output
        assert "Traceback" not in result.output


def reflect_args(tmp_path, tasks=(FAILED_TASK,), trajectories=(FAILED_TRAJECTORY,)):
    return ["--tasks", write_jsonl(tmp_path / "tasks.jsonl", list(tasks)),
            "--trajectories", write_jsonl(tmp_path / "trajectories.jsonl", list(trajectories))]


@pytest.mark.parametrize(("bad", "field"), [
    ({**PLAN, "synthesis_plan": 5}, "synthesis_plan"), ({**PLAN, "iteration": "0"}, "iteration"),
    ({**PLAN, "history": "none"}, "history"), ({**PLAN, "focus": {"category": "x"}}, "focus"),
    (without(PLAN, "evaluation_rules"), "(record)"),
])
def test_reflect_rejects_a_wrong_typed_plan_naming_the_field(recorded_llm, tmp_path, bad, field):
    server = recorded_llm(replies=[json.dumps(REFLECTION)] * 4)
    [revised] = assert_rejected_naming(tmp_path, ["reflect", *reflect_args(tmp_path), "--base-url", server.base_url],
                                       PLAN, bad, field)
    assert revised["iteration"] == 1
    [entry] = revised["history"]
    assert [f["stage"] for f in entry["failures"]] == ["task_verification", "trajectory_verification"]


@pytest.mark.parametrize(("tasks", "trajectories", "file", "field"), [
    ([{**FAILED_TASK, "verification": "FAIL"}], [FAILED_TRAJECTORY], "tasks", "verification"),
    ([{**FAILED_TASK, "verification": {"verdict": "FAIL"}}], [FAILED_TRAJECTORY], "tasks", "verification"),
    ([{**FAILED_TASK, "verification": {"verdict": "FAIL", "rationale": 5}}], [FAILED_TRAJECTORY], "tasks",
     "verification.rationale"),
    ([{**FAILED_TASK, "plan_id": 5}], [FAILED_TRAJECTORY], "tasks", "plan_id"),
    ([FAILED_TASK], [{**FAILED_TRAJECTORY, "verification": "FAIL"}], "trajectories", "verification"),
    ([FAILED_TASK], [{**FAILED_TRAJECTORY, "verification": {"verdict": "FAIL", "rationale": "x"}}], "trajectories",
     "verification"),
    ([FAILED_TASK], [{**FAILED_TRAJECTORY, "verification": {**FAILED_TRAJECTORY["verification"],
                                                            "attribution": 5}}], "trajectories",
     "verification.attribution"),
    ([FAILED_TASK], [{**FAILED_TRAJECTORY, "plan_id": 5}], "trajectories", "plan_id"),
])
def test_reflect_checks_its_side_files_naming_file_line_and_field(recorded_llm, tmp_path, tasks, trajectories,
                                                                   file, field):
    server = recorded_llm(replies=[json.dumps(REFLECTION)])
    inputs = write_jsonl(tmp_path / "in.jsonl", [PLAN])
    tasks = [{**t, "id": "bad"} if file == "tasks" else t for t in tasks]
    trajectories = [{**t, "id": "bad"} if file == "trajectories" else t for t in trajectories]
    result = evolve_run("reflect", inputs, *reflect_args(tmp_path, tasks, trajectories), "--base-url", server.base_url)
    assert result.exit_code == 1, result.output
    assert f"{tmp_path / file}.jsonl:1: record 'bad': field {field}:" in result.output, result.output
    assert "Traceback" not in result.output and not server.requests


def test_reflect_rejects_a_plan_whose_trajectories_are_not_verified_yet(recorded_llm, tmp_path):
    server = recorded_llm(replies=[json.dumps(REFLECTION)])
    inputs = write_jsonl(tmp_path / "in.jsonl", [PLAN])
    result = evolve_run("reflect", inputs, *reflect_args(tmp_path, trajectories=[CHECKED]), "--base-url",
                        server.base_url, "--rejects", tmp_path / "rejects.jsonl")
    assert result.exit_code == 0, result.output
    assert [r["reason"] for r in read_jsonl(tmp_path / "rejects.jsonl")] == ["trajectories not verified yet: traj-coffee"]
    assert not server.requests


@pytest.mark.parametrize(("transport", "missing"), [({"command": "python"}, "kind"), ({"url": "http://x"}, "kind"),
                                                    ({"kind": "http"}, "url"), ({"kind": "stdio"}, "command")])
def test_a_domain_transport_names_what_it_lacks(tmp_path, transport, missing):
    from astra_toolgraph import data

    domain = {**without(data.sample_domain(), "code"), "transport": transport}
    domains = write_jsonl(tmp_path / "domains.jsonl", [domain])
    result = evolve_run("export-rl", write_jsonl(tmp_path / "in.jsonl", [COMPLETED]), "--domains", domains)
    assert result.exit_code == 1, result.output
    assert f"{domains}:1: record '{domain['id']}': field transport: not a valid domain: '{missing}' is a required " \
           "property" in result.output, result.output
