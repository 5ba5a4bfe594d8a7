"""The engine's commands composed over JSONL, stage by stage and as `evolve` streams: with RECORDED
replies (`recorded_llm`, real HTTP) for control flow, and one full stream on the embedded SmolLM2
(real model; asserts that every stage's record is kept, not quality). Environments run in real
jailed astra-sandbox sessions."""

import json

import pytest
from astra_core.schema import validate
from astra_toolgraph import data
from astra_toolgraph.cli import main
from click.testing import CliRunner
from evolve_support import PLAN, TASK, engine_replies

pytestmark = pytest.mark.nsjail


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def invoke(*args, env=None):
    result = CliRunner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def domain_file(tmp_path):
    path = tmp_path / "domain.jsonl"
    path.write_text(json.dumps(data.sample_domain()) + "\n")
    return path


def test_the_stage_commands_compose_plan_to_revised_plan(recorded_llm, tmp_path, domain_file):
    server = recorded_llm(replies=[engine_replies()])
    llm = ["--base-url", server.base_url, "--max-retries", "0"]
    invoke("evolve-plans", domain_file, "--plans", "2", *llm, "-o", tmp_path / "plans.jsonl")
    plans = read(tmp_path / "plans.jsonl")
    assert len(plans) == 2 and {p["iteration"] for p in plans} == {0}
    invoke("evolve-tasks", tmp_path / "plans.jsonl", "--domains", domain_file, "--tasks-per-plan", "1",
           "--explore-turns", "1", *llm, "-o", tmp_path / "tasks.jsonl")
    invoke("verify-tasks", tmp_path / "tasks.jsonl", "--plans", tmp_path / "plans.jsonl", *llm,
           "-o", tmp_path / "verified.jsonl")
    invoke("evolve-rollout", tmp_path / "verified.jsonl", "--domains", domain_file, *llm,
           "-o", tmp_path / "trajectories.jsonl")
    invoke("verify-trajectories", tmp_path / "trajectories.jsonl", "--tasks", tmp_path / "verified.jsonl",
           "--plans", tmp_path / "plans.jsonl", *llm, "-o", tmp_path / "verified-trajectories.jsonl")
    invoke("reflect", tmp_path / "plans.jsonl", "--tasks", tmp_path / "verified.jsonl", "--trajectories",
           tmp_path / "verified-trajectories.jsonl", *llm, "-o", tmp_path / "plans-k1.jsonl")
    trajectories = read(tmp_path / "verified-trajectories.jsonl")
    assert [t["verification"]["verdict"] for t in trajectories] == ["SUCCESS", "SUCCESS"]
    revised = read(tmp_path / "plans-k1.jsonl")
    assert [p["iteration"] for p in revised] == [1, 1]
    assert all(p["history"][0]["outcome"]["trajectories_succeeded"] == 1 for p in revised)

    invoke("export-user-sft", tmp_path / "verified-trajectories.jsonl", "-o", tmp_path / "user-sft.jsonl")
    invoke("export-rl", tmp_path / "verified.jsonl", "--domains", domain_file, "--trajectories",
           tmp_path / "trajectories.jsonl", "-o", tmp_path / "rl.jsonl")
    for record in read(tmp_path / "user-sft.jsonl"):
        validate(record, "trajectory")
    samples = read(tmp_path / "rl.jsonl")
    assert len(samples) == 2 and all(s["messages"][1]["content"].startswith("I'd like two bags") for s in samples)


def test_rollout_rejects_tasks_that_failed_verification(recorded_llm, tmp_path, domain_file):
    task = {"id": "t-fail", "server_id": "env-sample-shop", "question": "x", "user": {"instruction": "x"},
            "verification": {"verdict": "FAIL", "rationale": "bad"}, "meta": {"provenance": []}}
    (tmp_path / "t.jsonl").write_text(json.dumps(task) + "\n")
    server = recorded_llm(replies=["unused"])
    invoke("evolve-rollout", tmp_path / "t.jsonl", "--domains", domain_file, "--base-url", server.base_url,
           "--rejects", tmp_path / "rejects.jsonl", "-o", tmp_path / "out.jsonl")
    assert read(tmp_path / "out.jsonl") == []
    [reject] = read(tmp_path / "rejects.jsonl")
    assert "task verification: FAIL" in json.dumps(reject) and not server.requests


def test_evolve_runs_k_iterations_per_stream_and_keeps_every_artifact(recorded_llm, tmp_path, domain_file):
    server = recorded_llm(replies=[engine_replies()])
    plans = [{"id": f"plan-{i}", "domain_id": "env-sample-shop", "stream": f"plan-{i}", "iteration": 0,
              **PLAN, "history": [], "meta": {"provenance": []}} for i in range(2)]
    (tmp_path / "plans.jsonl").write_text("".join(json.dumps(p) + "\n" for p in plans))
    result = invoke("evolve", tmp_path / "plans.jsonl", "--domains", domain_file, "--iterations", "2",
                    "--tasks-per-plan", "1", "--explore-turns", "1", "--base-url", server.base_url,
                    "--tasks-out", tmp_path / "tasks.jsonl", "--trajectories-out", tmp_path / "traj.jsonl",
                    "-o", tmp_path / "streams.jsonl")
    out = read(tmp_path / "streams.jsonl")
    assert sorted((p["stream"], p["iteration"]) for p in out) == [
        ("plan-0", 0), ("plan-0", 1), ("plan-0", 2), ("plan-1", 0), ("plan-1", 1), ("plan-1", 2)]
    final = next(p for p in out if p["stream"] == "plan-0" and p["iteration"] == 2)
    assert [h["iteration"] for h in final["history"]] == [0, 1]  # every revision kept
    tasks, trajectories = read(tmp_path / "tasks.jsonl"), read(tmp_path / "traj.jsonl")
    assert sorted((t["stream"], t["iteration"]) for t in tasks) == [("plan-0", 0), ("plan-0", 1), ("plan-1", 0),
                                                                     ("plan-1", 1)]
    assert all(t["verification"]["verdict"] == "PASS" for t in tasks)
    assert len(trajectories) == 4 and all("state_check" in t and "verification" in t for t in trajectories)
    assert "accepted: 4" in result.output


@pytest.mark.llm
def test_a_full_stream_runs_on_the_embedded_model(llm_env, tmp_path, domain_file):
    """plan -> tasks -> task verification -> rollouts -> trajectory verification -> reflection -> revised
    plan on SmolLM2. A tiny model's tasks may fail verification, so the rollout stages also run on a
    hand-written verified task; the test asserts records, not quality."""
    small = ["--max-tokens", "160", "--assistant-max-tokens", "24", "--user-max-tokens", "24", "--max-turns", "2",
             "--max-user-turns", "1"]
    invoke("evolve-plans", domain_file, "--plans", "1", "--max-tokens", "160", "-o", tmp_path / "plans.jsonl",
           "--rejects", tmp_path / "plan-rejects.jsonl")
    plans = read(tmp_path / "plans.jsonl")
    assert plans or read(tmp_path / "plan-rejects.jsonl")  # nothing lost
    stream_start = [{"id": "plan-e", "domain_id": "env-sample-shop", "stream": "plan-e", "iteration": 0, **PLAN,
                     "history": [], "meta": {"provenance": []}}]
    (tmp_path / "start.jsonl").write_text(json.dumps(stream_start[0]) + "\n")
    invoke("evolve", tmp_path / "start.jsonl", "--domains", domain_file, "--iterations", "1", "--tasks-per-plan", "1",
           "--explore-turns", "1", "--tool-choice", "first-required", *small, "--tasks-out", tmp_path / "tasks.jsonl",
           "--trajectories-out", tmp_path / "traj.jsonl", "-o", tmp_path / "streams.jsonl",
           "--rejects", tmp_path / "rejects.jsonl")
    [k0, k1] = sorted(read(tmp_path / "streams.jsonl"), key=lambda p: p["iteration"])
    assert (k0["iteration"], k1["iteration"]) == (0, 1)
    failures = k0["meta"]["evolve"]["failures"]
    tasks = read(tmp_path / "tasks.jsonl")
    assert len(tasks) + sum(f["stage"] == "task" for f in failures) == 1  # the task, or why there is none
    for task in tasks:
        assert task["verification"]["verdict"] in ("PASS", "FAIL") and task["verification"]["rationale"]
    trajectories = read(tmp_path / "traj.jsonl")
    assert len(trajectories) == sum(t["verification"]["verdict"] == "PASS" for t in tasks)
    assert k1["history"] or any(f["stage"] == "reflection" for f in failures)

    verified = {**TASK, "id": "t-hand", "server_id": "env-sample-shop", "question": TASK["user_instruction"],
                "user": {"instruction": TASK["user_instruction"], "private_info": TASK["private_info"]},
                "plan_id": "plan-e", "expected_state": _expected_state(),
                "verification": {"verdict": "PASS", "rationale": "hand-written", "by": "judge"},
                "meta": {"provenance": []}}
    (tmp_path / "hand.jsonl").write_text(json.dumps(verified) + "\n")
    invoke("evolve-rollout", tmp_path / "hand.jsonl", "--domains", domain_file, "--tool-choice", "first-required",
           *small[2:], "-o", tmp_path / "hand-traj.jsonl")
    invoke("verify-trajectories", tmp_path / "hand-traj.jsonl", "--tasks", tmp_path / "hand.jsonl", "--plans",
           tmp_path / "start.jsonl", "--max-tokens", "96", "-o", tmp_path / "hand-verified.jsonl",
           "--rejects", tmp_path / "hand-rejects.jsonl")
    [trajectory] = read(tmp_path / "hand-traj.jsonl")
    assert trajectory["messages"][1]["role"] == "user" and trajectory["meta"]["rollout"]["tool_calls"] >= 1
    assert trajectory["state_check"]["reward"] in (0.0, 1.0)
    judged = read(tmp_path / "hand-verified.jsonl") or read(tmp_path / "hand-rejects.jsonl")
    assert len(judged) == 1


def _expected_state():
    state = json.loads(json.dumps({"products": {}, "customers": {}, "orders": {}}))
    namespace: dict = {}
    exec(data.sample_domain()["code"], namespace)  # noqa: S102 - our own bundled environment code
    namespace["place_order"]("C1", "P3", 2)
    state.update(namespace["get_state"]())
    return state
