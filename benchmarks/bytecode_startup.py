"""What compiled bytecode saves each process that loads a model, where PYTHONDONTWRITEBYTECODE is set.

With PYTHONDONTWRITEBYTECODE=1 (this machine's environment, and many container images) Python never
writes .pyc files, so without them every process compiles torch's and transformers' sources again.
`scripts/setup` therefore installs with `uv sync --compile-bytecode`. This script times, in the same
run, the imports every training or serving process starts with (torch, transformers' model loader,
accelerate), reading the installed .pyc files against compiling from source (the baseline: the same
interpreter pointed at an empty pycache prefix, so no .pyc is found and none is written).

    .venv/bin/python benchmarks/bytecode_startup.py | tee benchmarks/results/bytecode_startup.txt
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

IMPORTS = {
    "import torch": "import torch",
    "transformers' model loader": "import torch; from transformers import AutoModelForCausalLM; "
                                  "AutoModelForCausalLM.from_config",
    "astra-grpo's trainer (torch, accelerate, transformers)": "import astra_grpo.grpo, astra_grpo.runtime; "
                                                             "from transformers import AutoModelForCausalLM",
}
RUNS = 5


def median_seconds(code: str, *flags: str) -> float:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run([sys.executable, *flags, "-c", code], env=env, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="no-pyc-") as empty:
        report(empty)


def report(empty: str) -> None:
    print(f"median of {RUNS} runs each, PYTHONDONTWRITEBYTECODE=1, {os.cpu_count()} CPUs, interleaved per import")
    print(f"{'imports':<56} {'from source':>12} {'from .pyc':>10} {'saved':>8}")
    for name, code in IMPORTS.items():
        from_source = median_seconds(code, "-X", f"pycache_prefix={empty}")
        compiled = median_seconds(code)
        print(f"{name:<56} {from_source:10.2f} s {compiled:8.2f} s {from_source - compiled:6.2f} s")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
