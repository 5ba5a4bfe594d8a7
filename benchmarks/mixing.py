"""Irrelevant-tool mixing: banding every tool of a 19,036-tool pool (paper §3.2.2, Eq. 25–28).

For each tool: cosine similarity to every tool, min-max normalization over the others, same-domain
exclusion, the three bands, and up to K uniform picks per band. Compared in the same run:

- vectorized: `astra_qaenv.mixing.band_all`, blocked matrix products and array ops;
- baseline:   `astra_qaenv.mixing.band_all_loop`, the same computation one tool at a time (a Python
              loop over tools, numpy inside the loop).

Embeddings are random unit vectors (384-d, MiniLM's width): banding cost does not depend on what
they encode. Single-threaded BLAS.

    .venv/bin/python benchmarks/mixing.py [--tools 19036] [--domains 400]
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from astra_qaenv.mixing import (  # noqa: E402
    MixingConfig,
    band_all,
    band_all_loop,
    band_masks,
    normalized_similarity,
    unit_rows,
)


def agree(picks: np.ndarray, embeddings: np.ndarray, codes: np.ndarray, config: MixingConfig, rows) -> bool:
    """Every pick lies in its band for its tool, and each band got min(K, band size) picks."""
    for i in rows:
        row = normalized_similarity((embeddings @ embeddings[i])[None, :], np.array([i]))[0]
        masks = band_masks(row[None, :], (codes != codes[i])[None, :], config)[:, 0]
        for b in range(3):
            chosen = picks[i, b][picks[i, b] >= 0]
            if len(chosen) != min(config.k, int(masks[b].sum())) or not masks[b][chosen].all():
                return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=19_036)
    parser.add_argument("--domains", type=int, default=400)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--block", type=int, default=512)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    embeddings = unit_rows(rng.normal(size=(args.tools, args.dim)))
    codes = rng.integers(0, args.domains, size=args.tools).astype(np.int32)
    config = MixingConfig(k=args.k)
    print(f"tools {args.tools:,} · domains {args.domains} · dim {args.dim} · K {args.k} · block {args.block} · "
          f"numpy {np.__version__} · {platform.processor() or platform.machine()} · OMP_NUM_THREADS="
          f"{os.environ['OMP_NUM_THREADS']}")

    start = time.perf_counter()
    fast = band_all(embeddings, codes, config, block=args.block)
    vectorized = time.perf_counter() - start
    print(f"vectorized (band_all):            {vectorized:8.2f} s  ({args.tools / vectorized:,.0f} tools/s)")

    start = time.perf_counter()
    slow = band_all_loop(embeddings, codes, config)
    loop = time.perf_counter() - start
    print(f"baseline per-tool loop:           {loop:8.2f} s  ({args.tools / loop:,.0f} tools/s)")
    print(f"speedup vectorized / loop:        {loop / vectorized:8.1f}x")

    check_rows = rng.choice(args.tools, size=200, replace=False)
    ok = agree(fast, embeddings, codes, config, check_rows) and agree(slow, embeddings, codes, config, check_rows)
    print(f"both valid on 200 sampled tools:  {ok}")
    sizes = [(fast[:, b] >= 0).sum(axis=1).mean() for b in range(3)]
    print(f"mean picks per tool (high/med/low): {sizes[0]:.2f} / {sizes[1]:.2f} / {sizes[2]:.2f}")


if __name__ == "__main__":
    main()
