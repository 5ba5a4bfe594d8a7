import os
import shutil
import tempfile
from pathlib import Path

import grpo_support
import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """One intra-op thread: on a shared 2-core machine more threads only contend."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def _launches_keep_their_files_here():
    """Processes these tests start get a TMPDIR of their own, removed at the end of the session: on every `accelerate
    launch`, torch's elastic agent makes a torchelastic_* log directory in TMPDIR and never removes it. A short path
    directly in the system's temporary directory, not inside pytest's (under pytest-xdist one level deeper, popen-gwN/):
    Ray, which tests later in this process start with this TMPDIR, puts its sockets below it, and a Unix socket's path
    has at most 107 bytes (Ray's plasma_store socket there was 105 bytes long in pytest's directory, 115 under xdist)."""
    saved = os.environ.get("TMPDIR")
    directory = tempfile.mkdtemp(prefix="astra-launches-")
    os.environ["TMPDIR"] = directory
    yield
    if saved is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    """A random-init ~3M-parameter Llama with SmolLM2's tokenizer and chat template, on disk."""
    return grpo_support.save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), family="llama")


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory) -> Path:
    """A random-init Qwen3 whose tokenizer has a Qwen-style tool-aware chat template."""
    return grpo_support.save_tiny_model(tmp_path_factory.mktemp("tiny-qwen"), family="qwen")


@pytest.fixture
def fresh_accelerate_state():
    """Trainers create Accelerators; reset accelerate's process-wide singletons around a test (before too: a
    test elsewhere, e.g. TRL's SFTTrainer with bf16, may have left its state behind)."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    def reset() -> None:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        PartialState._reset_state()

    reset()
    yield
    reset()


@pytest.fixture(scope="session")
def sandbox():
    """A warm, jailed astra-sandbox pool shared by the tests (8 workers, 2 s per call)."""
    with grpo_support.sandbox_pool(8, call_timeout_s=2.0) as pool:
        yield pool


def pytest_sessionfinish(session):
    """A pytest-xdist worker (`make test`) hands the families it covered to the controller (root conftest.py)."""
    import template_families

    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput.setdefault("astra_summaries", {})["template_families:coverage_line"] = template_families.coverage(
            template_families.COVERED)


def pytest_terminal_summary(terminalreporter):
    """How many model families the template matrix covered this run (it discovers them in the installed trl)."""
    import template_families

    line = template_families.coverage_line([template_families.coverage(template_families.COVERED)])
    if line:
        terminalreporter.write_line(line)
