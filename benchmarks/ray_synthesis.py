"""An LLM stage on Ray (`astra-core ray`) against an endpoint that answers after a fixed latency: one process, then
Ray with 1 node and with 2 nodes, each node at the same concurrency.

The endpoint is synthesis_throughput.py's: a local OpenAI-compatible server (its own process, 127.0.0.1, no model)
that answers each request after exactly L seconds. A stage over N records (one request each) with C in flight can at
best take N * L / C seconds; with k nodes each keeping C in flight, N * L / (k * C). Each run is the real command in a
subprocess, as a user runs it; its time is the whole command's (Ray's connection, reading and checking the input,
starting the actors included), and the stage's own (its summary line: from when it opens its output, after the
input is read and checked). The cluster is started here as docs/ray.md says: `ray start --head` with 1 CPU, then a
second node of 1 CPU joining (token authentication); one actor per node.

    .venv/bin/python benchmarks/ray_synthesis.py | tee benchmarks/results/ray_synthesis.txt
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synthesis_throughput import STAGE_ARGS, inputs, start_endpoint  # noqa: E402 - the same endpoint and inputs

STAGE = "astra-toolgraph tasks"
BIN = Path(sys.executable).parent


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, int]:
    """(seconds of the whole command, seconds the stage's summary gives, records written, rejected)."""
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])} ... failed ({result.returncode}):\n{result.stderr[-3000:]}")
    summary = next(line for line in reversed(result.stderr.splitlines())
                   if line.startswith(f"{STAGE}: read ") and "rejected " in line)
    wrote, rejected = re.search(r"wrote (\d+) from \d+ · rejected (\d+)", summary).groups()
    return seconds, float(summary.rsplit(" · ", 1)[1].rstrip("s")), int(wrote), int(rejected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=24576)
    parser.add_argument("--concurrency", type=int, default=128, help="In flight per node (and in one process).")
    parser.add_argument("--latency", type=float, default=1.0)
    args = parser.parse_args()

    server, base_url, _ = start_endpoint(args.latency)
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONDONTWRITEBYTECODE", "RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    env.update(OMP_NUM_THREADS="1", RAY_AUTH_MODE="token")
    tool, command = STAGE.split()
    stage_argv = [command, "--concurrency", str(args.concurrency), "--max-retries", "0", "--base-url", base_url,
                  "--model", "fixed-latency", *STAGE_ARGS[STAGE]]
    n, c, latency = args.records, args.concurrency, args.latency
    print(f"{STAGE}: N = {n} records (one request each), C = {c} in flight per node, L = {latency:.2f} s per request; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start (other engineers share them)")
    ray = str(BIN / "ray")
    port = 6400 + os.getpid() % 1000
    node = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "warm-up").mkdir()
            warm_up = inputs(STAGE, 8, Path(tmp) / "warm-up")
            run([str(BIN / tool), command, str(warm_up), *stage_argv[1:]], env)  # (bytecode cached), not measured
            records = inputs(STAGE, n, Path(tmp))
            runs = [("one process", 1, [str(BIN / tool), command, str(records), *stage_argv[1:]])]
            address = f"127.0.0.1:{port}"
            on_ray = [str(BIN / "astra-core"), "ray", "--address", address, "astra-toolgraph", command, str(records),
                      *stage_argv[1:]]
            subprocess.run([ray, "start", "--head", f"--port={port}", "--include-dashboard=false", *node], env=env,
                           check=True, capture_output=True)
            for label, nodes, argv in [*runs, ("Ray, 1 node", 1, [*on_ray[:4], "--actors", "1", *on_ray[4:]])]:
                results[label] = (nodes, *run([*argv, "-o", str(Path(tmp) / "out.jsonl")], env))
            subprocess.run([ray, "start", f"--address={address}", *node], env=env, check=True, capture_output=True)
            results["Ray, 2 nodes"] = (2, *run([*on_ray[:4], "--actors", "2", *on_ray[4:], "-o",
                                                str(Path(tmp) / "out.jsonl")], env))
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True)
        server.terminate()
    one_node = None
    for label, (nodes, seconds, stage_seconds, written, rejected) in results.items():
        bound = n * latency / (nodes * c)
        rate, best = n / seconds, nodes * c / latency
        one_node = rate if label == "Ray, 1 node" else one_node
        print(f"{label:<13} {seconds:6.1f} s ({stage_seconds:6.1f} s in the stage), bound {bound:6.1f} s: "
              f"{rate:6.1f} records/s, {100 * rate / best:5.1f}% of the bound ({100 * bound / stage_seconds:5.1f}% in "
              f"the stage); {written} written, {rejected} rejected")
    two = n / results["Ray, 2 nodes"][1]
    print(f"2 nodes / 1 node: {two / one_node:.2f}x (goal >= 1.8x); each run's share of its bound: goal >= 85%")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
