"""`astra-qaenv serve-openenv`: our environments served as OpenEnv environments, driven by OpenEnv's own client.

Everything is real: rl_samples from the pipeline on the bundled knowledge base, the server (OpenEnv 0.10's
HTTPEnvServer over our MCPEnvironment, uvicorn, nsjail episodes on the warm pool) on 127.0.0.1, and OpenEnv's
`MCPToolClient` playing episodes (openenv_scripts/play.py), both in .venv-openenv. The reward the server gives at
an episode's end is compared with astra-reward's F1 computed here, in-process, on the conversation the client saw.
"""

from __future__ import annotations

import json

import pytest
from astra_reward import f1_from_counts, f1_reward
from openenv_support import (
    PLAY,
    openenv_bin,
    qaenv_samples,
    read_jsonl,
    run_script,
    serve_samples,
    write_jsonl,
)

pytestmark = pytest.mark.nsjail
TRL_GRPO = PLAY.with_name("trl_grpo.py")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("openenv-samples")
    samples, gold = qaenv_samples(workdir)
    assert any(not sub["needs_tool"] for s in samples for sub in s["job"])  # a tool-free leaf: the answer counts
    return workdir, {s["id"]: s for s in samples}, gold


@pytest.fixture(scope="module")
def server(made, tmp_path_factory):
    workdir, _, _ = made
    with serve_samples(workdir / "rl.jsonl", tmp_path_factory.mktemp("server"), "--sandbox-pool-size", "3") as running:
        yield running


def play(server, plans, tmp_path, *flags):
    plans_path = write_jsonl(tmp_path / "plans.jsonl", plans)
    done = run_script(PLAY, server.base_url, plans_path, tmp_path / "played.jsonl", *flags)
    assert done.returncode == 0, done.stderr
    return read_jsonl(tmp_path / "played.jsonl")


def gold_plan(trajectory: dict) -> dict:
    calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
             for m in trajectory["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    for index, call in enumerate(calls):
        call["via"] = "step" if index % 2 else "mcp"  # both of OpenEnv's tool paths
    return {"reset": {"sample_id": trajectory["task_id"]}, "calls": calls,
            "answer": trajectory["messages"][-1]["content"]}


def conversation(sample: dict, plan: dict, observations: list[str]) -> list[dict]:
    """The conversation the client played, as astra-grpo records an episode."""
    messages = list(sample["messages"])
    for index, (call, observation) in enumerate(zip(plan["calls"], observations, strict=True)):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{index}", "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{index}", "content": observation})
    if plan.get("answer") is not None:
        messages.append({"role": "assistant", "content": plan["answer"]})
    return messages


def assert_scored_as_in_process(sample, plan, played):
    assert "error" not in played, played
    expected = f1_reward(sample["job"], conversation(sample, plan, played["observations"]), variant="f1")
    assert played["done"] is True
    assert played["reward"] == expected.reward
    assert played["metadata"]["reward_components"] == json.loads(json.dumps(expected.components()))
    assert played["metadata"]["tool_calls"] == len(plan["calls"])
    return expected


def test_gold_episodes_played_by_mcptoolclient_score_what_f1_says_in_process(server, made, tmp_path):
    _, samples, gold = made
    plans = [gold_plan(trajectory) for trajectory in gold]
    for trajectory, plan, played in zip(gold, plans, play(server, plans, tmp_path, "--threads", "3"), strict=True):
        sample = samples[trajectory["task_id"]]
        assert played["reset"] == {"sample_id": sample["id"], "messages": sample["messages"], "tools": sample["tools"],
                                   "reward_kind": "f1"}
        assert played["tools"] == sorted(t["function"]["name"] for t in sample["tools"])
        expected = assert_scored_as_in_process(sample, plan, played)
        assert expected.reward == 1.0  # the gold calls and answer solve every sub-task


def test_a_poor_episode_scores_what_f1_says_in_process(server, made, tmp_path):
    _, samples, gold = made
    trajectory = max(gold, key=lambda t: len(gold_plan(t)["calls"]))
    plan = gold_plan(trajectory)
    first = plan["calls"][0]
    plan["calls"] = [first, {"name": "no_such_tool", "arguments": {}, "via": "mcp"},
                     {"name": first["name"], "arguments": {"wrong": 1}, "via": "step"}, dict(first, via="step")]
    plan["answer"] = "I do not know."
    [played] = play(server, [plan], tmp_path)
    assert played["observations"][1].startswith("Error: unknown tool 'no_such_tool'")
    assert played["observations"][2].startswith("Error:")
    expected = assert_scored_as_in_process(samples[trajectory["task_id"]], plan, played)
    assert 0 < expected.reward < 1 and expected.failed_calls == 2


def test_reset_picks_samples_in_order_by_index_or_by_id(server, made, tmp_path):
    workdir, samples, _ = made
    order = [s["id"] for s in read_jsonl(workdir / "rl.jsonl")]
    plans = [{"reset": {}, "calls": [], "finish": False}, {"reset": {}, "calls": [], "finish": False},
             {"reset": {"index": 3}, "calls": [], "finish": False},
             {"reset": {"sample_id": "nope"}, "calls": []}, {"reset": {"index": 99}, "calls": []},
             {"reset": {"sample": order[0]}, "calls": []}]
    first, second, third, unknown, out_of_range, misspelt = play(server, plans, tmp_path)
    assert order.index(second["reset"]["sample_id"]) == (order.index(first["reset"]["sample_id"]) + 1) % len(order)
    assert third["reset"]["sample_id"] == order[3]
    assert "no sample 'nope' is served here" in unknown["error"]
    assert "index must be an integer in [0, 9)" in out_of_range["error"]
    assert "unknown reset argument(s): sample" in misspelt["error"]


CRASHY = """
def crash():
    import os
    os._exit(3)

def fine():
    return "all is well"
"""


def crashy_sample() -> dict:
    from astra_core.formats_doc import example

    sample = example("rl_sample")
    sample.update(id="crashy", tools=[{"type": "function", "function": {"name": name, "description": name,
                                                                        "parameters": {"type": "object", "properties": {}}}}
                                      for name in ("crash", "fine")],
                  job=[{"id": 1, "question": "Is all well?", "answer": "all is well", "needs_tool": True}])
    sample["environment"]["code"] = CRASHY
    return sample


def test_sessions_are_concurrent_up_to_the_concurrency_config_and_a_crash_is_that_sessions_error(tmp_path):
    samples = write_jsonl(tmp_path / "crashy.jsonl", [crashy_sample()])
    crashing = {"reset": {}, "calls": [{"name": "crash", "arguments": {}}, {"name": "fine", "arguments": {}}],
                "answer": None}
    healthy = {"reset": {}, "calls": [{"name": "fine", "arguments": {}, "via": "step"}], "answer": None}
    with serve_samples(samples, tmp_path, "--sandbox-pool-size", "2", "--max-sessions", "2") as server:
        crashed, fine = play(server, [crashing, healthy], tmp_path, "--together")  # both sessions open at once
        three_at_once = play(server, [healthy] * 3, tmp_path, "--together")
        again = play(server, [healthy], tmp_path)[0]  # the sessions closed: there is room again
    assert crashed["observations"][0].startswith("Error:") and "exit" in crashed["observations"][0]
    assert crashed["observations"][1].startswith("Error: the environment is no longer running")
    assert crashed["done"] and crashed["reward"] == 0.0
    assert fine["observations"] == ["all is well"] and fine["reward"] == 1.0
    refused = [played for played in three_at_once if "error" in played]
    assert len(refused) == 1 and "Server at capacity: 2/2 sessions active" in refused[0]["error"], three_at_once
    assert [played["reward"] for played in three_at_once if "error" not in played] == [1.0, 1.0]
    assert again["reward"] == 1.0


def test_samples_it_cannot_serve_stop_it_with_file_line_and_field_or_go_to_the_rejects(made, tmp_path):
    import subprocess

    workdir, samples, _ = made
    good = next(iter(samples.values()))
    tau2 = dict(good, id="tau2", environment={"tau2": {"domain": "retail", "task_id": "0"}})
    reserved = json.loads(json.dumps(good))
    reserved["id"] = "reserved"
    reserved["tools"][0]["function"]["name"] = "reset"
    path = write_jsonl(tmp_path / "mixed.jsonl", [good, tau2, reserved])
    stopped = subprocess.run([openenv_bin("astra-qaenv"), "serve-openenv", path, "--port", "0"], capture_output=True,
                             text=True, timeout=120)
    assert stopped.returncode == 1
    assert f"{path}:2: record 'tau2': field environment.code: serve-openenv serves environments with code" in stopped.stderr
    with serve_samples(path, tmp_path, "--skip-bad", "--rejects", str(tmp_path / "rejects.jsonl")) as server:
        [played] = play(server, [{"reset": {}, "calls": [], "answer": None}], tmp_path)
    assert played["reset"]["sample_id"] == good["id"]
    rejects = read_jsonl(tmp_path / "rejects.jsonl")
    assert [(r["id"], r["source"]) for r in rejects] == [("tau2", f"{path}:2"), ("reserved", f"{path}:3")]
    assert "'reset' is reserved by OpenEnv" in rejects[1]["reason"]


def test_without_the_openenv_extra_it_says_what_to_install(cli, made):
    workdir, _, _ = made
    result = cli("serve-openenv", workdir / "rl.jsonl", "--port", "0")
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        "Error: astra-qaenv serve-openenv needs openenv: pip install 'astra-qaenv[openenv]'")


@pytest.mark.slow
def test_trls_grpo_trainer_trains_a_step_against_our_served_environment(made, tmp_path):
    """Someone else's trainer: TRL 1.16's GRPOTrainer with `environment_factory` (its OpenEnv integration), a tiny
    random-init Qwen3 (the real Qwen3 chat template from the trl wheel), one optimizer step, our reward."""
    from template_families import save_tiny_family_model

    workdir, samples, _ = made
    sample = next(s for s in samples.values() if len(s["tools"]) == 2)
    (tmp_path / "sample.json").write_text(json.dumps(sample))
    model = save_tiny_family_model(tmp_path / "tiny-qwen3", "qwen3")
    with serve_samples(workdir / "rl.jsonl", tmp_path) as server:
        done = run_script(TRL_GRPO, server.base_url, model, tmp_path / "sample.json", tmp_path / "trl",
                          tmp_path / "report.jsonl", env={"TRL_EXPERIMENTAL_SILENCE": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 1 and any("loss" in row for row in summary["log"])
    scored = read_jsonl(tmp_path / "report.jsonl")
    assert len(scored) == 2  # one step: 1 prompt x 2 generations, each its own OpenEnv session
    for rollout in scored:
        assert rollout["sample_id"] == sample["id"] and rollout["done"] is True
        components = rollout["metadata"]["reward_components"]
        assert components["kind"] == "f1" and components["n"] == len(sample["job"])
        assert rollout["reward"] == f1_from_counts(components["solved"], components["n"], components["calls"])[0]
        assert rollout["metadata"]["tool_calls"] == rollout["tool_turns"]  # TRL's tool calls are the server's calls
