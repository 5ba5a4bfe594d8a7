"""scripts/launch.sh (behind train_sft.sh and train_grpo.sh): the `accelerate launch` command it builds. Its Python
is a stand-in that prints the arguments it was given (ASTRA_GRPO_PYTHON); the demo runs the script for real."""

import os
import subprocess
from pathlib import Path

import pytest

LAUNCH = Path(__file__).resolve().parents[1] / "scripts" / "launch.sh"


@pytest.fixture
def launched(tmp_path):
    echo = tmp_path / "python"
    echo.write_text('#!/bin/sh\nfor argument in "$@"; do printf "%s\\n" "$argument"; done\n')
    echo.chmod(0o755)
    accelerate_config = tmp_path / "accelerate.yaml"
    accelerate_config.write_text("num_processes: 2\n")

    def launch(*arguments: str, **env: str) -> list[str]:
        done = subprocess.run(["bash", str(LAUNCH), "sft", str(accelerate_config), "sft_tiny_cpu.yaml", *arguments],
                              env={**os.environ, "ASTRA_GRPO_PYTHON": str(echo), **env},
                              capture_output=True, text=True, check=True)
        return done.stdout.splitlines()
    return launch


def test_launcher_logs_go_to_the_output_directory(launched, tmp_path):
    """torch's elastic agent otherwise makes a torchelastic_* directory in TMPDIR on every launch, and leaves it."""
    out = tmp_path / "run"
    for arguments in (["--output-dir", str(out)], [f"--output-dir={out}"]):
        argv = launched("data.jsonl", *arguments, "--max-steps", "1")
        assert argv[argv.index("--log_dir") + 1] == f"{out}/launcher"
        assert argv[argv.index("-m", argv.index("--log_dir")):] == [
            "-m", "astra_grpo.cli", "sft", "--config", "sft_tiny_cpu.yaml", "data.jsonl", *arguments, "--max-steps", "1"]


def test_without_an_output_directory_torch_keeps_its_default(launched):
    argv = launched("data.jsonl", "--max-steps", "1")
    assert "--log_dir" not in argv
    assert argv[:4] == ["-m", "accelerate.commands.launch", "--config_file", argv[3]]


def test_environment_overrides_reach_accelerate(launched, tmp_path):
    argv = launched("data.jsonl", "--output-dir", str(tmp_path), NUM_PROCESSES="4", MAIN_PROCESS_PORT="29512")
    assert argv[argv.index("--num_processes") + 1] == "4"
    assert argv[argv.index("--main_process_port") + 1] == "29512"
