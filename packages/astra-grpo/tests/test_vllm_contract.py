"""The vLLM engine held to the real vllm package, without a GPU: the release uv.lock pins and the vllm extra's floor.

vllm cannot be imported here (it needs CUDA torch, and it conflicts with the dev group), so
scripts/setup installs the pinned wheel, hash-checked and without dependencies, into `.venv-vllm` (the
floor's into `.venv-vllm/floor`), and this test reads their Python sources with `ast`: nothing is imported,
so the check cannot fail for a missing CUDA library and passes or fails on the names alone. What the engine calls is read from the
engine's own source (engines/vllm.py), so a new call there is checked too. A vLLM upgrade that
renames an `LLM` argument, a `SamplingParams` field, `sleep`/`wake_up`/their tags, the weight-loading
path or the log-prob output shape fails here.
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import astra_grpo.engines.vllm as engine_module
import pytest

REPO = Path(__file__).resolve().parents[3]
ENGINE = ast.parse(Path(engine_module.__file__).read_text())


# -- reading an installed vllm ----------------------------------------------------------------------

def pinned_version() -> str:
    [vllm] = [p for p in tomllib.loads((REPO / "uv.lock").read_text())["package"] if p["name"] == "vllm"]
    return vllm["version"]


def floor_version() -> str:
    """The lowest vllm astra-grpo's `vllm` extra accepts: a user's existing install may be that old."""
    extra = tomllib.loads((REPO / "packages/astra-grpo/pyproject.toml").read_text())["project"]["optional-dependencies"]
    [requirement] = extra["vllm"]
    return requirement.removeprefix("vllm>=")


@dataclass(frozen=True)
class Vllm:
    """One installed vllm release's Python sources, read with `ast` (never imported)."""

    site_packages: Path

    def module(self, name: str) -> ast.Module:
        return _parsed(self.site_packages / (name.replace(".", "/") + ".py"))

    def find_class(self, module_name: str, name: str) -> ast.ClassDef:
        for node in ast.walk(self.module(module_name)):
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        raise AssertionError(f"{module_name} has no class {name}")

    def assignment(self, module_name: str, name: str) -> str:
        for node in self.module(module_name).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
                return ast.unparse(node.value)
        raise AssertionError(f"{module_name} does not define {name}")

    def literal_values(self, module_name: str, name: str) -> set[str]:
        """The strings of a `Name = Literal["a", "b"]` alias."""
        tree = ast.parse(self.assignment(module_name, name))
        return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}

    def source_of(self, module_name: str, class_name: str, method_name: str) -> str:
        return ast.unparse(method(self.find_class(module_name, class_name), method_name))


@cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@pytest.fixture(scope="module", params=["pinned", "floor"])
def vllm(request) -> Vllm:
    """The release uv.lock pins (what a fresh install gets) and the extra's floor (the oldest we accept)."""
    found = sorted(REPO.glob(".venv-vllm/lib/python3*/site-packages")) if request.param == "pinned" else \
        [REPO / ".venv-vllm/floor"]
    if not found or not (found[0] / "vllm").is_dir():
        pytest.fail("vllm's sources are not installed: run scripts/setup (it fills .venv-vllm)")
    return Vllm(found[0])


def method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"{cls.name} has no method {name}")


def parameters(function: ast.FunctionDef) -> set[str]:
    arguments = function.args
    return {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}


def fields(cls: ast.ClassDef) -> dict[str, str]:
    """Annotated class attributes (dataclass / msgspec fields) -> their annotation."""
    return {node.target.id: ast.unparse(node.annotation) for node in cls.body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


# -- reading the engine ----------------------------------------------------------------------------

def engine_constant(name: str):
    return ast.literal_eval(assignment_in(ENGINE, name))


def assignment_in(tree: ast.Module, name: str):
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and any(getattr(e, "id", None) == name for e in target.elts):
                    index = [e.id for e in target.elts].index(name)
                    return node.value.elts[index]
                if getattr(target, "id", None) == name:
                    return node.value
    raise AssertionError(f"engines/vllm.py does not define {name}")


def engine_calls(callee: str) -> list[ast.Call]:
    """Calls in the engine whose function is spelled `callee` (e.g. `vllm.LLM`, `self.llm.sleep`)."""
    return [node for node in ast.walk(ENGINE) if isinstance(node, ast.Call) and ast.unparse(node.func) == callee]


def keywords(calls: list[ast.Call]) -> dict[str, list[ast.expr]]:
    out: dict[str, list[ast.expr]] = {}
    for call in calls:
        for keyword in call.keywords:
            out.setdefault(keyword.arg, []).append(keyword.value)
    return out


def llm_methods_called() -> set[str]:
    return {ast.unparse(node.func).removeprefix("self.llm.") for node in ast.walk(ENGINE)
            if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("self.llm.")}


# -- the contract ----------------------------------------------------------------------------------

def test_the_installed_vllms_are_the_pinned_one_and_the_floor():
    pinned = [p.name for p in sorted(REPO.glob(".venv-vllm/lib/python3*/site-packages/vllm-*.dist-info"))]
    floor = [p.name for p in (REPO / ".venv-vllm/floor").glob("vllm-*.dist-info")]
    assert pinned == [f"vllm-{pinned_version()}.dist-info"], "re-run scripts/setup after changing uv.lock"
    assert floor == [f"vllm-{floor_version()}.dist-info"], "re-run scripts/setup after changing the vllm extra"


def test_llm_accepts_every_argument_the_engine_passes(vllm):
    llm = vllm.find_class("vllm.entrypoints.llm", "LLM")
    init = method(llm, "__init__")
    assert init.args.kwarg is not None and "EngineArgs(" in ast.unparse(init) and "**kwargs" in ast.unparse(init)
    accepted = parameters(init) | set(fields(vllm.find_class("vllm.engine.arg_utils", "EngineArgs")))
    [construction] = engine_calls("vllm.LLM")
    passed = {k.arg for k in construction.keywords}
    assert {"distributed_executor_backend", "enable_sleep_mode", "gpu_memory_utilization", "max_model_len",
            "logprobs_mode", "seed", "model"} <= passed
    assert passed <= accepted, f"vllm.LLM no longer takes {sorted(passed - accepted)}"

    values = {k.arg: k.value for k in construction.keywords}
    backend = ast.literal_eval(values["distributed_executor_backend"])
    assert backend in vllm.literal_values("vllm.config.parallel", "DistributedExecutorBackend")
    assert f"'{backend}'" in vllm.source_of("vllm.v1.executor.abstract", "Executor", "get_class")
    mode = ast.literal_eval(values["logprobs_mode"])
    assert mode in vllm.literal_values("vllm.config.model", "LogprobsMode")


def test_sampling_params_has_every_field_the_engine_sets(vllm):
    available = fields(vllm.find_class("vllm.sampling_params", "SamplingParams"))
    passed = set(keywords(engine_calls("self._vllm.SamplingParams")))
    assert {"max_tokens", "temperature", "top_p", "top_k", "stop_token_ids", "logprobs", "detokenize"} <= passed
    assert passed <= set(available), f"SamplingParams lost {sorted(passed - set(available))}"
    assert available["logprobs"] == "int | None" and available["top_k"] == "int"
    # top_k 0 is "off" (the engine maps Sampling.top_k=0 to it): the default and accepted by validation
    assert "top_k: int = 0" in ast.unparse(vllm.find_class("vllm.sampling_params", "SamplingParams"))


def test_llm_methods_take_the_arguments_the_engine_gives(vllm):
    llm = vllm.find_class("vllm.entrypoints.llm", "LLM")
    called = llm_methods_called()
    assert called == {"generate", "sleep", "wake_up", "apply_model", "reset_prefix_cache"}
    for name in called:
        passed = set(keywords(engine_calls(f"self.llm.{name}")))
        assert passed <= parameters(method(llm, name)), f"LLM.{name} no longer takes {sorted(passed)}"
    assert {"prompts", "sampling_params", "use_tqdm"} <= parameters(method(llm, "generate"))
    assert "prompt_token_ids" in fields(vllm.find_class("vllm.inputs.llm", "TokensPrompt"))  # prompts as token ids


def test_sleep_levels_and_wake_tags_are_vllms(vllm):
    tags = {engine_constant("WEIGHTS"), engine_constant("KV_CACHE")}
    assert tags == sleep_tags(vllm)
    for woken in keywords(engine_calls("self.llm.wake_up"))["tags"]:
        assert ast.unparse(woken) == "[tag]"  # one tag per call, each from the engine's order
    order = [ast.unparse(e) for e in wake_order()]
    assert order == ["WEIGHTS", "KV_CACHE"]  # weights first, then the KV cache

    levels = {ast.literal_eval(k.value) for call in engine_calls("self._sleep") for k in call.keywords}
    assert levels == {1, 2}
    sleep_doc = ast.get_docstring(method(vllm.find_class("vllm.entrypoints.llm", "LLM"), "sleep"))
    assert "Level 1: Offload model weights to CPU" in sleep_doc and "Level 2: Discard all GPU memory" in sleep_doc
    assert "level == 2" in vllm.source_of("vllm.v1.worker.gpu_worker", "Worker", "sleep")  # buffers kept over level 2
    wake = vllm.source_of("vllm.v1.executor.abstract", "Executor", "wake_up")
    assert "self.sleeping_tags" in wake  # vLLM tracks the tags: a partial wake leaves the rest asleep


def sleep_tags(vllm: Vllm) -> set[str]:
    """The tags Executor.sleep puts to sleep: a SLEEP_TAGS constant in newer releases, a set literal before."""
    sleep = method(vllm.find_class("vllm.v1.executor.abstract", "Executor"), "sleep")
    if "SLEEP_TAGS" in ast.unparse(sleep):
        return set(ast.literal_eval(vllm.assignment("vllm.v1.executor.abstract", "SLEEP_TAGS").removeprefix("frozenset")))
    [tags] = [node.value for node in ast.walk(sleep)
              if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "self.sleeping_tags"]
    return ast.literal_eval(tags)


def wake_order() -> list[ast.expr]:
    """The tags VLLMEngine.wake() wakes, in its order."""
    for node in ast.walk(ENGINE):
        if isinstance(node, ast.FunctionDef) and node.name == "wake":
            [call] = [c for c in ast.walk(node) if isinstance(c, ast.Call) and ast.unparse(c.func) == "self._wake"]
            return call.args[0].elts
    raise AssertionError("the engine has no wake()")


def test_weights_load_into_the_in_process_model(vllm):
    """llm.apply_model(f) -> LLMEngine.collective_rpc("apply_model") -> the worker's f(get_model()), run in this
    process (the external launcher needs VLLM_ENABLE_V1_MULTIPROCESSING=0); get_model() unwraps CUDA graphs;
    the model's load_weights takes (name, tensor) pairs in the HF checkpoint's names."""
    assert "apply_model" in ast.unparse(method(vllm.find_class("vllm.v1.engine.llm_engine", "LLMEngine"), "apply_model"))
    assert "fn(self.get_model())" in vllm.source_of("vllm.v1.worker.worker_base", "WorkerBase", "apply_model")
    assert "self.model_runner.get_model()" in vllm.source_of("vllm.v1.worker.gpu_worker", "Worker", "get_model")
    assert "unwrap()" in vllm.source_of("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "get_model")
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" in ast.unparse(vllm.find_class("vllm.v1.executor.uniproc_executor",
                                                                      "ExecutorWithExternalLauncher"))
    assert "run_method(self.driver_worker" in vllm.source_of("vllm.v1.executor.uniproc_executor", "UniProcExecutor",
                                                        "collective_rpc")
    for module_name, cls in (("qwen3", "Qwen3ForCausalLM"), ("qwen2", "Qwen2ForCausalLM"), ("llama", "LlamaForCausalLM")):
        load = method(vllm.find_class(f"vllm.model_executor.models.{module_name}", cls), "load_weights")
        assert [a.arg for a in load.args.args] == ["self", "weights"]
        assert ast.unparse(load.args.args[1].annotation) == "Iterable[tuple[str, torch.Tensor]]"
    assert any("runner_model.load_weights([(name, param.data)])" in ast.unparse(n) for n in ast.walk(ENGINE)
               if isinstance(n, ast.Call))


def test_log_probs_come_back_one_dict_per_generated_token(vllm):
    assert "outputs" in parameters(method(vllm.find_class("vllm.outputs", "RequestOutput"), "__init__"))
    completion = fields(vllm.find_class("vllm.outputs", "CompletionOutput"))
    assert completion["token_ids"] == "GenericSequence[int]" and completion["logprobs"] == "SampleLogprobs | None"
    assert vllm.assignment("vllm.logprobs", "SampleLogprobs") == "FlatLogprobs | list[LogprobsOnePosition]"
    assert vllm.assignment("vllm.logprobs", "LogprobsOnePosition") == "dict[int, Logprob]"
    assert fields(vllm.find_class("vllm.logprobs", "Logprob"))["logprob"] == "float"
    flat = vllm.find_class("vllm.logprobs", "FlatLogprobs")  # the other form also yields one dict per position
    assert "MutableSequence[LogprobsOnePosition | None]" in [ast.unparse(b) for b in flat.bases]
    reads = {ast.unparse(n) for n in ast.walk(ENGINE) if isinstance(n, ast.Attribute)}
    assert {"completion.token_ids", "completion.logprobs", "out.outputs", "position[token].logprob"} <= reads


def test_the_external_launcher_reads_what_the_engine_sets(vllm):
    arguments = vllm.source_of("vllm.v1.executor.uniproc_executor", "ExecutorWithExternalLauncher", "_distributed_args")
    assert "os.environ['RANK']" in arguments and "os.environ['LOCAL_RANK']" in arguments and "'env://'" in arguments
    launcher = ast.unparse(next(n for n in ENGINE.body if isinstance(n, ast.FunctionDef) and n.name == "launcher_env"))
    for variable in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        assert f"'{variable}'" in launcher
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" in ast.unparse(vllm.module("vllm.envs"))
