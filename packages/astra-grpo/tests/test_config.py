"""Trainer configs: the paper's defaults, bundled files, YAML + flag precedence, and errors that name the field."""

import pytest
import yaml
from astra_grpo.cli import bundled_configs
from astra_grpo.config import ConfigError, GRPOConfig, SFTConfig, load_config


def test_defaults_are_the_papers():
    grpo = GRPOConfig()
    assert (grpo.batch_size, grpo.mini_batch_size, grpo.learning_rate) == (256, 256, 2e-6)
    assert (grpo.kl_coef, grpo.entropy_coef, grpo.loss_average, grpo.abf) == (0.0, 0.0, "token", True)
    assert (grpo.max_turns, grpo.max_prompt_length, grpo.max_response_length) == (32, 25600, 49152)
    assert grpo.reward == "sample" and grpo.lr_scheduler == "constant"
    sft = SFTConfig()
    assert (sft.num_epochs, sft.max_length, sft.batch_size, sft.learning_rate) == (2.0, 20480, 32, 5e-6)
    assert (sft.lr_scheduler, sft.warmup_ratio, sft.layout, sft.max_tokens_per_microbatch) == ("cosine", 0.05, "tree",
                                                                                                None)
    assert (grpo.layout, grpo.tree_scope, grpo.layout_attention) == ("tree", "group", "auto")
    assert sft.keep_last_states == 2


@pytest.mark.parametrize("path", sorted(bundled_configs().glob("*.yaml")), ids=lambda p: p.name)
def test_bundled_trainer_configs_load(path):
    cls = SFTConfig if path.name.startswith("sft") else GRPOConfig
    config = load_config(cls, path)
    assert config.output_dir.startswith("out/")


def test_bundled_accelerate_configs_cover_the_setups():
    names = {p.name for p in (bundled_configs() / "accelerate").glob("*.yaml")}
    assert {"single_gpu.yaml", "multi_gpu.yaml", "deepspeed_zero2.yaml", "deepspeed_zero3.yaml", "multi_node.yaml",
            "cpu_2proc.yaml"} <= names
    zero3 = yaml.safe_load((bundled_configs() / "accelerate" / "deepspeed_zero3.yaml").read_text())
    assert zero3["deepspeed_config"]["zero_stage"] == 3 and zero3["deepspeed_config"]["zero3_save_16bit_model"]


def test_flags_override_the_file_which_overrides_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("batch_size: 8\nmini_batch_size: 4\nlearning_rate: 1.0e-5\nreport_to: [wandb]\nabf: false\n")
    config = load_config(GRPOConfig, path, {"learning_rate": 3e-6, "batch_size": None, "report_to": "tensorboard,wandb"})
    assert (config.batch_size, config.mini_batch_size, config.learning_rate) == (8, 4, 3e-6)
    assert config.report_to == ["tensorboard", "wandb"] and config.abf is False and config.group_size == 8


@pytest.mark.parametrize(("values", "field"), [
    ({"mini_batch_size": 3}, "mini_batch_size"),
    ({"group_size": 1}, "group_size"),
    ({"loss_average": "mean"}, "loss_average"),
    ({"learning_rate": "fast"}, "learning_rate"),
    ({"reward": "bleu"}, "reward"),
    ({"temperature": 0}, "temperature"),
    ({"lr_scheduler": "step"}, "lr_scheduler"),
    ({"engine": "vlm"}, "engine"),
    ({"logging_steps": 0}, "logging_steps"),  # was a modulo by zero when the first step logged
    ({"sandbox_pool_size": 0}, "sandbox_pool_size"),
    ({"adam_beta2": 1.0}, "adam_beta2"),
    ({"top_p": 1.5}, "top_p"),
])
def test_bad_values_name_the_field(values, field):
    with pytest.raises(ConfigError, match=f"field {field}"):
        load_config(GRPOConfig, None, values)


def test_unknown_fields_are_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("batch_sise: 8\n")
    with pytest.raises(ConfigError, match="'batch_sise' for GRPOConfig \\(did you mean 'batch_size'\\?\\)"):
        load_config(GRPOConfig, path)
    path.write_text("learning-rate: 1e-5\n")  # a flag's spelling
    with pytest.raises(ConfigError, match="did you mean 'learning_rate'"):
        load_config(GRPOConfig, path)
    path.write_text("use_wandb: true\n")  # nothing like it: no guess
    with pytest.raises(ConfigError, match="'use_wandb' for GRPOConfig$"):
        load_config(GRPOConfig, path)
    with pytest.raises(ConfigError, match="'packing' for SFTConfig"):  # the old switch: `layout` says it now
        load_config(SFTConfig, None, {"packing": True})
    with pytest.raises(ConfigError, match="layout"):
        load_config(SFTConfig, None, {"layout": "dense"})


def test_accumulation_steps_need_an_even_split():
    config = load_config(GRPOConfig, None, dict(batch_size=4, mini_batch_size=4, group_size=4, micro_batch_size=2))
    assert config.accumulation_steps(1) == 8 and config.accumulation_steps(2) == 4
    with pytest.raises(ConfigError, match="mini_batch_size"):
        config.accumulation_steps(3)
    with pytest.raises(ConfigError, match="micro_batch_size"):
        load_config(GRPOConfig, None, dict(batch_size=2, mini_batch_size=2, group_size=3,
                                           micro_batch_size=4)).accumulation_steps(1)


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
def test_home_in_a_config_file_is_the_home_directory(tmp_path, monkeypatch, cls):
    """`output_dir: ~/runs/x` in a trainer's YAML wrote the run into a directory named `~` in the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = tmp_path / "run.yaml"
    fields = {"model": "~/models/qwen3", "output_dir": "~/runs/x"}
    if cls is GRPOConfig:
        fields |= {"rollouts_out": "~/runs/x/rollouts.jsonl", "tau2_python": "~/tau2/bin/python"}
    path.write_text(yaml.safe_dump(fields))
    config = load_config(cls, str(path))
    assert {name: getattr(config, name) for name in fields} == {
        name: value.replace("~", str(tmp_path / "home"), 1) for name, value in fields.items()}
