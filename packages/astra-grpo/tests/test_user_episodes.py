"""Interactive episodes (AReaL-SEA): samples with a `user` talk to astra-toolgraph's user simulator.
Policy replies are scripted and the user simulator's replies RECORDED (`recorded_llm`, a real HTTP
server); tokens, templates, the jailed environment sessions and the state reward are real."""

import json

import pytest
from astra_core.llm import LLMConfig
from astra_core.testing import closed_port
from astra_core.users import UserSimulator
from astra_grpo.chat import ChatRenderer
from astra_grpo.cli import main
from astra_grpo.rollout import EpisodeRunner, RolloutSettings, rollout_record
from click.testing import CliRunner
from grpo_support import ScriptedEngine, assistant_turns, interactive_sample, load_tokenizer, user_replies

pytestmark = pytest.mark.nsjail

ORDER = '<tool_call>\n{"name": "place_order", "arguments": {"customer_id": "C1", "product_id": "P3", "quantity": 2}}\n</tool_call>'


def test_user_turns_are_observations_the_loss_does_not_see_and_the_state_decides(recorded_llm, sandbox):
    server = recorded_llm(replies=[user_replies])
    tokenizer = load_tokenizer()
    renderer = ChatRenderer(tokenizer)
    turns = ["How many bags?", ORDER, "Your order is placed."]
    engine = ScriptedEngine(tokenizer, lambda prompt: turns[min(assistant_turns(prompt), 2)], renderer.stop_ids[0])
    with UserSimulator(LLMConfig(base_url=server.base_url, max_retries=0)) as user:
        runner = EpisodeRunner(engine, renderer, sandbox,
                               RolloutSettings(max_turns=6, max_new_tokens=64, reward="sample"), user_simulator=user)
        [group] = runner.play([interactive_sample()], group_size=1)
    [episode] = group.episodes
    assert episode.finish_reason == "user_stop" and episode.user_stop == "###STOP###" and episode.user_turns == 2
    assert [m["role"] for m in episode.messages] == ["system", "user", "assistant", "user", "assistant", "tool",
                                                     "assistant", "user"]
    assert episode.reward == 1.0  # the order reached the expected state
    trained = tokenizer.decode([t for t, m in zip(episode.token_ids, episode.loss_mask, strict=True) if m])
    masked = tokenizer.decode([t for t, m in zip(episode.token_ids, episode.loss_mask, strict=True) if not m])
    assert "How many bags?" in trained and "place_order" in trained
    assert "Two bags, I am customer C1." in masked and "Two bags" not in trained
    record = rollout_record(group, episode, command="test")
    assert record["user_turns"] == 2 and record["user_stop"] == "###STOP###"


def test_an_episode_that_never_orders_gets_no_reward(recorded_llm, sandbox):
    server = recorded_llm(replies=["I want coffee.", "###STOP###"])
    tokenizer = load_tokenizer()
    renderer = ChatRenderer(tokenizer)
    engine = ScriptedEngine(tokenizer, lambda prompt: "Sorry, I can't.", renderer.stop_ids[0])
    with UserSimulator(LLMConfig(base_url=server.base_url, max_retries=0)) as user:
        runner = EpisodeRunner(engine, renderer, sandbox, RolloutSettings(max_turns=6, max_new_tokens=32),
                               user_simulator=user)
        [group] = runner.play([interactive_sample()], group_size=1)
    assert group.episodes[0].finish_reason == "user_stop" and group.episodes[0].reward == 0.0
    assert group.episodes[0].reward_components["differences"] > 0


def test_grpo_trains_a_step_with_a_user_simulator(recorded_llm, tiny_llama, tmp_path, fresh_accelerate_state):
    """`astra-grpo train` on interactive samples: a random-init policy writes no tool calls, so every turn
    goes to the (recorded) user simulator; the step completes with the binary state reward."""
    server = recorded_llm(replies=[user_replies])
    samples = tmp_path / "rl.jsonl"
    samples.write_text("".join(json.dumps({**interactive_sample(), "id": f"rl-{i}"}) + "\n" for i in range(2)))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "train", str(samples), "--config", "grpo_tiny_cpu.yaml", "--model", str(tiny_llama), "--max-turns", "3",
        "--max-new-tokens", "8", "--sandbox-pool-size", "4", "--output-dir", str(out), "--max-steps", "1",
        "--group-size", "2", "--micro-batch-size", "2", "--abf-max-rounds", "1", "--report-to", "",
        "--user-base-url", server.base_url, "--user-max-tokens", "16",
        "--rollouts-out", str(tmp_path / "rollouts.jsonl")])
    assert result.exit_code == 0, result.output
    [row] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["step"] == 1
    rollouts = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and all(r["user_turns"] >= 1 for r in rollouts)
    assert all(r["reward"] in (0.0, 1.0) for r in rollouts)
    assert any(m["role"] == "user" and m["content"].startswith("Two bags") for r in rollouts for m in r["messages"])
    assert any(r["messages"] for r in rollouts) and server.requests


def test_a_user_simulator_whose_endpoint_does_not_answer_stops_the_run_not_the_episode(tiny_llama, tmp_path,
                                                                                       fresh_accelerate_state):
    """Episodes that fail for it would all fail the same way: training stops in one line (before, every step
    trained on the groups without a user, or on none, and went on); `rollout` stops instead of writing them."""
    samples = tmp_path / "rl.jsonl"
    samples.write_text("".join(json.dumps({**interactive_sample(), "id": f"rl-{i}"}) + "\n" for i in range(2)))
    nowhere = f"http://127.0.0.1:{closed_port()}/v1"
    trained = CliRunner().invoke(main, [
        "train", str(samples), "--config", "grpo_tiny_cpu.yaml", "--model", str(tiny_llama), "--max-turns", "3",
        "--max-new-tokens", "8", "--sandbox-pool-size", "2", "--output-dir", str(tmp_path / "out"), "--max-steps", "1",
        "--group-size", "2", "--micro-batch-size", "2", "--abf-max-rounds", "1", "--report-to", "",
        "--user-base-url", nowhere, "--user-model", "m", "--user-max-tokens", "16"])
    assert trained.exit_code == 1 and isinstance(trained.exception, SystemExit), trained.output
    assert trained.output.strip().splitlines()[-1].startswith(f"Error: {nowhere}/chat/completions: the endpoint does "
                                                              "not answer")
    assert "--resume continues from the last saved state" in trained.output
    assert not (tmp_path / "out" / "metrics.jsonl").exists() or not (tmp_path / "out" / "metrics.jsonl").read_text()
    played = CliRunner().invoke(main, [
        "rollout", str(samples), "--model", str(tiny_llama), "--max-turns", "3", "--max-new-tokens", "8",
        "--user-base-url", nowhere, "--user-model", "m", "-o", str(tmp_path / "rollouts.jsonl")])
    assert played.exit_code == 1, played.output
    assert "the endpoint does not answer" in played.output.strip().splitlines()[-1]
    assert not (tmp_path / "rollouts.jsonl").read_text()
