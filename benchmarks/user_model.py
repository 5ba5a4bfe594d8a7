"""Does the user model learn when to stop? SmolLM2-135M-Instruct (the embedded default) as the user
simulator before and after SFT on user-model data (AReaL-SEA §5), on held-out tau2 retail tasks, CPU.

Data. `astra-grpo tau2-oracle` plays tau2 retail tasks right (the task's gold calls in a live tau2
environment between templated user turns, with the policy's yes before the first change; kept only when
tau2's evaluator scores 1); `astra-toolgraph evolve export-user-sft` turns them into the user's side of the
conversation; `astra-grpo sft` trains the user model on the first tasks (train split, by task id). The
other tasks are held out.

Probes. For every held-out task the user simulator (astra_core.users, served by `astra-core serve`,
greedy) answers four conversation prefixes of that task's oracle conversation:
- `ask`       the assistant asked who the user is (the training template): right = no stop token;
- `confirm`   after the lookups, the assistant asks to go ahead (wording never trained on): right = no stop;
- `done`      the assistant reports the request done (the training template): right = `###STOP###`;
- `done-new`  the same, worded differently (never trained on): right = `###STOP###`.
"Ends correctly" = stops on both done probes and on neither early probe (all four right), per task.
Rates with Wilson 95 % intervals over tasks; the paired comparison counts tasks where the trained model
is right and the untrained wrong and vice versa (exact two-sided sign test).

    .venv/bin/python benchmarks/user_model.py --out out/user_model | tee benchmarks/results/user_model.txt

The committed result (`benchmarks/results/user_model.txt`) is a run with the defaults (40 train conversations,
30 held-out tasks), followed by the same run before the oracle conversations had the confirmation turn.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from astra_grpo.tau2 import READ_ONLY_PREFIXES

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CONFIRM = "I found your account and the details of your request. Before I change anything: shall I go ahead?"
DONE_NEW = "Your request has been completed and everything is updated on our side. Thank you for contacting us!"
EARLY, LATE = ("ask", "confirm"), ("done", "done-new")


def probes(conversation: list[dict]) -> dict[str, list[dict]]:
    """The four prefixes (assistant-side messages) of one oracle conversation."""
    ask = conversation[:3]                       # system, user opening, assistant asks who the user is
    lookups = []
    for message in conversation[4:-1]:           # the read-only calls (and results) before the first write
        calls = message.get("tool_calls") or []  # or before the assistant asks to go ahead
        if message["role"] == "assistant" and not (calls and calls[0]["function"]["name"].startswith(READ_ONLY_PREFIXES)):
            break
        lookups.append(message)
    if lookups and lookups[-1]["role"] == "assistant":
        lookups = lookups[:-1]
    confirm = conversation[:4] + lookups + [{"role": "assistant", "content": CONFIRM}]
    done = conversation
    done_new = conversation[:-1] + [{"role": "assistant", "content": DONE_NEW}]
    return {"ask": ask, "confirm": confirm, "done": done, "done-new": done_new}


def right(probe: str, stop: str | None) -> bool:
    return stop is None if probe in EARLY else stop == "###STOP###"


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 0.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test(better: int, worse: int) -> float:
    n = better + worse
    if n == 0:
        return 1.0
    k = min(better, worse)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def make_data(out: Path, args) -> tuple[list[dict], list[dict]]:
    """Oracle conversations of the train and held-out tasks (tau2's evaluator kept only reward-1 ones)."""
    from astra_grpo.tau2 import Tau2Pool, oracle_conversation

    path = out / "oracle.jsonl"
    if not path.exists():
        with Tau2Pool() as pool:
            tasks = pool.tasks("retail")[:args.train + args.held_out]
            records = [oracle_conversation(pool, "retail", task) for task in tasks]
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    accepted = [r for r in records if r["verification"]["verdict"] == "SUCCESS"]
    print(f"oracle conversations: {len(records)} tau2 retail tasks, {len(accepted)} scored 1 by tau2's evaluator")
    train = [r for r in accepted if int(r["task_id"].rsplit("-", 1)[1]) < args.train]
    held = [r for r in accepted if int(r["task_id"].rsplit("-", 1)[1]) >= args.train][:args.held_out]
    return train, held


def train_user_model(out: Path, train: list[dict], args) -> Path:
    final = out / "user_model" / "final"
    if final.exists():
        return final
    from astra_toolgraph.evolve.export import user_sft_record

    data = out / "user_sft.jsonl"
    data.write_text("".join(json.dumps(user_sft_record(r)) + "\n" for r in train))
    bin_dir = Path(sys.executable).parent
    started = time.perf_counter()
    subprocess.run([str(bin_dir / "astra-grpo"), "sft", str(data), "--config", "sft_tiny_cpu.yaml",
                    "--num-epochs", str(args.epochs), "--learning-rate", str(args.lr), "--report-to", "none",
                    "--output-dir", str(out / "user_model")], check=True, stdout=subprocess.DEVNULL)
    print(f"user-model SFT: {len(train)} conversations, {args.epochs} epochs, lr {args.lr}: "
          f"{time.perf_counter() - started:.0f} s")
    return final


def evaluate(model: str | None, held: list[dict], max_tokens: int) -> list[dict[str, bool]]:
    from concurrent.futures import ThreadPoolExecutor

    from astra_core.embedded import start_server, stop_server
    from astra_core.llm import LLMConfig
    from astra_core.users import UserSimulator

    process, base_url = start_server(model, log=False)
    jobs = [(index, name, record["user"], prefix) for index, record in enumerate(held)
            for name, prefix in probes(record["messages"]).items()]
    results: list[dict] = [{} for _ in held]
    try:
        with UserSimulator(LLMConfig(base_url=base_url, max_retries=1, timeout=600), max_tokens=max_tokens,
                           temperature=0.0) as simulator, ThreadPoolExecutor(8) as pool:  # the server batches 8
            turns = pool.map(lambda job: simulator.reply(job[2], job[3]), jobs)
            for (index, name, _, _), turn in zip(jobs, turns, strict=True):
                results[index][name] = right(name, turn.stop)
                results[index][f"{name}/reply"] = turn.raw[:80]
    finally:
        stop_server(process)
    return results


def report(name: str, rows: list[dict]) -> None:
    n = len(rows)
    for probe in (*EARLY, *LATE):
        k = sum(r[probe] for r in rows)
        lo, hi = wilson(k, n)
        print(f"  {name:9s} {probe:9s} right {k:3d}/{n} = {k / n:.2f}  [95% CI {lo:.2f}-{hi:.2f}]")
    k = sum(all(r[p] for p in (*EARLY, *LATE)) for r in rows)
    lo, hi = wilson(k, n)
    print(f"  {name:9s} ENDS CORRECTLY {k:3d}/{n} = {k / n:.2f}  [95% CI {lo:.2f}-{hi:.2f}]")


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("out/user_model"))
    parser.add_argument("--train", type=int, default=40, help="tau2 retail tasks 0..N-1 train the user model")
    parser.add_argument("--held-out", type=int, default=30, help="the next N tasks are held out")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-tokens", type=int, default=24, help="tokens per user reply")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train, held = make_data(args.out, args)
    print(f"train: {len(train)} conversations (tasks < {args.train}); held out: {len(held)} tasks")
    trained = train_user_model(args.out, train, args)
    base_rows = evaluate(None, held, args.max_tokens)
    trained_rows = evaluate(str(trained), held, args.max_tokens)
    (args.out / "probes.jsonl").write_text("".join(
        json.dumps({"task_id": r["task_id"], "untrained": b, "trained": t}) + "\n"
        for r, b, t in zip(held, base_rows, trained_rows, strict=True)))
    print(f"\nheld-out tau2 retail tasks: {len(held)}; greedy replies of at most {args.max_tokens} tokens")
    report("untrained", base_rows)
    report("trained", trained_rows)
    for probe in (*EARLY, *LATE, "all"):
        pick = (lambda r: all(r[p] for p in (*EARLY, *LATE))) if probe == "all" else (lambda r, p=probe: r[p])
        better = sum(pick(t) and not pick(b) for b, t in zip(base_rows, trained_rows, strict=True))
        worse = sum(pick(b) and not pick(t) for b, t in zip(base_rows, trained_rows, strict=True))
        print(f"  paired {probe:9s}: trained right where untrained wrong {better}, the reverse {worse} "
              f"(sign test p = {sign_test(better, worse):.3g})")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
