"""What the second core is worth to asynchronous GRPO (benchmarks/async_rl.py): one update (forward + backward over
4 x 500 tokens of the SFT'd SmolLM2-135M, one thread) alone, then beside the rollout engine process generating
without pause. Wall time and the update thread's CPU time: the same CPU time with more wall time means the update
waited for a core (other load on the machine), a higher CPU time that the engine slowed it (memory bandwidth).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/async_overlap_probe.py out/async_rl/sft/final \
        | tee benchmarks/results/async_overlap_probe.txt
"""

import os
import sys
import threading
import time

import torch


def main() -> None:
    from astra_grpo.config import GRPOConfig, load_config
    from astra_grpo.engine_process import EngineProcess
    from astra_grpo.engines import Sampling
    from astra_grpo.runtime import load_policy

    torch.set_num_threads(1)
    model, tokenizer = load_policy(load_config(GRPOConfig, None, {"model": sys.argv[1] if len(sys.argv) > 1 else None}))
    ids = torch.randint(100, 20000, (4, 500))

    def update() -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.thread_time()
        model(input_ids=ids).logits.float().log_softmax(-1).mean().backward()
        model.zero_grad()
        return time.perf_counter() - wall, time.thread_time() - cpu

    update()  # warm-up
    alone = [update() for _ in range(2)]
    engine = EngineProcess(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], batch_size=8, seed=0)
    stop = threading.Event()

    def generate() -> None:
        while not stop.is_set():
            engine.generate([list(range(100, 500))] * 8, [48] * 8, Sampling(), keys=list(range(8)))

    thread = threading.Thread(target=generate)
    thread.start()
    time.sleep(3)
    beside = [update() for _ in range(2)]
    stop.set()
    thread.join()
    engine.close()
    print(f"async_overlap_probe: load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} (2 cores)")
    for label, runs in (("alone", alone), ("beside the engine process", beside)):
        wall, cpu = (sum(values) / len(values) for values in zip(*runs, strict=True))
        print(f"  update {label:26} wall {wall:5.1f} s, its thread's CPU {cpu:5.1f} s")


if __name__ == "__main__":
    main()
