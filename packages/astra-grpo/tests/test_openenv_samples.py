"""rl_samples that name an OpenEnv server, in the workspace's own environment (where OpenEnv cannot be installed:
mcp 1 vs 2): what is checked before anything runs, and the missing extra said in one line before a model loads."""

from __future__ import annotations

import json

import pytest
from astra_core.schema import RecordError
from astra_grpo.data import check_rl_sample, load_records
from click.testing import CliRunner
from grpo_support import rl_sample


def openenv_sample(**reward) -> dict:
    sample = rl_sample("remote")
    sample["environment"] = {"openenv": {"base_url": "http://127.0.0.1:8000", "reset": {"sample_id": "x"}}}
    sample["reward"] = reward or {"kind": "openenv"}
    return sample


def test_an_openenv_sample_is_playable_with_its_environments_reward_or_ours():
    check_rl_sample(openenv_sample())
    check_rl_sample(openenv_sample(kind="f1"))  # ours, from the conversation


@pytest.mark.parametrize("sample, override, field, says", [
    (openenv_sample(kind="state", expected_state={}), "sample", "reward.kind", "OpenEnv server does not give"),
    (rl_sample("local"), "openenv", "reward.kind", "an OpenEnv environment's own"),
    ({**openenv_sample(), "tools": []}, "sample", "environment.openenv.finish", "only through finish"),
])
def test_a_reward_the_environment_cannot_give_is_refused_naming_the_field(sample, override, field, says):
    with pytest.raises(RecordError) as caught:
        check_rl_sample(sample, override)
    assert caught.value.field == field and says in caught.value.message


def test_a_sample_without_tools_that_answers_through_finish_is_playable():
    sample = {**openenv_sample(), "tools": []}
    sample["environment"]["openenv"].update(finish="llm_response", task="{{ context }} {{ question }}")
    check_rl_sample(sample)


@pytest.mark.parametrize("finish", ["", 3, ["llm_response"]])
def test_a_finish_that_is_neither_a_flag_nor_a_field_name_is_malformed(tmp_path, finish):
    sample = openenv_sample()
    sample["environment"]["openenv"]["finish"] = finish
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps(sample) + "\n")
    with pytest.raises(RecordError) as caught:
        load_records([str(path)], "rl_sample")
    assert f"{path}:1" in str(caught.value) and "environment.openenv.finish" in str(caught.value)


def test_a_base_url_that_is_no_url_is_malformed_naming_file_line_and_field(tmp_path):
    sample = openenv_sample()
    sample["environment"]["openenv"]["base_url"] = "127.0.0.1:8000"
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps(sample) + "\n")
    with pytest.raises(RecordError) as caught:
        load_records([str(path)], "rl_sample")
    assert f"{path}:1" in str(caught.value) and "environment.openenv.base_url" in str(caught.value)


def test_without_the_extra_train_and_rollout_say_what_to_install_before_a_model_loads(tmp_path):
    from astra_grpo.cli import main

    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps(openenv_sample()) + "\n")
    missing = tmp_path / "no-model-here"
    train = CliRunner().invoke(main, ["train", str(samples), "--model", str(missing), "--output-dir",
                                      str(tmp_path / "out"), "--report-to", "none"])
    assert train.exit_code == 1
    assert train.output.strip().splitlines()[-1] == ("Error: astra-grpo train (samples with environment.openenv) needs "
                                                     "openenv: pip install 'astra-grpo[openenv]'")
    rollout = CliRunner().invoke(main, ["rollout", str(samples), "--model", str(missing), "-o", str(tmp_path / "r.jsonl")])
    assert rollout.exit_code == 3
    assert ("astra-grpo rollout (samples with environment.openenv) needs openenv: pip install 'astra-grpo[openenv]'"
            in rollout.output)
    assert "no-model-here" not in rollout.output  # it stopped before loading the policy
