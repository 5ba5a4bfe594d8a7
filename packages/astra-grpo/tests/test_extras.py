"""TensorBoard and matplotlib are extras of astra-grpo: without them, the tracker and `astra-grpo plot` stop with
one line naming the extra to install. Run in a subprocess of the real environment where the library is hidden
from the import system (the path finder does not see it: exactly what an uninstalled package looks like)."""

import json
import subprocess
import sys

HIDDEN_RUN = """
import importlib.machinery, sys

HIDDEN = set(sys.argv[1].split(","))


class WithoutHidden(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            return None
        return super().find_spec(name, path, target)


sys.meta_path[:] = [WithoutHidden if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
from astra_grpo.cli import main

main(sys.argv[2:], prog_name="astra-grpo")
"""


def run_without(hidden: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIDDEN_RUN, hidden, *args], capture_output=True, text=True,
                          timeout=300)


def assert_one_line(result: subprocess.CompletedProcess, line: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [line], result.stderr


def test_plot_without_matplotlib_names_the_plots_extra(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    figure = tmp_path / "curves.png"
    assert_one_line(run_without("matplotlib", "plot", str(metrics), "-o", str(figure)),
                    "Error: astra-grpo plot needs matplotlib: pip install 'astra-grpo[plots]'")
    assert not figure.exists()
    # The same command with matplotlib present draws the figure: it is the absence that fails.
    drawn = run_without("nothing", "plot", str(metrics), "-o", str(figure))
    assert drawn.returncode == 0, drawn.stderr
    assert figure.read_bytes()[:4] == b"\x89PNG"


def test_the_default_tensorboard_tracker_without_tensorboard_names_the_extra_before_training(tmp_path):
    data = tmp_path / "trajectories.jsonl"
    data.write_text("")
    result = run_without("tensorboard", "sft", str(data), "--output-dir", str(tmp_path / "out"))
    assert_one_line(result, "Error: astra-grpo --report-to tensorboard (--report-to none: no tracker) needs "
                            "tensorboard: pip install 'astra-grpo[tensorboard]'")
    assert not (tmp_path / "out").exists()
