"""Irrelevant-tool mixing (Eq. 24–28): bands on hand-made similarity matrices, exclusions, modes."""

import numpy as np
import pytest
from astra_qaenv.mixing import (
    MixingConfig,
    ToolPool,
    band_all,
    band_all_loop,
    band_masks,
    dedup_tools,
    distractors,
    normalized_similarity,
    unit_rows,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def tool(name):
    return {"type": "function", "function": {"name": name, "description": name, "parameters": {"type": "object"}}}


def test_min_max_normalization_excludes_self():
    similarity = np.array([[1.0, 0.9, 0.5, 0.1, 0.3]])
    normalized = normalized_similarity(similarity, np.array([0]))
    np.testing.assert_allclose(normalized[0, 1:], [1.0, 0.5, 0.0, 0.25], atol=1e-6)


def test_band_membership_on_a_hand_made_matrix():
    # rows: tools 0 and 1 in scope; normalized similarities chosen to hit every band and both boundaries
    normalized = np.array([[9.9, 0.86, 0.85, 0.40, 0.39, 0.0],
                           [0.10, 9.9, 0.95, 0.5, 0.2, 0.41]])
    eligible = np.array([False, False, True, True, True, True])
    high, med, low = band_masks(normalized, eligible, MixingConfig())
    assert high.tolist() == [[False] * 6, [False, False, True, False, False, False]]
    assert med.tolist() == [[False, False, True, True, False, False], [False, False, False, True, False, True]]
    assert low.tolist() == [[False, False, False, False, True, True], [False, False, False, False, True, False]]
    # in-scope tools (not eligible) are in no band, whatever their similarity
    assert not (high | med | low)[:, :2].any()


def angle_pool(angles, domains):
    """Tools as 2-D unit vectors: cosine similarity is the cosine of the angle between them."""
    vectors = unit_rows([[np.cos(np.radians(a)), np.sin(np.radians(a))] for a in angles])
    return ToolPool([tool(f"t{i}") for i in range(len(angles))], domains, vectors)


def test_bands_from_embeddings_and_same_domain_exclusion():
    # t0 in scope. cos to t0: t1 1.0 (same domain as t0), t2 0.98, t3 0.5, t4 0.0, t5 -1.0
    pool = angle_pool([0, 0, 11.5, 60, 90, 180], ["a", "a", "b", "c", "b", "c"])
    mix = distractors(pool, ["t0"], ["a"], MixingConfig(k=3), seed=0)
    # normalized over j != 0: min -1, max 1 -> t2 0.99 (high), t3 0.75 (med), t4 0.5 (med), t5 0 (low)
    assert mix["bands"]["high"] == ["t2"]
    assert sorted(mix["bands"]["med"]) == ["t3", "t4"]
    assert mix["bands"]["low"] == ["t5"]
    assert "t1" not in mix["names"] and "t0" not in mix["names"]  # same domain, in scope


def test_k_caps_each_band():
    pool = angle_pool([0] + [170 + i for i in range(10)] + [1], ["a"] + ["b"] * 10 + ["c"])
    mix = distractors(pool, ["t0"], ["a"], MixingConfig(k=2), seed=3)
    assert len(mix["bands"]["low"]) == 2 and mix["bands"]["high"] == ["t11"]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(6, 60), st.integers(1, 4), st.sampled_from(["bands", "random"]))
def test_same_domain_and_in_scope_tools_never_appear(seed, size, n_scope, mode):
    rng = np.random.default_rng(seed)
    domains = [f"d{rng.integers(0, 4)}" for _ in range(size)]
    pool = ToolPool([tool(f"t{i}") for i in range(size)], domains, unit_rows(rng.normal(size=(size, 8))))
    domain = domains[0]
    scope = [f"t{i}" for i in range(size) if domains[i] == domain][:n_scope]
    mix = distractors(pool, scope, [domain], MixingConfig(mode=mode, k=2), seed=seed)
    names = mix["names"]
    assert len(names) == len(set(names))
    assert not set(names) & set(scope)
    assert all(domains[pool.index[n]] != domain for n in names)
    eligible = sum(d != domain for d in domains)
    if mode == "bands":
        assert len(names) <= 6 and (eligible == 0) == (not names)
        rows = np.array([pool.index[n] for n in scope])
        normalized = normalized_similarity(pool.embeddings[rows] @ pool.embeddings.T, rows)
        for band, (lo, hi) in {"high": (0.85, np.inf), "med": (0.4, 0.85), "low": (-np.inf, 0.4)}.items():
            for name in mix["bands"][band]:  # each pick is in its band for at least one in-scope tool
                values = normalized[:, pool.index[name]]
                inside = (values > lo) & (values < hi) if band != "med" else (values >= lo) & (values <= hi)
                assert inside.any()
    else:
        assert min(5, eligible) <= len(names) <= 9


def test_none_mode_and_dedup_by_name():
    pool = angle_pool([0, 90], ["a", "b"])
    assert distractors(pool, ["t0"], ["a"], MixingConfig(mode="none"), seed=0) == {"mode": "none", "names": []}
    tools, domains = dedup_tools([(tool("x"), "a"), (tool("x"), "b"), (tool("y"), None)])
    assert [t["function"]["name"] for t in tools] == ["x", "y"] and domains == ["a", "unknown"]


@pytest.mark.parametrize("block", [7, 64])
def test_vectorized_banding_agrees_with_the_per_tool_loop(block):
    rng = np.random.default_rng(0)
    embeddings = unit_rows(rng.normal(size=(50, 16)))
    codes = rng.integers(0, 5, size=50).astype(np.int32)
    config = MixingConfig(k=3)
    fast, slow = band_all(embeddings, codes, config, block=block), band_all_loop(embeddings, codes, config)
    for i in range(50):
        row = normalized_similarity((embeddings @ embeddings[i])[None, :], np.array([i]))[0]
        masks = band_masks(row[None, :], (codes != codes[i])[None, :], config)[:, 0]
        for b in range(3):
            size = int(masks[b].sum())
            for picks in (fast[i, b], slow[i, b]):
                chosen = picks[picks >= 0]
                assert len(chosen) == min(3, size) and masks[b][chosen].all()


def test_crossed_bounds_are_config_errors_naming_the_field():
    import pytest
    from astra_core.config import ConfigError, load_config
    from astra_qaenv.export_config import ExportConfig
    from astra_qaenv.synthesize import SynthesisConfig

    with pytest.raises(ConfigError, match="config field low: 0.9 is above high 0.5"):
        load_config(ExportConfig, None, {"low": 0.9, "high": 0.5})
    with pytest.raises(ConfigError, match="config field random_min: 7 is above random_max 3"):
        load_config(ExportConfig, None, {"random_min": 7, "random_max": 3})
    with pytest.raises(ConfigError, match="config field high: must be between 0 and 1"):
        load_config(ExportConfig, None, {"high": 1.5})
    with pytest.raises(ConfigError, match="config field min_hops: 5 is above max_hops 4"):
        load_config(SynthesisConfig, None, {"min_hops": 5})
