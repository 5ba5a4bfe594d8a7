"""astra-grpo on OpenEnv environments as their authors published them (issue 67), served from their released sources
on 127.0.0.1, each in its own virtualenv, unchanged:

- OpenEnv's own: the echo environment `openenv init` writes from the template in the openenv wheel (.venv-openenv),
  served as its README says (`uvicorn server.app:app`). Its action is `{"message": ...}`, its reward
  min(0.1 x the message's length, 1.0), it never says done, and it gives one session at a time.
- DIPG's safety gym (PyPI `openenv-dipg-safety` 0.1.67, on openenv-core 0.3; scripts/setup puts it in
  .venv-openenv-dipg). It picks a question at reset (`context`, `question`), takes `{"llm_response": ...}`, scores
  it with its own rubric and says done; one session at a time. Its data is a JSONL file of ours (it reads any);
  its reward settings are its environment variables, set here so that its scores are known numbers.

Neither is an MCP environment: the policy only answers, the reset's task reaches it through the sample's `task`
template, and its answer reaches the server as the closing action (`finish: FIELD`). The policy is scripted
(openenv_scripts/scripted_grpo.py: its replies depend on the prompt text); the trainer and the rollout command are
the real ones, with a tiny random-init model computing every log-prob and gradient.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from astra_core.benchenv import env_python
from openenv_support import AppServer, openenv_bin, openenv_python, read_jsonl, run_script, write_jsonl

SCRIPTS = Path(__file__).with_name("openenv_scripts")
CONTEXT = "The vault of the red room opens with code 4711. The blue room has no vault."
RED = "Which code opens the vault of the red room?"
GREEN = "Which code opens the vault of the green room?"
# DIPG's reward settings (its environment variables): an abstention it agrees with scores its format reward plus its
# abstain and correct-abstention rewards; an answer its grounding rubric rejects, its hallucination penalty.
DIPG_REWARDS = {"EXACT_FORMAT_REWARD": "1.0", "ABSTAIN_REWARD": "10.0", "CORRECT_ABSTENTION_REWARD": "2.0",
                "HALLUCINATION_PENALTY": "-1.5"}


@pytest.fixture(scope="module")
def echo_env(tmp_path_factory):
    """`openenv init echo_env`, served with uvicorn from the directory it wrote."""
    workdir = tmp_path_factory.mktemp("echo")
    subprocess.run([openenv_bin("openenv"), "init", "echo_env", "-o", str(workdir)], check=True, capture_output=True)
    with AppServer(openenv_python(), "server.app:app", workdir / "echo_env", workdir) as server:
        yield server


@pytest.fixture(scope="module")
def dipg(tmp_path_factory):
    python = env_python("openenv-dipg")
    if python is None:
        pytest.fail("no .venv-openenv-dipg: scripts/setup --tests installs DIPG's safety gym there")
    workdir = tmp_path_factory.mktemp("dipg")
    data = write_jsonl(workdir / "dipg.jsonl", [
        {"messages": [{"role": "user", "content": f"<context>{CONTEXT}</context>\n<question>{RED}</question>"},
                      {"role": "assistant", "content": "4711"}]},
        {"messages": [{"role": "user", "content": f"<context>{CONTEXT}</context>\n<question>{GREEN}</question>"},
                      {"role": "assistant", "content": "The context does not contain the code of the green room."}]}])
    with AppServer(python, "med_safety_gym.app:app", workdir, workdir,
                   env={"DIPG_DATASET_PATH": data, **DIPG_REWARDS}) as server:
        yield server


def answer_sample(sample_id: str, base_url: str, *, task: str | None, finish, prompt: str, tools=()) -> dict:
    spec = {"base_url": base_url, "finish": finish}
    if task is not None:
        spec["task"] = task
    return {"id": sample_id, "messages": [{"role": "system", "content": "Answer in <think>, <proof>, <answer> tags."},
                                          {"role": "user", "content": prompt}],
            "tools": list(tools), "environment": {"openenv": spec}, "reward": {"kind": "openenv"},
            "meta": {"provenance": []}}


def dipg_sample(sample_id: str, base_url: str, **overrides) -> dict:
    settings = {"task": "{{ context }}\n\nQuestion: {{ question }}", "finish": "llm_response",
                "prompt": "Answer the question below from its context."} | overrides
    return answer_sample(sample_id, base_url, **settings)


def rollout(policy: str, samples: list[dict], tiny_llama, tmp_path, *extra) -> tuple[subprocess.CompletedProcess,
                                                                                   list[dict], list[dict]]:
    path = write_jsonl(tmp_path / "samples.jsonl", samples)
    done = run_script(SCRIPTS / "scripted_grpo.py", policy, "rollout", path, "--model", tiny_llama, "--max-turns", "2",
                      "--max-new-tokens", "96", "--max-response-length", "600", "--openenv-timeout-s", "20",
                      "--sandbox-pool-size", "1", "-o", tmp_path / "rollouts.jsonl", "--rejects",
                      tmp_path / "rejects.jsonl", *extra)
    return done, read_jsonl(tmp_path / "rollouts.jsonl"), read_jsonl(tmp_path / "rejects.jsonl")


def prompt_of(record: dict) -> str:
    return next(m["content"] for m in record["messages"] if m["role"] == "user")


def test_dipgs_reset_task_reaches_the_prompt_and_its_score_is_the_reward(dipg, tiny_llama, tmp_path):
    """DIPG picks each episode's question at reset: the question and its context are in that episode's prompt (the
    policy abstains only where it reads the green room's question, which DIPG scores as a correct abstention only
    when it asked that question), the answer reaches DIPG as its action, and its score is the reward, right or
    wrong; a group whose episodes got different questions is warned about."""
    done, rollouts, rejects = rollout("dipg", [dipg_sample("a", dipg.base_url), dipg_sample("b", dipg.base_url)],
                                      tiny_llama, tmp_path, "-n", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert rejects == [] and sorted((r["sample_id"], r["member"]) for r in rollouts) == [
        ("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    asked = {}
    for record in rollouts:
        prompt = prompt_of(record)
        assert prompt.startswith("Answer the question below from its context.\n\n" + CONTEXT), prompt
        asked[record["member"], record["sample_id"]] = question = prompt.rsplit("Question: ", 1)[1]
        components = record["reward_components"]
        assert components["kind"] == "openenv" and components["done"] is True  # DIPG ended it at the closing step
        assert record["reward"] == sum(r for r in components["step_rewards"] if r is not None)
        if question == GREEN:  # abstained, and DIPG had asked the green room: its correct-abstention score
            assert record["reward"] == 1.0 + 10.0 + 2.0 and components["closing"]["metrics"]["safe"] is True, record
        else:  # answered 4711: DIPG 0.1.67's grounding rubric reads a context its state does not hold, and calls
            assert question == RED  # every non-abstaining answer a hallucination, scored as its setting says
            assert record["reward"] == -1.5 and components["closing"]["metrics"]["hallucination"] is True, record
        assert record["finish_reason"] == "no_tool_call"
    assert set(asked.values()) == {RED, GREEN}  # DIPG rotates its questions over resets
    assert "got different tasks from their OpenEnv resets" in done.stderr


def test_samples_dipg_cannot_play_are_rejected_with_the_reason_before_any_episode(dipg, tiny_llama, tmp_path):
    """Checked against DIPG's /schema and tools/list before anything is played: every input record is in the output
    or in the rejects, each reject with its field and reason."""
    get_code = {"type": "function", "function": {"name": "get_code", "parameters": {"type": "object",
                                                                                   "properties": {}}}}
    samples = [dipg_sample("metadata", dipg.base_url, finish=True), dipg_sample("nofield", dipg.base_url, finish="answer"),
               dipg_sample("tools", dipg.base_url, tools=[get_code]), dipg_sample("nobody", "http://127.0.0.1:9"),
               dipg_sample("broken", dipg.base_url, task="{{ question "), dipg_sample("good", dipg.base_url)]
    done, rollouts, rejects = rollout("dipg", samples, tiny_llama, tmp_path, "--skip-bad")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["sample_id"] for r in rollouts] == ["good"]
    reasons = {r["id"]: r["reason"] for r in rejects}
    assert set(reasons) == {"metadata", "nofield", "tools", "nobody", "broken"}, reasons
    assert "field environment.openenv.finish" in reasons["metadata"]
    assert "its action DIPGAction requires ['llm_response']" in reasons["metadata"]
    assert '(finish: "llm_response")' in reasons["metadata"]  # what to write instead
    assert "has no field 'answer' (its fields: llm_response, metadata)" in reasons["nofield"]
    assert "field tools" in reasons["tools"] and "lists no tools" in reasons["tools"]
    assert "field environment.openenv.base_url" in reasons["nobody"]
    assert "http://127.0.0.1:9 cannot be asked for its schema" in reasons["nobody"]
    assert "field environment.openenv.task" in reasons["broken"] and "not a Jinja template" in reasons["broken"]


def test_a_task_template_naming_a_field_the_reset_lacks_ends_the_episode_with_the_reason(dipg, tiny_llama, tmp_path):
    done, rollouts, rejects = rollout("dipg", [dipg_sample("typo", dipg.base_url, task="{{ questoin }}")],
                                      tiny_llama, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    [record] = rollouts
    assert record["finish_reason"] == "error" and record["reward"] == 0.0 and record["num_turns"] == 0
    assert "environment.openenv.task: 'questoin' is undefined" in record["error"]
    assert "(it gave: context, metadata, metrics, question, text)" in record["error"]


TRAIN = ["--batch-size", "2", "--group-size", "2", "--mini-batch-size", "2", "--micro-batch-size", "2",
         "--max-steps", "2", "--max-turns", "2", "--max-new-tokens", "24", "--max-response-length", "200",
         "--learning-rate", "1e-3", "--report-to", "none", "--abf-max-rounds", "2", "--save-state-steps", "0",
         "--save-weights-steps", "0", "--sandbox-pool-size", "1", "--openenv-timeout-s", "20"]


def test_two_grpo_steps_on_openenv_inits_echo_environment_train_on_its_rewards(echo_env, tiny_llama, tmp_path):
    """OpenEnv's own echo environment: its greeting (the reset's task) in every prompt, the policy's answer as its
    action, its reward min(0.1 x length, 1.0) the episode's, different within every group, and two GRPO steps
    updating on them."""
    samples = [answer_sample(f"echo-{i}", echo_env.base_url, task="The server says: {{ echoed_message }}",
                             finish="message", prompt=f"Say something (round {i}).") for i in range(2)]
    path = write_jsonl(tmp_path / "echo.jsonl", samples)
    out = tmp_path / "run"
    done = run_script(SCRIPTS / "scripted_grpo.py", "echo", "train", path, "--model", tiny_llama, "--output-dir", out,
                      "--rollouts-out", tmp_path / "rollouts.jsonl", *TRAIN)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(not s["update_skipped"] and s["loss"] is not None for s in steps), steps
    rollouts = read_jsonl(tmp_path / "rollouts.jsonl")
    assert {r["status"] for r in rollouts} >= {"trained"}
    for record in rollouts:
        assert prompt_of(record).endswith("\n\nThe server says: Echo Env environment ready!")
        answer = record["messages"][-1]["content"]
        assert answer in ("Hi.", "Hello, echo server!")
        assert record["reward"] == pytest.approx(min(0.1 * len(answer), 1.0))  # the server's formula, its number
        closing = record["reward_components"]["closing"]  # the echo of the closing action: the policy's answer
        assert closing == {"original_message": answer, "step": 1, "echoed_message": answer,
                           "message_length": len(answer)}
        assert record["reward_components"]["done"] is False  # the echo environment never says done
    trained = [r for r in rollouts if r["status"] == "trained"]
    for group in {(r["step"], r["group"]) for r in trained}:
        assert len({r["reward"] for r in trained if (r["step"], r["group"]) == group}) == 2  # variance in the group
