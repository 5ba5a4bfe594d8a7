"""The GRPO policy update in each batch layout, same run: dense padded vs packed vs packed + prefix tree.

One update (astra-grpo's `grpo._update`: forward, backward, AdamW) of the same batch in each layout
(`layout: padded | packed | tree`, a group per micro-batch in all three; and padded with one sequence per
micro-batch, the least memory a dense update can take): seconds per update, tokens/s (every sequence's own
tokens counted once per sequence, as the dense update computes them), the update's peak memory, and the
FLOPs each layout should save next to the time it saved. Times: one process runs every row's update on a
copy of the same model with a fresh AdamW (as benchmarks/grpo_step.py does), a warm-up round, then the
timed rounds, the order reversed each round so that the machine's load falls on every row alike (the
median is printed). Memory: a process per row, the peak RSS during an update after a warm-up one on the
same model and optimizer, above the RSS before it (activations, gradients, temporaries), with freed tensors
going back to the OS at once (MEMORY_ENV; not timed). Two workloads:

(a) demo   the demo's RL batch: the 2 groups x 4 episodes its GRPO step trained on (rendered from
           out/demo/grpo/train_rollouts.jsonl with the demo's chat format; a copy is checked in at
           benchmarks/data/update_layout_demo.jsonl), on the demo's model, SmolLM2-135M-Instruct (fp32).
(b) tau2   tau2-shaped groups: 2 groups of G = 8 episodes, each a 4,096-token shared prompt then 1-6
           turns of 100-400 tokens (a 50-200-token reply, trained, and a 50-200-token observation), on a
           random-init Qwen3 (4 layers, hidden 256, 4 heads of 64, 2 kv heads, MLP 768, vocabulary
           4,096: 3.1 M parameters in its layers): small enough for 1 CPU thread, shaped like a long-
           context agent update. TRL's GRPOTrainer updates the same sequences beside it (its own
           compute_loss, as benchmarks/grpo_step.py calls it: micro-batches of G, its dapo loss).

    .venv/bin/python benchmarks/update_layout.py | tee benchmarks/results/update_layout.txt
    .venv/bin/python benchmarks/update_layout.py --make-demo-batch out/demo   # refresh the (a) copy

FLOPs a layout should take (forward + backward = 3 x forward): 2 x layer parameters per forwarded
position, 4 x (query width) per visible (query, key) pair in every layer (causal: padded rows see their
whole padded width, packed rows each sequence, tree rows each token's path), and 2 x vocabulary x
hidden per position whose logits are kept (the loss tokens: the same in every layout).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).parent
# For the memory runs: every allocation of 64 KiB or more is its own mmap, so a freed tensor goes back to the OS
# at once and the peak RSS of an update is its live memory (as benchmarks/cp_memory.py measures), not what glibc
# kept from the warm-up. Timed runs leave the allocator alone (page faults on every allocation would slow them).
MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}
DEMO_BATCH = HERE / "data" / "update_layout_demo.jsonl"
TAU2 = dict(groups=2, group_size=8, prompt=4096, turns=(1, 6), reply=(50, 200), observation=(50, 200), vocab=4096)
TAU2_MODEL = dict(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, max_position_embeddings=16384, tie_word_embeddings=True)


# -- the batches --------------------------------------------------------------------------------------

def tau2_batch(seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    episodes = []
    for group in range(TAU2["groups"]):
        prompt = [rng.randrange(3, TAU2["vocab"]) for _ in range(TAU2["prompt"])]
        for _member in range(TAU2["group_size"]):
            ids, mask = list(prompt), [0] * len(prompt)
            for _turn in range(rng.randint(*TAU2["turns"])):
                reply = [rng.randrange(3, TAU2["vocab"]) for _ in range(rng.randint(*TAU2["reply"]))]
                seen = [rng.randrange(3, TAU2["vocab"]) for _ in range(rng.randint(*TAU2["observation"]))]
                ids, mask = ids + reply + seen, mask + [1] * len(reply) + [0] * len(seen)
            episodes.append({"group": group, "token_ids": ids, "loss_mask": mask, "prompt_length": len(prompt),
                             "reward": rng.random()})
    return episodes


def demo_batch() -> list[dict]:
    return [json.loads(line) for line in DEMO_BATCH.read_text().splitlines()]


def make_demo_batch(demo: Path) -> None:
    """Render the demo's trained GRPO groups (train_rollouts.jsonl, status trained) as the trainer does."""
    from astra_core.local.model import load_model
    from astra_grpo.chat import chat_renderer
    from astra_grpo.config import GRPOConfig

    _, tokenizer = load_model()
    renderer = chat_renderer(tokenizer, GRPOConfig())
    tools = {json.loads(line)["id"]: json.loads(line)["tools"] for line in (demo / "grpo" / "rl_data.jsonl").open()}
    rollouts = [json.loads(line) for line in (demo / "grpo" / "train_rollouts.jsonl").open()]
    trained = [r for r in rollouts if r["status"] == "trained"]
    groups = sorted({(r["step"], r["group"]) for r in trained})
    lines = []
    for record in trained:
        prompt = renderer.prompt_ids(record["messages"][:2], tools[record["sample_id"]])
        ids, mask = renderer.encode(record["messages"], tools[record["sample_id"]])
        lines.append(json.dumps({"group": groups.index((record["step"], record["group"])), "token_ids": ids,
                                 "loss_mask": mask, "prompt_length": len(prompt), "reward": record["reward"]}))
    DEMO_BATCH.parent.mkdir(exist_ok=True)
    DEMO_BATCH.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} episodes in {len(groups)} groups to {DEMO_BATCH}", file=sys.stderr)


def workload(name: str):
    """(episodes, group size, model factory, model description)."""
    import torch

    if name == "demo":
        def model():
            from astra_core.local.model import load_model

            return load_model()[0]
        episodes = demo_batch()
        return episodes, len(episodes) // len({e["group"] for e in episodes}), model, "SmolLM2-135M-Instruct fp32"

    def model():
        from transformers import AutoModelForCausalLM, Qwen3Config

        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(Qwen3Config(**TAU2_MODEL), attn_implementation="sdpa")
    return tau2_batch(), TAU2["group_size"], model, "random-init Qwen3 (4 x 256, 4 heads, vocab 4096) fp32"


# -- the updates ----------------------------------------------------------------------------------------

# Rows of the table: (layout, sequences per micro-batch; None: a group); TRL's GRPOTrainer beside them on (b).
ROWS = {"padded": ("padded", None), "packed": ("packed", None), "tree": ("tree", None),
        "padded, 1 per micro-batch": ("padded", 1)}
TRL = "trl GRPOTrainer"


def base_model(name: str):
    import torch

    torch.set_num_threads(1)
    model = workload(name)[2]()
    model.train()
    return model


def rss_mib(field: str) -> float:
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) / 1024


def updater(name: str, label: str, base, fresh: bool = True):
    """A function that runs one update of the workload's batch in row `label` and returns (seconds, metrics):
    on a copy of the `base` model with a fresh AdamW each time (`fresh`, as benchmarks/grpo_step.py does), or
    on one copy and one optimizer made here (so that an update's memory holds none of them)."""
    import copy

    import torch
    from astra_grpo.config import GRPOConfig, load_config
    from astra_grpo.grpo import _update
    from astra_grpo.rollout import Episode, Group
    from astra_grpo.runtime import make_accelerator

    episodes, group_size, _, _ = workload(name)
    if label == TRL:
        from astra_core.local.model import load_model

        sys.path.insert(0, str(HERE))
        from grpo_step import trl

        _, tokenizer = load_model()  # TRL wants a processing class; the update reads only its pad id
        sequences = [(e["token_ids"][:e["prompt_length"]], e["token_ids"][e["prompt_length"]:]) for e in episodes]
        args = argparse.Namespace(micro=group_size, batch=len(episodes), group=group_size,
                                  completion=max(len(c) for _, c in sequences))
        tokens = sum(len(e["token_ids"]) for e in episodes)

        def trl_update():
            return trl(copy.deepcopy(base), tokenizer, sequences, [e["reward"] for e in episodes], args), \
                {"update_tokens": tokens}
        return trl_update

    layout, micro = ROWS[label]
    groups = []
    for g in sorted({e["group"] for e in episodes}):
        members = [e for e in episodes if e["group"] == g]
        groups.append(Group(uid=f"g{g}", sample_id=f"g{g}", episodes=[
            Episode(sample={"id": f"g{g}"}, member=k, messages=[], token_ids=e["token_ids"], loss_mask=e["loss_mask"],
                    prompt_length=e["prompt_length"], reward=e["reward"]) for k, e in enumerate(members)]))
    config = load_config(GRPOConfig, None, dict(batch_size=len(groups), mini_batch_size=len(groups),
                                                group_size=group_size, micro_batch_size=micro or group_size,
                                                layout=layout, learning_rate=1e-6, report_to=[], max_grad_norm=1.0))

    def prepared():
        accelerator = make_accelerator(config, config.accumulation_steps(1))
        model = copy.deepcopy(base)
        model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-6))
        return accelerator, model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)

    kept = None if fresh else prepared()

    def update():
        accelerator, model, optimizer, scheduler = kept or prepared()
        started = time.perf_counter()
        metrics = _update(config, accelerator, model, None, optimizer, scheduler, groups, 0, 1, 0,
                          config.accumulation_steps(1))
        return time.perf_counter() - started, metrics
    return update


def time_worker(name: str, labels: list[str], steps: int) -> None:
    """Every row's update, interleaved in this one process: a warm-up round, then `steps` timed rounds, the
    order reversed every round, so that a change in the machine's load falls on all rows alike."""
    base = base_model(name)
    updates = {label: updater(name, label, base) for label in labels}
    results: dict[str, dict] = {label: {"seconds": []} for label in labels}
    for round_ in range(steps + 1):
        for label in (labels if round_ % 2 == 0 else labels[::-1]):
            seconds, metrics = updates[label]()
            print(f"  {'warm-up' if not round_ else f'round {round_}'} {label}: {seconds:.2f} s", file=sys.stderr)
            if round_:
                results[label]["seconds"].append(seconds)
            results[label].update(tokens=metrics["update_tokens"], forwarded=metrics.get("update_forwarded_tokens"))
    print(json.dumps(results))


def memory_worker(name: str, label: str) -> None:
    """The peak memory of one update after a warm-up one (the same model and optimizer), above the RSS before
    it (run under MEMORY_ENV). TRL's update makes its trainer and model copy inside: they count."""
    update = updater(name, label, base_model(name), fresh=False)
    update()
    Path("/proc/self/clear_refs").write_text("5")  # the peak-RSS counter restarts from the current RSS
    before = rss_mib("VmRSS")
    update()
    print(json.dumps({"peak_mib": rss_mib("VmHWM"), "step_mib": rss_mib("VmHWM") - before}))


# -- the FLOPs each layout should take ----------------------------------------------------------------

def expected_flops(name: str, layout: str, micro: int | None) -> float:
    """Training FLOPs of one update in `layout` (see the module docstring)."""
    from astra_grpo.layout import build, plan

    episodes, group_size, make_model, _ = workload(name)
    config = make_model().config if name == "demo" else None
    shape = (dict(hidden=config.hidden_size, layers=config.num_hidden_layers, vocab=config.vocab_size,
                  inter=config.intermediate_size, heads=config.num_attention_heads,
                  kv=config.num_key_value_heads, head_dim=config.hidden_size // config.num_attention_heads)
             if config else dict(hidden=TAU2_MODEL["hidden_size"], layers=TAU2_MODEL["num_hidden_layers"],
                                 vocab=TAU2_MODEL["vocab_size"], inter=TAU2_MODEL["intermediate_size"],
                                 heads=TAU2_MODEL["num_attention_heads"], kv=TAU2_MODEL["num_key_value_heads"],
                                 head_dim=TAU2_MODEL["head_dim"]))
    width = shape["heads"] * shape["head_dim"]
    layer_params = (shape["hidden"] * width * 2 + shape["hidden"] * shape["kv"] * shape["head_dim"] * 2
                    + 3 * shape["hidden"] * shape["inter"])
    total = 0.0
    for g in sorted({e["group"] for e in episodes}):
        members = [e for e in episodes if e["group"] == g]
        sequences = [e["token_ids"] for e in members]
        drafted = plan(sequences, layout, budget=None, size=micro or group_size)
        for micro_batch in drafted.micro_batches:
            laid = build([sequences[i] for i in micro_batch], [members[i]["loss_mask"] for i in micro_batch], layout)
            if laid.nodes is None:
                rows, columns = laid.input_ids.shape
                pairs = rows * columns * (columns + 1) / 2
            else:
                pairs = sum((end - start) * sum(b - a for a, b in runs[:-1]) + (end - start) * (end - start + 1) / 2
                            for (start, end), runs in zip(laid.nodes.spans, laid.nodes.keys, strict=True))
            forward = (2 * layer_params * shape["layers"] * laid.forwarded_tokens + 4 * width * shape["layers"] * pairs
                       + 2 * shape["vocab"] * shape["hidden"] * len(laid.pair_target))
            total += 3 * forward
    return total


# -- the driver ---------------------------------------------------------------------------------------

def run(arguments: list[str], env: dict | None = None) -> dict:
    result = subprocess.run([sys.executable, __file__, *arguments], capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})})
    sys.stderr.write("".join(line + "\n" for line in result.stderr.splitlines() if line.startswith("  ")))
    if result.returncode:
        sys.exit(f"{' '.join(arguments)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def measure(name: str, steps: int, with_trl: bool) -> None:
    episodes, group_size, _, model = workload(name)
    lengths = [len(e["token_ids"]) for e in episodes]
    groups = len({e["group"] for e in episodes})
    print(f"\n({'a' if name == 'demo' else 'b'}) {name}: {groups} groups x G={group_size}, sequences of "
          f"{min(lengths)}..{max(lengths)} tokens ({sum(lengths)} in all; prompts of "
          f"{sorted({e['prompt_length'] for e in episodes})} tokens), {model}, a group per micro-batch")
    labels = [*ROWS, *([TRL] if with_trl else [])]
    results = run(["--time-worker", name, "--steps", str(steps), *labels])
    for label in labels:
        results[label].update(run(["--memory-worker", name, label], MEMORY_ENV))
    flops = {label: expected_flops(name, *ROWS[label]) for label in ROWS}
    dense = results["padded"]
    dense_seconds = statistics.median(dense["seconds"])
    print(f"{'layout':<28} {'s/update':>9} {'tokens/s':>9} {'forwarded':>10} {'peak MiB':>9} {'update MiB':>11} "
          f"{'FLOPs should':>13} {'time did':>9} {'memory':>7}")
    for label, result in results.items():
        seconds = statistics.median(result["seconds"])
        should = f"{flops['padded'] / flops[label]:.2f}x" if label in flops else "-"
        forwarded = f"{result['forwarded']:.0f}" if result.get("forwarded") is not None else "-"
        print(f"{label:<28} {seconds:>9.2f} {result['tokens'] / seconds:>9.1f} {forwarded:>10} "
              f"{result['peak_mib']:>9.0f} {result['step_mib']:>11.0f} {should:>13} "
              f"{dense_seconds / seconds:>8.2f}x {result['step_mib'] / dense['step_mib']:>6.2f}x")
    tree = results["tree"]
    speed, memory = dense_seconds / statistics.median(tree["seconds"]), tree["step_mib"] / dense["step_mib"]
    print(f"({'a' if name == 'demo' else 'b'}) layout tree: {speed:.2f}x faster than dense padded, at {memory:.2f}x "
          f"its update memory")
    if with_trl:
        trl_seconds = statistics.median(results[TRL]["seconds"])
        print(f"({'a' if name == 'demo' else 'b'}) layout tree vs TRL GRPOTrainer: "
              f"{trl_seconds / statistics.median(tree['seconds']):.2f}x policy-update tokens/s "
              f"(dense padded vs TRL: {trl_seconds / dense_seconds:.2f}x)")
    if name == "tau2":
        met = speed >= 3 and memory <= 0.5
        print(f"goal (b): >= 3x faster than dense padded at <= 0.5x its peak update memory: "
              f"{'met' if met else 'NOT met'} ({speed:.2f}x, {memory:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2, help="timed updates per layout (after one warm-up)")
    parser.add_argument("--only", choices=("demo", "tau2"), help="one workload")
    parser.add_argument("--no-trl", action="store_true", help="leave TRL's GRPOTrainer out")
    parser.add_argument("--make-demo-batch", type=Path, metavar="OUT_DEMO", help="write (a)'s batch from a demo run")
    parser.add_argument("--time-worker", metavar="WORKLOAD", help=argparse.SUPPRESS)
    parser.add_argument("--memory-worker", nargs=2, metavar=("WORKLOAD", "ROW"), help=argparse.SUPPRESS)
    parser.add_argument("rows", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make_demo_batch:
        return make_demo_batch(args.make_demo_batch)
    if args.time_worker:
        return time_worker(args.time_worker, args.rows, args.steps)
    if args.memory_worker:
        return memory_worker(*args.memory_worker)
    import torch

    print(f"update_layout: torch {torch.__version__}, 1 thread, {os.cpu_count()} CPUs | load at start: {load()}")
    for name in ([args.only] if args.only else ["demo", "tau2"]):
        measure(name, args.steps, with_trl=not args.no_trl and name == "tau2")
    print(f"load at end: {load()}")


if __name__ == "__main__":
    main()
