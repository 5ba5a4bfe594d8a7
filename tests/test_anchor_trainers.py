"""The anchors' trainers read our records as they are: every kind loads with `datasets`, astra-toolgraph
trajectories train in TRL's SFTTrainer (rendered exactly as the chat template renders the record), and RL
samples export to the parquet layout of verl's multi-turn tool agent loop (read back field by field)."""

from __future__ import annotations

import copy
import json
import math

import datasets
import pytest
from astra_core.formats_doc import example
from astra_core.records import KINDS
from click.testing import CliRunner

datasets.disable_progress_bars()


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def load(path, cache):
    return datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(cache))


def varied_trajectories() -> list[dict]:
    """The documented trajectory and one whose tools and calls differ in shape (enum of ints, a nested
    object parameter, two parallel calls): rows that a columnar loader must not unify into one shape."""
    plain = example("trajectory")
    varied = copy.deepcopy(plain)
    varied["id"] = "traj-varied"
    varied["tools"].append({"type": "function", "function": {
        "name": "book", "description": "Book a table.",
        "parameters": {"type": "object", "required": ["size"], "properties": {
            "size": {"type": "integer", "enum": [2, 4]},
            "when": {"type": "object", "properties": {"day": {"type": "string"}}}}}}})
    varied["messages"][2]["tool_calls"].append(
        {"id": "call_2", "type": "function", "function": {"name": "book", "arguments": "{\"size\": 2}"}})
    varied["messages"].insert(4, {"role": "tool", "tool_call_id": "call_2", "content": "booked"})
    return [plain, varied]


@pytest.mark.parametrize("kind", KINDS)
def test_every_record_kind_loads_with_datasets(kind, tmp_path):
    first = example(kind)
    second = copy.deepcopy(first)
    second["id"] = f"{first['id']}-2"
    second["meta"] = {}
    rows = load(write_jsonl(tmp_path / f"{kind}.jsonl", [first, second]), tmp_path / "cache")
    assert rows["id"] == [first["id"], second["id"]]


# TRL's own SFTConfig default sets `gradient_checkpointing`, which transformers 5 renamed: not ours to change.
@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")
def test_toolgraph_trajectories_train_one_step_in_trl_sft_trainer(tmp_path):
    from template_families import save_tiny_family_model
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    records = varied_trajectories()
    model = save_tiny_family_model(tmp_path / "model", "qwen3")  # the real qwen3.jinja on a tiny tokenizer
    rows = load(write_jsonl(tmp_path / "trajectories.jsonl", records), tmp_path / "cache")
    args = SFTConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, report_to="none",
                     use_cpu=True, save_strategy="no", logging_steps=1)
    try:
        trainer = SFTTrainer(model=str(model), train_dataset=rows, args=args)
        assert math.isfinite(trainer.train().training_loss)
    finally:  # the trainer's Accelerator (bf16 on CPU) is process-wide state: leave none for other tests
        from accelerate.state import AcceleratorState, GradientState, PartialState

        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        PartialState._reset_state()

    tokenizer = AutoTokenizer.from_pretrained(model)
    for record, tokenized in zip(records, trainer.train_dataset, strict=True):
        expected = tokenizer.apply_chat_template(record["messages"], tools=record["tools"], tokenize=True,
                                                 return_dict=True)["input_ids"]
        assert tokenized["input_ids"] == expected, record["id"]  # what TRL trained on is the record itself


def test_rl_samples_export_to_verls_tool_agent_parquet(tmp_path):
    from astra_core.cli import main

    plain = example("rl_sample")
    interactive = {**copy.deepcopy(plain), "id": "rl-interactive", "user": {"instruction": "Buy two breads."},
                   "reward": {"kind": "state", "expected_state": {"cart": {"bread": 2}}}, "job": []}
    samples = write_jsonl(tmp_path / "rl.jsonl", [plain, interactive])
    result = CliRunner().invoke(main, ["to-verl", str(samples), "-o", str(tmp_path / "train.parquet"),
                                       "--data-source", "astra/qa"])
    assert result.exit_code == 0, result.output
    rows = datasets.load_dataset("parquet", data_files=str(tmp_path / "train.parquet"), split="train",
                                 cache_dir=str(tmp_path / "cache"))
    for index, (sample, row) in enumerate(zip([plain, interactive], rows, strict=True)):
        assert row["data_source"] == "astra/qa" and row["agent_name"] == "tool_agent" and row["ability"] == "tool_use"
        assert row["prompt"] == [{"role": m["role"], "content": m["content"]} for m in sample["messages"]]
        assert row["reward_model"]["style"] == "rule"
        assert json.loads(row["reward_model"]["ground_truth"]) == {"reward": sample["reward"], "job": sample["job"]}
        extra = row["extra_info"]
        assert (extra["split"], extra["index"], extra["sample_id"]) == ("train", index, sample["id"])
        assert json.loads(extra["tools"]) == sample["tools"]
        assert json.loads(extra["environment"]) == sample["environment"]
        assert extra["distractors"] == sample["distractors"]
        assert extra["need_tools_kwargs"] is True
        for tool in sample["tools"]:
            assert extra["tools_kwargs"][tool["function"]["name"]]["create_kwargs"] == {"sample_id": sample["id"]}
    assert rows[0]["extra_info"]["interaction_kwargs"] is None
    assert json.loads(rows[1]["extra_info"]["interaction_kwargs"]["user"]) == interactive["user"]


def test_parquet_output_refuses_resume(tmp_path):
    from astra_core.cli import main

    samples = write_jsonl(tmp_path / "rl.jsonl", [example("rl_sample")])
    result = CliRunner().invoke(main, ["to-verl", str(samples), "-o", str(tmp_path / "t.parquet"), "--resume"])
    assert result.exit_code == 1 and "parquet" in result.output
