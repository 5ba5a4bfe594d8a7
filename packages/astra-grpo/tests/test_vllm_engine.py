"""The vLLM engine against a stand-in `vllm` module (vllm_support.py; vLLM needs a GPU), its launcher
variables with a real torch.distributed rendezvous, and its start-up checks on real config files.
test_vllm_contract.py ties what the engine calls to the real vllm package."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from astra_grpo.config import ConfigError
from astra_grpo.engines import Generation, Sampling
from astra_grpo.engines import vllm_preflight as preflight
from astra_grpo.engines.vllm import VLLMEngine, launcher_env
from vllm_support import FakeLLM, fake_vllm_module

# Qwen3-14B's config.json (the fields the checks read).
QWEN3_14B = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "max_position_embeddings": 40960,
             "rope_scaling": None, "rope_theta": 1000000, "num_hidden_layers": 40, "num_attention_heads": 40,
             "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 5120, "torch_dtype": "bfloat16"}
PAPER_LENGTH = 25600 + 49152


def model_dir(tmp_path, config=None, weights_bytes=0):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config or QWEN3_14B))
    if weights_bytes:
        with open(tmp_path / "model.safetensors", "wb") as handle:
            handle.truncate(weights_bytes)
    return tmp_path


@pytest.fixture
def fake_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm_module())
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        monkeypatch.setenv(key, "")  # recorded, so that what the engine sets is undone afterwards
        monkeypatch.delenv(key)
    monkeypatch.setenv("MASTER_PORT", "29511")  # as accelerate launch sets for process 1 of 2
    return FakeLLM


def engine(tmp_path, **kwargs):
    options = {"max_model_len": 4096, "gpu_memory_utilization": 0.4, "seed": 3, "placement": (1, 1, 2),
               "check_card": False, **kwargs}
    return VLLMEngine(str(model_dir(tmp_path)), [2], **options)


# -- one training step's memory order ---------------------------------------------------------------

def test_engine_starts_colocated_and_asleep_with_the_checkpoint_weights(fake_vllm, tmp_path):
    engine(tmp_path)
    [llm] = fake_vllm.instances
    assert llm.kwargs["distributed_executor_backend"] == "external_launcher" and llm.kwargs["enable_sleep_mode"]
    assert llm.kwargs["logprobs_mode"] == "processed_logprobs"  # the log-probs vLLM sampled with
    assert llm.kwargs["seed"] == 3 + 1  # each process samples differently
    assert llm.kwargs["max_model_len"] == 4096 and llm.kwargs["gpu_memory_utilization"] == 0.4
    assert llm.events == [("sleep", 1)]  # level 1 keeps the weights for the first rollout


def test_step_wakes_weights_then_cache_and_pushes_into_sleeping_cache(fake_vllm, tmp_path):
    vllm_engine = engine(tmp_path)
    [llm] = fake_vllm.instances
    out = vllm_engine.generate([[5, 6], [7]], [10, 1], Sampling(temperature=0.7))
    assert out == [Generation([6, 7, 2], True, [-0.5, -1.0, -1.5]), Generation([8], False, [-0.5])]
    assert llm.events[1:] == [("wake", ("weights",)), ("wake", ("kv_cache",)), "generate"]

    vllm_engine.sleep()  # before the update: everything freed
    assert llm.events[-1] == ("sleep", 2)
    with pytest.raises(RuntimeError, match="push_weights"):
        vllm_engine.generate([[1]], [2], Sampling())  # the weights are gone

    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 2))
    vllm_engine.push_weights(model)
    loads = [event for event in llm.events if event[0] == "load"]
    assert loads == [("load", (name,)) for name, _ in model.named_parameters()]  # one parameter per call
    for [(_name, tensor)], (_, param) in zip(llm.model.loads, model.named_parameters(), strict=True):
        torch.testing.assert_close(tensor, param.detach())
    start = llm.events.index(("wake", ("weights",)), 2)
    assert llm.events[start - 1:start + 1] == [("sleep", 2), ("wake", ("weights",))]  # only the weights woke
    assert llm.events[-1] == "reset" and "kv_cache" in llm.asleep

    vllm_engine.generate([[1]], [2], Sampling())
    assert llm.events[-2:] == [("wake", ("kv_cache",)), "generate"]  # the cache wakes, weights are awake
    vllm_engine.wake()  # nothing asleep: nothing woken twice
    assert llm.events[-1] == "generate"


def test_sampling_params_ask_for_the_chosen_tokens_log_probs(fake_vllm, tmp_path):
    vllm_engine = engine(tmp_path)
    params = vllm_engine.sampling_params(7, Sampling(temperature=0.6, top_p=0.9, top_k=0))
    assert params.max_tokens == 7 and params.top_k == 0 and params.top_p == 0.9 and params.temperature == 0.6
    assert params.stop_token_ids == [2] and not params.detokenize and not params.skip_special_tokens
    assert params.logprobs == 0  # the sampled token's log-prob only
    assert engine(tmp_path, logprobs=False).sampling_params(7, Sampling()).logprobs is None


def test_without_sleep_mode_nothing_sleeps_or_wakes(fake_vllm, tmp_path):
    vllm_engine = engine(tmp_path, sleep_between_rollouts=False)
    vllm_engine.generate([[1]], [2], Sampling())
    vllm_engine.sleep()
    vllm_engine.push_weights(torch.nn.Linear(1, 1))
    [llm] = fake_vllm.instances
    assert not llm.kwargs["enable_sleep_mode"]
    assert [e for e in llm.events if e[0] in ("sleep", "wake")] == []


def test_engine_says_what_to_install_without_vllm(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(RuntimeError, match="vllm.*extra"):
        engine(tmp_path)


# -- what the external launcher reads --------------------------------------------------------------

def test_one_process_gets_every_launcher_variable():
    environ = {}
    values = launcher_env(0, 0, 1, environ)
    assert values["RANK"] == "0" and values["LOCAL_RANK"] == "0" and values["WORLD_SIZE"] == "1"
    assert values["MASTER_ADDR"] == "localhost" and 1024 <= int(values["MASTER_PORT"]) < 65536
    assert environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_launcher_keeps_the_address_the_processes_agreed_on():
    environ = {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29555", "RANK": "9"}
    assert launcher_env(3, 1, 8, environ) == {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
                                              "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29555"}
    assert launcher_env(0, 0, 1, {"MASTER_PORT": "auto"})["MASTER_PORT"] != "auto"
    with pytest.raises(RuntimeError, match="MASTER_PORT"):
        launcher_env(1, 1, 2, {})  # processes could not agree on a port picked here


def test_launcher_variables_are_enough_for_an_env_rendezvous():
    """What vLLM's external launcher does with them: torch.distributed's env:// initialisation (a fresh
    process, as a single `python -m astra_grpo.cli train` would be)."""
    script = ("import os, torch.distributed as dist\n"
              "from astra_grpo.engines.vllm import launcher_env\n"
              "launcher_env(0, 0, 1)\n"
              "dist.init_process_group('gloo', init_method='env://', rank=int(os.environ['RANK']), "
              "world_size=int(os.environ['WORLD_SIZE']))\n"
              "print(dist.get_rank(), dist.get_world_size())\n"
              "dist.destroy_process_group()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0", "1"]


# -- start-up checks -------------------------------------------------------------------------------

def test_paper_lengths_exceed_qwen3_14b_without_rope_scaling(tmp_path):
    path = model_dir(tmp_path)
    with pytest.raises(ConfigError) as error:
        preflight.check_context(path, PAPER_LENGTH)
    message = str(error.value)
    assert "max_prompt_length + max_response_length" in message and "74,752" in message
    assert "max_position_embeddings 40,960" in message and "no RoPE scaling" in message
    assert '"rope_type": "yarn"' in message and '"max_position_embeddings": 81920' in message
    assert preflight.check_context(path, 40960).limit == 40960


def test_the_suggested_yarn_config_is_accepted_and_transformers_agrees(tmp_path):
    with pytest.raises(ConfigError) as error:
        preflight.check_context(model_dir(tmp_path / "plain"), PAPER_LENGTH)
    suggestion = json.loads("{" + str(error.value).split("e.g. for YaRN: ")[1] + "}")
    patched = {**QWEN3_14B, **suggestion}
    assert patched["rope_parameters"] == {"rope_type": "yarn", "factor": 2.5, "original_max_position_embeddings": 32768,
                                          "rope_theta": 1000000}
    found = preflight.check_context(model_dir(tmp_path / "yarn", patched), PAPER_LENGTH)
    assert found.limit == 81920 and "yarn" in found.explanation

    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = AutoConfig.from_pretrained(tmp_path / "yarn")  # what the trainer loads
    assert config.rope_parameters["rope_theta"] == 1000000 and config.max_position_embeddings == 81920
    _, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    assert attention_factor == pytest.approx(0.1 * math.log(2.5) + 1)  # YaRN's scaling of the factor 2.5


def test_rope_scaling_without_raised_positions_is_refused(tmp_path):
    """vLLM counts a YaRN config's max_position_embeddings as already scaled: the factor alone is not enough."""
    config = {**QWEN3_14B, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    with pytest.raises(ConfigError, match="yarn RoPE scaling"):
        preflight.check_context(model_dir(tmp_path, config), PAPER_LENGTH)
    linear = {**QWEN3_14B, "rope_scaling": {"type": "linear", "factor": 2.0}}
    assert preflight.check_context(model_dir(tmp_path / "linear", linear), PAPER_LENGTH).limit == 81920


def test_tokenizer_length_limits_positions_as_in_vllm(tmp_path):
    path = model_dir(tmp_path)
    (path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 8192}))
    with pytest.raises(ConfigError, match="tokenizer model_max_length 8,192"):
        preflight.check_context(path, 10000)


GIB = 1024 ** 3


def test_memory_check_names_the_field_and_a_value_that_fits():
    qwen = {"kv_per_token": preflight.kv_bytes_per_token(QWEN3_14B), "weights": 29 * GIB}
    assert qwen["kv_per_token"] == 2 * 40 * 8 * 128 * 2
    budget = preflight.check_memory(utilization=0.6, total=80 * GIB, free=55 * GIB, max_model_len=PAPER_LENGTH, **qwen)
    assert budget == math.ceil(0.6 * 80 * GIB)
    with pytest.raises(ConfigError, match=r"vllm_gpu_memory_utilization: 0.35 .* Raise it to at least 0.51"):
        preflight.check_memory(utilization=0.35, total=80 * GIB, free=55 * GIB, max_model_len=PAPER_LENGTH, **qwen)
    with pytest.raises(ConfigError, match=r"only 30.0 of 80.0 GiB are free .* at most 0.37"):
        preflight.check_memory(utilization=0.6, total=80 * GIB, free=30 * GIB, max_model_len=PAPER_LENGTH, **qwen)
    with pytest.raises(ConfigError, match=r"must be in \(0, 1\)"):
        preflight.check_memory(utilization=1.2, total=80 * GIB, free=80 * GIB, max_model_len=10, **qwen)


def test_engine_checks_positions_before_starting_vllm(fake_vllm, tmp_path):
    with pytest.raises(ConfigError, match="74,752"):
        engine(tmp_path, max_model_len=PAPER_LENGTH)
    assert fake_vllm.instances == []


def test_weights_are_the_checkpoint_files(tmp_path):
    assert preflight.weight_bytes(model_dir(tmp_path, weights_bytes=12345)) == 12345


def test_grpo_paper_yaml_states_the_rope_scaling_its_lengths_need(tmp_path):
    """The paper config's lengths fail on Qwen3-14B as shipped and pass with the YaRN entry its comment states."""
    from importlib.resources import files

    from astra_grpo.config import GRPOConfig, load_config

    path = files("astra_grpo") / "configs" / "grpo_paper.yaml"
    config = load_config(GRPOConfig, str(path))
    length = config.max_prompt_length + config.max_response_length
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "needs YaRN" in line) + 1
    stated = " ".join(line.lstrip("# ") for line in lines[start:start + 2])
    with pytest.raises(ConfigError, match="no RoPE scaling"):
        preflight.check_context(model_dir(tmp_path / "shipped"), length)
    patched = {**QWEN3_14B, **json.loads("{" + stated + "}")}
    assert preflight.check_context(model_dir(tmp_path / "yarn", patched), length).limit >= length
    preflight.check_memory(utilization=config.vllm_gpu_memory_utilization, total=80 * GIB, free=55 * GIB,
                           weights=int(29.5 * GIB), kv_per_token=preflight.kv_bytes_per_token(QWEN3_14B),
                           max_model_len=length)  # fits an 80 GB card beside ~25 GB of sharded trainer


@pytest.mark.slow
def test_zero3_push_gathers_one_parameter_at_a_time(tmp_path):
    """2 CPU processes under DeepSpeed ZeRO-3: every parameter reaches vLLM whole, while no other parameter is
    gathered, and all are partitioned again afterwards. Slow: DeepSpeed compiles an op on first use."""
    from test_data_parallel import launch_worker

    launch_worker("cpu_2proc_zero3.yaml", str(tmp_path), worker="vllm_zero3_worker.py")
    for rank in (0, 1):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        assert result["processes"] == 2 and result["env"] == {"RANK": str(rank), "WORLD_SIZE": "2"}
        assert [load["name"] for load in result["loads"]] == list(result["full"])
        for load in result["loads"]:
            torch.testing.assert_close(load["tensor"], result["full"][load["name"]])
            assert load["gathered"] == 1  # only the parameter being loaded
        assert result["partitioned_after"]
