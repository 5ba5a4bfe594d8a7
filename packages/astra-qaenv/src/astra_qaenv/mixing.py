"""Irrelevant-tool mixing (paper §3.2.2, Eq. 24–28; ablations §4.1).

The global tool pool is deduplicated by name; each tool's documentation is embedded once. For an
instance with in-scope tools T(x), every in-scope tool i gets its cosine similarities to all tools,
min-max normalized over j != i (Eq. 26). Same-domain tools (and the in-scope tools themselves) are
never candidates. The normalized similarities fall into three bands, high (> 0.85), medium
(0.4–0.85) and low (< 0.4) (Eq. 27); each band's instance-level pool is the union over the in-scope
tools (Eq. 28), and up to K tools are sampled uniformly from each.

Modes: `bands` (the above), `random` (5–9 tools sampled uniformly from other domains, the paper's
ablation), `none` (only the ground-truth tools). Everything is vectorized numpy.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from astra_qaenv.export_config import MixingConfig

BANDS = ("high", "med", "low")


@dataclass
class ToolPool:
    """Unique tools (by name) with their domains and unit-norm documentation embeddings."""

    tools: list[dict]
    domains: list[str]
    embeddings: np.ndarray | None = None  # (M, D) float32, rows L2-normalized
    index: dict[str, int] = field(default_factory=dict)
    domain_codes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))

    def __post_init__(self) -> None:
        self.index = {t["function"]["name"]: i for i, t in enumerate(self.tools)}
        names = sorted(set(self.domains))
        code = {d: i for i, d in enumerate(names)}
        self.domain_codes = np.array([code[d] for d in self.domains], dtype=np.int32)
        self._code = code

    def code_of(self, domain: str) -> int:
        return self._code.get(domain, -1)

    def __len__(self) -> int:
        return len(self.tools)


def dedup_tools(entries: Iterable[tuple[dict, str]]) -> tuple[list[dict], list[str]]:
    """(tool, domain) pairs -> unique tools by exact name (the first occurrence wins) and their domains."""
    tools, domains, seen = [], [], set()
    for tool, domain in entries:
        name = tool["function"]["name"]
        if name not in seen:
            seen.add(name)
            tools.append(tool)
            domains.append(domain or "unknown")
    return tools, domains


def unit_rows(vectors) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def normalized_similarity(similarity: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Eq. 26: each row min-max normalized over its entries j != i (i = that row's index in `rows`).

    `similarity` has one row per tool in `rows` and one column per pool tool (S = E[rows] E^T).
    A row whose other similarities are all equal normalizes to 0.
    """
    normalized = np.array(similarity, dtype=np.float32)  # a copy: normalized in place below
    rows = np.asarray(rows)
    diagonal = (np.arange(len(rows)), rows)
    itself = normalized[diagonal].copy()
    normalized[diagonal] = np.inf
    low = normalized.min(axis=1, keepdims=True)
    normalized[diagonal] = -np.inf
    high = normalized.max(axis=1, keepdims=True)
    normalized[diagonal] = itself
    span = high - low
    normalized -= low
    normalized /= np.where(span > 0, span, 1.0)
    return normalized


def band_masks(normalized: np.ndarray, eligible: np.ndarray, config: MixingConfig) -> np.ndarray:
    """(3, rows, M) membership of every candidate in the high / medium / low band (Eq. 27)."""
    masks = np.empty((3, *normalized.shape), dtype=bool)
    high, med, low = masks
    np.greater(normalized, config.high, out=high)
    np.less(normalized, config.low, out=low)
    np.logical_or(high, low, out=med)
    np.logical_not(med, out=med)
    for band in masks:
        np.logical_and(band, eligible, out=band)
    return masks


def eligible_mask(pool: ToolPool, in_scope: list[int], domains: Iterable[str]) -> np.ndarray:
    """Candidates: tools of other domains that are not in scope."""
    excluded = [pool.code_of(d) for d in set(domains)]
    eligible = ~np.isin(pool.domain_codes, excluded)
    eligible[in_scope] = False
    return eligible


def sample_from(mask: np.ndarray, k: int, rng: np.random.Generator, taken: np.ndarray) -> list[int]:
    candidates = np.flatnonzero(mask & ~taken)
    if len(candidates) <= k:
        return candidates.tolist()
    return sorted(rng.choice(candidates, size=k, replace=False).tolist())


def mix_bands(pool: ToolPool, in_scope_names: list[str], domains: Iterable[str], config: MixingConfig,
              rng: np.random.Generator) -> dict[str, list[str]]:
    """Distractor names per band for one instance (a tool is drawn into at most one band)."""
    in_scope = [pool.index[n] for n in in_scope_names if n in pool.index]
    if not in_scope or pool.embeddings is None:
        return {band: [] for band in BANDS}
    rows = np.array(in_scope)
    similarity = pool.embeddings[rows] @ pool.embeddings.T
    masks = band_masks(normalized_similarity(similarity, rows), eligible_mask(pool, in_scope, domains), config)
    instance_pools = masks.any(axis=1)  # Eq. 28: union over the in-scope tools
    taken = np.zeros(len(pool), dtype=bool)
    taken[in_scope] = True
    chosen: dict[str, list[str]] = {}
    for band, mask in zip(BANDS, instance_pools, strict=True):
        picked = sample_from(mask, config.k, rng, taken)
        taken[picked] = True
        chosen[band] = [pool.tools[i]["function"]["name"] for i in picked]
    return chosen


def mix_random(pool: ToolPool, in_scope_names: list[str], domains: Iterable[str], config: MixingConfig,
               rng: np.random.Generator) -> list[str]:
    in_scope = [pool.index[n] for n in in_scope_names if n in pool.index]
    eligible = eligible_mask(pool, in_scope, domains)
    for name in in_scope_names:  # never a distractor named like an in-scope tool
        if name in pool.index:
            eligible[pool.index[name]] = False
    count = int(rng.integers(config.random_min, config.random_max + 1))
    return [pool.tools[i]["function"]["name"] for i in sample_from(eligible, count, rng, np.zeros(len(pool), bool))]


def distractors(pool: ToolPool, in_scope_names: list[str], domains: Iterable[str], config: MixingConfig,
                seed) -> dict:
    """`{"mode", "bands"?, "names"}`: the distractors for one instance under `config.mode`."""
    rng = np.random.default_rng(seed)
    if config.mode == "none":
        return {"mode": "none", "names": []}
    if config.mode == "random":
        return {"mode": "random", "names": mix_random(pool, in_scope_names, domains, config, rng)}
    bands = mix_bands(pool, in_scope_names, domains, config, rng)
    return {"mode": "bands", "bands": bands, "names": [n for band in BANDS for n in bands[band]]}


def shuffled_tools(own: list[dict], extra: list[dict], seed) -> list[dict]:
    tools = list(own) + list(extra)
    random.Random(seed).shuffle(tools)
    return tools


# -- banding every tool of a pool at once (used by benchmarks/mixing.py) ---------------------------

def band_all(embeddings: np.ndarray, domain_codes: np.ndarray, config: MixingConfig, *, block: int = 512,
             seed: int = 0) -> np.ndarray:
    """For every tool i, up to K sampled candidates per band: (M, 3, K) int32 indices, -1 padded.

    Blocked matrix products: S for `block` rows at a time, Eq. 26 normalization, same-domain exclusion
    and banding as array operations. Sampling keeps, per row and band, the K members with the smallest
    uniform random keys (a uniform K-subset) without sorting whole rows: only members whose key falls
    below a per-row cut-off expected to admit ~4K of them are sorted; the rare row where fewer than K
    pass is redone exactly.
    """
    count = len(embeddings)
    rng = np.random.default_rng(seed)
    out = np.full((count, 3, config.k), -1, dtype=np.int32)
    for start in range(0, count, block):
        rows = np.arange(start, min(start + block, count))
        normalized = normalized_similarity(embeddings[rows] @ embeddings.T, rows)
        eligible = domain_codes[None, :] != domain_codes[rows, None]
        masks = band_masks(normalized, eligible, config)
        keys = rng.random(normalized.shape, dtype=np.float32)
        for b in range(3):
            out[rows, b] = _k_smallest_members(masks[b], keys, config.k)
    return out


def _k_smallest_members(mask: np.ndarray, keys: np.ndarray, k: int) -> np.ndarray:
    """Per row, the column indices of the (up to) k members of `mask` with the smallest keys, -1 padded."""
    sizes = mask.sum(axis=1)
    cutoff = np.minimum(1.0, 4.0 * k / np.maximum(sizes, 1)).astype(np.float32)
    r, c = np.nonzero(mask & (keys < cutoff[:, None]))
    order = np.lexsort((keys[r, c], r))
    r, c = r[order], c[order]
    starts = np.searchsorted(r, np.arange(len(mask)))
    rank = np.arange(len(r)) - starts[r]
    picks = np.full((len(mask), k), -1, dtype=np.int32)
    keep = rank < k
    picks[r[keep], rank[keep]] = c[keep]
    short = np.flatnonzero((picks >= 0).sum(axis=1) < np.minimum(sizes, k))
    for row in short:  # fewer than k under the cut-off (rare): take them exactly
        members = np.flatnonzero(mask[row])
        picks[row, : min(k, len(members))] = members[np.argsort(keys[row, members])[:k]]
    return picks


def band_all_loop(embeddings: np.ndarray, domain_codes: np.ndarray, config: MixingConfig, *, seed: int = 0) -> np.ndarray:
    """The baseline: the same computation one tool at a time (a Python loop over tools)."""
    count = len(embeddings)
    rng = np.random.default_rng(seed)
    out = np.full((count, 3, config.k), -1, dtype=np.int32)
    for i in range(count):
        similarity = embeddings @ embeddings[i]
        others = np.delete(similarity, i)
        low, high = others.min(), others.max()
        normalized = (similarity - low) / (high - low if high > low else 1.0)
        eligible = domain_codes != domain_codes[i]
        bands = (normalized > config.high, (normalized >= config.low) & (normalized <= config.high),
                 normalized < config.low)
        for b, band in enumerate(bands):
            candidates = np.flatnonzero(band & eligible)
            picked = candidates if len(candidates) <= config.k else rng.choice(candidates, config.k, replace=False)
            out[i, b, :len(picked)] = picked
    return out
