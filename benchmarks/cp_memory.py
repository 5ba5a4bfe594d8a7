"""Context parallelism: peak memory per rank and step time against sequence length, CP=1 vs CP=2.

One training step of astra-grpo's own code path (`token_logprobs` with the loss on every token,
`objective_share`, backward, gradient all-reduce over the processes (DDP), AdamW) on one sequence
of L tokens, for a random-init Qwen3-style model (4 layers, hidden 128, 8 query / 2 key-value heads,
vocab 16,384: small enough for CPU, with the long-sequence memory profile of a real LM — activations
and the [tokens, vocab] logits grow with L, weights and optimizer state don't).
CP=1 is one process holding the whole sequence; CP=2 is two processes (gloo), each holding half of
it (Ulysses all-to-all around attention). One thread per process.

How memory is measured. torch has no allocator statistics for CPU tensors (tracemalloc does not see
them), so this measures what the operating system sees: every run is a fresh set of processes
(nothing retained from an earlier length); glibc is told to serve every allocation >= 64 KiB with
mmap (`MALLOC_MMAP_THRESHOLD_`), so freed tensors go back to the OS and RSS follows the live
tensors; a warm-up step at 256 tokens creates the optimizer state; then the peak-RSS counter is
reset (`/proc/self/clear_refs` = 5) and the measured step runs. "peak" is the process's peak RSS
during that step (the number a memory cap applies to: weights, gradients, optimizer state, runtime
and activations); "step" is peak minus the RSS just before the step (what the step itself added).
Per-rank figures are the largest over the ranks. The longest sequence under a cap is searched with
real runs in steps of 256 tokens (starting from a linear fit of the measured peaks).

    .venv/bin/python benchmarks/cp_memory.py                      # prints the table
    .venv/bin/python benchmarks/cp_memory.py | tee benchmarks/results/cp_memory.txt
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

STEP = 256
ENV = {"OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536", "TOKENIZERS_PARALLELISM": "false"}


# -- one measured run (inside each process) ----------------------------------------------------------

def rss_mib(field: str) -> float:
    kib = re.search(rf"{field}:\s+(\d+) kB", open("/proc/self/status").read()).group(1)
    return int(kib) / 1024


def worker(cp: int, length: int) -> None:
    import torch
    import torch.distributed as dist
    from astra_grpo.context_parallel.attention import enable
    from astra_grpo.context_parallel.grid import init_grid
    from astra_grpo.logprobs import collate, token_logprobs
    from astra_grpo.loss import objective_share, sft_token_loss
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.set_num_threads(1)
    if cp > 1:
        dist.init_process_group("gloo")
    init_grid(cp)
    config = Qwen3Config(vocab_size=16384, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=16, max_position_embeddings=65536,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    if cp > 1:
        enable(model, cp)
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step(tokens: int) -> None:
        generator = torch.Generator().manual_seed(tokens)
        ids = torch.randint(3, config.vocab_size, (tokens,), generator=generator).tolist()
        batch = collate([ids], [[1] * tokens], pad_id=0)
        logprobs, _ = token_logprobs(model, batch)
        mask = batch.loss_mask
        loss = objective_share(sft_token_loss(logprobs), mask, "token", float(mask.sum()), 1)
        (loss * cp).backward()  # DDP averages over the cp processes; their gradients are partial sums
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step(256)  # warm-up: optimizer state, first-call allocations
    if cp > 1:
        dist.barrier()
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # reset the peak-RSS counter to the current RSS
    before = rss_mib("VmRSS")
    started = time.perf_counter()
    step(length)
    seconds = time.perf_counter() - started
    mine = torch.tensor([rss_mib("VmHWM"), rss_mib("VmHWM") - before, seconds], dtype=torch.float64)
    if cp > 1:
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    if cp == 1 or dist.get_rank() == 0:
        print(json.dumps({"peak_mib": mine[0].item(), "step_mib": mine[1].item(), "seconds": mine[2].item()}))
    if cp > 1:
        dist.destroy_process_group()


# -- the driver ----------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(cp: int, length: int) -> dict:
    """A fresh run of `cp` processes on one sequence of `length` tokens."""
    command = [sys.executable, __file__, "--worker", str(cp), str(length)]
    if cp > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(cp),
                   "--master_port", str(free_port()), __file__, "--worker", str(cp), str(length)]
    result = subprocess.run(command, env={**os.environ, **ENV}, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"cp={cp} length={length} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def longest_under(cap: float, cp: int, points: dict[int, dict]) -> tuple[int, dict]:
    """Longest length (a multiple of STEP) whose measured peak stays under `cap`, by real runs."""
    lengths = sorted(points)
    xs, ys = lengths, [points[n]["peak_mib"] for n in lengths]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum((x - mean_x) ** 2 for x in xs)
    guess = max(STEP, int((mean_x + (cap - mean_y) / slope) // STEP * STEP))
    fits = {}

    def fits_at(length: int) -> bool:
        if length not in fits:
            fits[length] = measure(cp, length)
        return fits[length]["peak_mib"] <= cap

    length = guess
    while length > STEP and not fits_at(length):
        length -= STEP
    while fits_at(length + STEP):
        length += STEP
    return length, fits[length]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,2048,4096,8192", help="sequence lengths (tokens)")
    parser.add_argument("--cap-mib", type=float, default=1536.0, help="memory cap per rank (peak RSS, MiB)")
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]

    print("# cp_memory: one training step (forward, backward, all-reduce, AdamW) on one sequence; "
          "Qwen3-style 4 layers x 128, 8/2 heads, vocab 16384, fp32, 1 thread per process; "
          "peak RSS per rank (largest over ranks), fresh processes per run")
    print(f"{'tokens':>7} | {'CP=1 peak':>10} {'step':>8} {'time':>7} | {'CP=2 peak':>10} {'step':>8} {'time':>7} | "
          f"{'peak ratio':>10} {'step ratio':>10} {'time ratio':>10}")
    results: dict[int, dict[int, dict]] = {1: {}, 2: {}}
    for length in lengths:
        one, two = measure(1, length), measure(2, length)
        results[1][length], results[2][length] = one, two
        print(f"{length:>7} | {one['peak_mib']:>8.0f}Mi {one['step_mib']:>6.0f}Mi {one['seconds']:>6.2f}s | "
              f"{two['peak_mib']:>8.0f}Mi {two['step_mib']:>6.0f}Mi {two['seconds']:>6.2f}s | "
              f"{two['peak_mib'] / one['peak_mib']:>10.2f} {two['step_mib'] / one['step_mib']:>10.2f} "
              f"{two['seconds'] / one['seconds']:>10.2f}", flush=True)
    print("# ratios are CP=2 / CP=1 per rank; time is the wall time of one step (CP=2 uses two processes), a single "
          f"run per point on a shared machine (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores now)")
    longest = {}
    for cp in (1, 2):
        longest[cp] = longest_under(args.cap_mib, cp, results[cp])
    print(f"# longest sequence under a cap of {args.cap_mib:.0f} MiB peak RSS per rank "
          f"(searched in steps of {STEP} tokens, each length a real run):")
    for cp in (1, 2):
        length, point = longest[cp]
        print(f"CP={cp}: {length} tokens (peak {point['peak_mib']:.0f} MiB, step {point['seconds']:.2f} s)")
    print(f"# CP=2 / CP=1 longest sequence: {longest[2][0] / longest[1][0]:.2f}x")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
