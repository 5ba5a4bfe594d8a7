"""astra-grpo on OpenEnv environments: `train` and `rollout` play samples whose environment is an OpenEnv server.

The servers are real and on 127.0.0.1: an environment written in the test with OpenEnv's `MCPEnvironment`
(openenv_scripts/vault_env.py, OpenEnv's own HTTPEnvServer under uvicorn) and ours (`astra-qaenv serve-openenv`).
The trainer is the real command with a tiny random-init model; only generation is scripted (its replies are the
policy's text, see openenv_scripts/scripted_grpo.py). Everything OpenEnv runs in .venv-openenv (it cannot share the
workspace's .venv: mcp 1 vs 2), as subprocesses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from astra_reward import f1_reward
from openenv_support import (
    Server,
    openenv_python,
    qaenv_samples,
    read_jsonl,
    run_script,
    serve_samples,
    write_jsonl,
)

SCRIPTS = Path(__file__).with_name("openenv_scripts")
TOOLS = [{"type": "function", "function": {"name": "get_code", "description": "The vault code of a room.",
                                           "parameters": {"type": "object", "properties": {"room": {"type": "string"}},
                                                          "required": ["room"]}}},
         {"type": "function", "function": {"name": "open_vault", "description": "Try a code on the vault.",
                                           "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                                                          "required": ["code"]}}}]


def vault_sample(sample_id: str, base_url: str, room: str, ask: str = "") -> dict:
    return {"id": sample_id, "messages": [{"role": "system", "content": "Open vaults with the tools."},
                                          {"role": "user", "content": f"Open the vault of the {room} room.{ask}"}],
            "tools": TOOLS, "environment": {"openenv": {"base_url": base_url, "reset": {"room": room}}},
            "reward": {"kind": "openenv"}, "meta": {"provenance": []}}


@pytest.fixture
def vault(tmp_path):
    with Server([openenv_python(), str(SCRIPTS / "vault_env.py")], tmp_path) as server:
        yield server


def astra_grpo(policy: str, *args, env: dict | None = None):
    done = run_script(SCRIPTS / "scripted_grpo.py", policy, *args, env=env)
    return done


TRAIN = ["--batch-size", "2", "--group-size", "2", "--mini-batch-size", "2", "--micro-batch-size", "2",
         "--max-steps", "2", "--max-turns", "3", "--max-new-tokens", "48", "--max-response-length", "400",
         "--learning-rate", "1e-3", "--report-to", "none", "--abf-max-rounds", "2", "--save-state-steps", "0",
         "--save-weights-steps", "0"]


def test_two_grpo_steps_against_an_openenv_environment_it_did_not_make(vault, tiny_llama, tmp_path):
    samples = write_jsonl(tmp_path / "vault.jsonl", [vault_sample("red", vault.base_url, "red"),
                                                     vault_sample("blue", vault.base_url, "blue")])
    out = tmp_path / "run"
    done = astra_grpo("vault", "train", samples, "--model", tiny_llama, "--output-dir", out,
                      "--rollouts-out", tmp_path / "rollouts.jsonl", *TRAIN)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(not s["update_skipped"] and s["loss"] is not None for s in steps), steps
    assert all(s["rollout/finish_env_done"] == 1.0 for s in steps)  # the environment ended every episode
    rollouts = read_jsonl(tmp_path / "rollouts.jsonl")
    assert {r["sample_id"] for r in rollouts} == {"red", "blue"}
    opened = [r for r in rollouts if r["reward"] == 1.0]
    missed = [r for r in rollouts if r["reward"] == 0.0]
    assert opened and missed and len(opened) + len(missed) == len(rollouts)
    for record in rollouts:
        assert record["finish_reason"] == "env_done"  # open_vault ended every episode: the environment said done
        assert record["reward_components"]["kind"] == "openenv" and record["reward_components"]["done"] is True
        observations = [m["content"] for m in record["messages"] if m["role"] == "tool"]
        assert observations[-1] == ("The vault opens." if record["reward"] == 1.0 else "Wrong code.")
    red_codes = [m["content"] for r in rollouts if r["sample_id"] == "red" for m in r["messages"] if m["role"] == "tool"]
    assert "The code of the red room is 4711." in red_codes  # the environment's tools answered, in its session
    assert (out / "final" / "model.safetensors").exists()


def test_a_server_killed_mid_episode_loses_no_record(vault, tiny_llama, tmp_path):
    """One episode kills the server; every episode of every sample still comes out as a record, those the dead server
    broke with the reason, and the run ends normally. A later batch's sample whose policy calls no tool still ends
    `error` (its session is opened before the first turn, and its server is gone), not `no_tool_call` with a reward
    nobody gave; a sample whose server was never there is rejected with the reason before anything is played."""
    samples = [vault_sample("plug", vault.base_url, "red", " Pull the plug."), vault_sample("red", vault.base_url, "red"),
               vault_sample("quiet", vault.base_url, "red", " Say nothing."),
               vault_sample("nobody", "http://127.0.0.1:9", "red")]
    path = write_jsonl(tmp_path / "samples.jsonl", samples)
    done = astra_grpo("plug", "rollout", path, "--model", tiny_llama, "-n", "2", "--batch", "2", "--max-turns", "3",
                      "--max-new-tokens", "48", "--max-response-length", "400", "--openenv-timeout-s", "10",
                      "-o", tmp_path / "rollouts.jsonl", "--rejects", tmp_path / "rejects.jsonl", "--skip-bad")
    assert done.returncode == 0, done.stderr[-3000:]
    assert vault.process.wait(timeout=10) == -9  # the plug was pulled
    rollouts = read_jsonl(tmp_path / "rollouts.jsonl")
    [rejected] = read_jsonl(tmp_path / "rejects.jsonl")
    assert rejected["id"] == "nobody" and "environment.openenv.base_url" in rejected["reason"]
    assert "OpenEnv server http://127.0.0.1:9 cannot be asked for its schema" in rejected["reason"]
    assert sorted((r["sample_id"], r["member"]) for r in rollouts) == sorted(
        (s["id"], m) for s in samples[:3] for m in range(2))
    by_sample = {s["id"]: [r for r in rollouts if r["sample_id"] == s["id"]] for s in samples}
    for record in by_sample["plug"] + by_sample["quiet"]:
        assert record["finish_reason"] == "error" and record["reward"] == 0.0
        assert record["error"].startswith("OpenEnvError: OpenEnv server http://127.0.0.1:"), record["error"]
    assert all("reset" in r["error"] and r["num_turns"] == 0 for r in by_sample["quiet"])
    for record in by_sample["red"]:  # played beside the plug: done before it, or broken by it with the reason
        assert record["finish_reason"] == "env_done" or record["error"].startswith("OpenEnvError"), record


SUBMIT = {"type": "function", "function": {"name": "submit_code", "description": "Submit the vault code.",
                                          "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                                                         "required": ["code"]}}}


def test_a_plain_observation_that_ends_the_episode_keeps_the_servers_reward(vault, tiny_llama, tmp_path):
    """finqa's shape (issue 67): a tool answered by a plain `Observation(done=True, reward=...)`, which OpenEnv's
    client returns as a GenericMCPObservation without `result`: the episode ends `env_done` with the server's
    reward, 1.0 for the right code and 0.0, still the server's, for a wrong one."""
    samples = [{**vault_sample(f"{word}", vault.base_url, "red", f" Be {word}."), "tools": [*TOOLS, SUBMIT]}
               for word in ("right", "wrong")]
    path = write_jsonl(tmp_path / "samples.jsonl", samples)
    done = astra_grpo("submit", "rollout", path, "--model", tiny_llama, "--max-turns", "3", "--max-new-tokens", "48",
                      "--max-response-length", "400", "--openenv-timeout-s", "10",
                      "-o", tmp_path / "rollouts.jsonl", "--rejects", tmp_path / "rejects.jsonl")
    assert done.returncode == 0, done.stderr[-3000:]
    by_id = {r["sample_id"]: r for r in read_jsonl(tmp_path / "rollouts.jsonl")}
    assert set(by_id) == {"right", "wrong"} and read_jsonl(tmp_path / "rejects.jsonl") == []
    for sample_id, reward in (("right", 1.0), ("wrong", 0.0)):
        record = by_id[sample_id]
        assert record["finish_reason"] == "env_done", record
        assert record["reward"] == reward
        assert record["reward_components"]["kind"] == "openenv" and record["reward_components"]["done"] is True
        assert record["reward_components"]["step_rewards"][-1] == reward  # the step's reward, from the server
        observations = [m["content"] for m in record["messages"] if m["role"] == "tool"]
        assert json.loads(observations[-1])["verdict"] == sample_id  # the observation's text reached the policy


def test_an_episode_that_calls_no_tool_still_resets_its_server_and_keeps_its_reward(vault, tiny_llama, tmp_path):
    """A policy that calls no tool: the session was opened and reset before the first turn, so the reward of kind
    `openenv` is the server's (its reset's), under the episode's own finish reason."""
    path = write_jsonl(tmp_path / "samples.jsonl", [vault_sample("red", vault.base_url, "red")])
    done = astra_grpo("mute", "rollout", path, "--model", tiny_llama, "--max-turns", "3", "--max-new-tokens", "48",
                      "--max-response-length", "400", "--openenv-timeout-s", "10",
                      "-o", tmp_path / "rollouts.jsonl", "--rejects", tmp_path / "rejects.jsonl")
    assert done.returncode == 0, done.stderr[-3000:]
    [record] = read_jsonl(tmp_path / "rollouts.jsonl")
    assert read_jsonl(tmp_path / "rejects.jsonl") == []
    assert record["finish_reason"] == "no_tool_call", record
    assert record["reward_components"] == {"kind": "openenv", "step_rewards": [0.0], "done": False}  # the reset's


def test_a_tool_the_server_lacks_or_gives_other_parameters_is_rejected_before_any_episode(vault, tiny_llama,
                                                                                          tmp_path):
    """The samples' tools against the server's tools/list, before anything is played: a tool it does not list, a
    parameter it does not take, a required set or a type that differs, each a reject naming the tool's field; the
    sample whose tools agree is played. A run without --skip-bad stops at the first, naming file, line and field."""
    def with_tools(sample_id: str, tools: list[dict]) -> dict:
        return {**vault_sample(sample_id, vault.base_url, "red"), "tools": tools}

    code, vault_tool = TOOLS
    renamed = {"type": "function", "function": {**code["function"], "name": "get_map"}}
    extra = {"type": "function", "function": {**code["function"], "parameters": {
        "type": "object", "properties": {"room": {"type": "string"}, "floor": {"type": "integer"}}, "required": ["room"]}}}
    optional = {"type": "function", "function": {**code["function"], "parameters": {
        "type": "object", "properties": {"room": {"type": "string"}}}}}
    typed = {"type": "function", "function": {**code["function"], "parameters": {
        "type": "object", "properties": {"room": {"type": "integer"}}, "required": ["room"]}}}
    samples = [with_tools("missing", [renamed, vault_tool]), with_tools("extra", [vault_tool, extra]),
               with_tools("optional", [optional]), with_tools("typed", [typed]), with_tools("agrees", TOOLS)]
    path = write_jsonl(tmp_path / "samples.jsonl", samples)
    done = astra_grpo("mute", "rollout", path, "--model", tiny_llama, "--max-turns", "2", "--max-new-tokens", "24",
                      "--max-response-length", "200", "-o", tmp_path / "rollouts.jsonl",
                      "--rejects", tmp_path / "rejects.jsonl", "--skip-bad")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["sample_id"] for r in read_jsonl(tmp_path / "rollouts.jsonl")] == ["agrees"]
    reasons = {r["id"]: r["reason"] for r in read_jsonl(tmp_path / "rejects.jsonl")}
    assert "field tools[0].function.name" in reasons["missing"]
    assert f"OpenEnv server {vault.base_url} has no tool 'get_map' (it lists: get_code, open_vault" in reasons["missing"]
    assert "field tools[1].function.parameters" in reasons["extra"]
    assert "parameters ['floor', 'room'] here, ['room'] on the server" in reasons["extra"]
    assert "required [] here, ['room'] on the server" in reasons["optional"]
    assert "parameter 'room' is integer here, string on the server" in reasons["typed"]
    stopped = astra_grpo("mute", "rollout", path, "--model", tiny_llama, "-o", tmp_path / "again.jsonl")
    assert stopped.returncode != 0
    assert f"{path}:1: record 'missing': field tools[0].function.name" in stopped.stderr


def test_our_served_environment_played_by_astra_grpo_scores_ours(tiny_llama, tmp_path):
    """qaenv samples served by `astra-qaenv serve-openenv`, played by `astra-grpo rollout` through OpenEnv with the
    environment's reward (a closing step with the final answer): the server's F1 is the F1 of the rollout's own
    conversation computed here."""
    samples, gold = qaenv_samples(tmp_path, every=40)
    with serve_samples(tmp_path / "rl.jsonl", tmp_path) as server:
        remote = [{**sample, "environment": {"openenv": {"base_url": server.base_url, "finish": True,
                                                         "reset": {"sample_id": sample["id"]}}},
                   "reward": {"kind": "openenv"}} for sample in samples]
        path = write_jsonl(tmp_path / "remote.jsonl", remote)
        # episodes at once (the sandbox pool's size) within the server's sessions (its default: 4)
        done = astra_grpo("gold", "rollout", path, "--model", tiny_llama, "--sandbox-pool-size", "4", "--max-turns", "6",
                          "--max-new-tokens", "200", "--max-response-length", "2000", "-o", tmp_path / "rollouts.jsonl",
                          env={"GOLD": str(tmp_path / "gold.jsonl")})
    assert done.returncode == 0, done.stderr[-3000:]
    by_id = {sample["id"]: sample for sample in samples}
    rollouts = read_jsonl(tmp_path / "rollouts.jsonl")
    assert len(rollouts) == len(samples) >= 4
    for record in rollouts:
        closing = record["reward_components"]["closing"]
        ours = f1_reward(by_id[record["sample_id"]]["job"], record["messages"])
        assert record["reward"] == ours.reward == 1.0  # the gold calls and answer, scored by the server
        assert closing["reward_components"] == json.loads(json.dumps(ours.components()))
        assert record["finish_reason"] == "no_tool_call"
