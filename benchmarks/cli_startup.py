"""How long each command takes to answer, against the interpreter starting and doing nothing.

Each `COMMAND --help` and a real stage over 10 records (`astra-reward f1` on the documented
conversation; `astra-toolgraph walk` on the documented graph) run as subprocesses, several times each;
the script prints the median wall time, and what the command adds over `python -c pass` measured in
the same run (the baseline). Targets (issue 19): every --help within 0.3 s; a stage on 10 records adds
at most 0.3 s over its --help.

    .venv/bin/python benchmarks/cli_startup.py | tee benchmarks/results/cli_startup.txt
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
COMMANDS = ["astra-core", "astra-sandbox", "astra-reward", "astra-toolgraph", "astra-qaenv", "astra-grpo", "astra-eval"]
RUNS = 7


def median_seconds(argv: list[str], stdin: bytes = b"") -> float:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def ten_records(kind: str, field: str | None = None) -> bytes:
    from astra_core.formats_doc import example

    base = example(kind)
    rows = []
    for i in range(10):
        record = json.loads(json.dumps(base))
        record["id"] = f"{base['id']}-{i}"
        rows.append(json.dumps(record))
    return ("\n".join(rows) + "\n").encode()


def main() -> None:
    baseline = median_seconds([sys.executable, "-c", "pass"])
    print(f"baseline: python -c pass  {baseline * 1000:7.0f} ms  (median of {RUNS})")
    print(f"{'command':32} {'median':>9} {'over baseline':>14}  target")
    helps = {}
    for command in COMMANDS:
        helps[command] = median_seconds([str(BIN / command), "--help"])
        ok = "ok" if helps[command] <= 0.3 else "MISSED (> 300 ms)"
        print(f"{command + ' --help':32} {helps[command] * 1000:7.0f} ms {(helps[command] - baseline) * 1000:11.0f} ms  {ok}")
    with tempfile.TemporaryDirectory() as tmp:
        stages = [("astra-reward", ["f1"], ten_records("trajectory")),
                  ("astra-toolgraph", ["walk"], ten_records("tool_graph"))]
        for command, args, data in stages:
            seconds = median_seconds([str(BIN / command), *args, "-o", str(Path(tmp) / "out.jsonl")], data)
            added = seconds - helps[command]
            ok = "ok" if added <= 0.3 else "MISSED (> 300 ms)"
            label = f"{command} {' '.join(args)} (10 records)"
            print(f"{label:32} {seconds * 1000:7.0f} ms {added * 1000:11.0f} ms over --help  {ok}")


if __name__ == "__main__":
    main()
