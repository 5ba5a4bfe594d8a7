"""`astra-grpo plot`: the figure a person reads (legend clear of the curves, runs named, y axes saying what
they count, fractions on 0..1)."""

import json

from astra_grpo import plot


def test_legend_above_the_panels_names_the_runs_and_axes_have_units(tmp_path, monkeypatch):
    runs = []
    for name, reward in (("sft-only", 0.2), ("sft+grpo", 0.4)):
        run = tmp_path / name
        run.mkdir()
        rows = [{"step": s, "rollout/reward_mean": reward + 0.01 * s, "valid_fraction": 0.9, "loss": 0.1 / s}
                for s in (1, 2, 3)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs.append(str(run))
    plt = plot.pyplot()
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    plot.plot_runs(runs, str(tmp_path / "curves.png"), labels=["SFT only", "SFT then GRPO"])
    [figure] = kept
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    [legend] = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == ["SFT only", "SFT then GRPO"]
    panels = [axis for axis in figure.axes if axis.get_visible()]
    assert len(panels) == 3
    assert not any(legend.get_window_extent(renderer).overlaps(axis.get_window_extent(renderer)) for axis in panels)
    by_title = {axis.get_title(): axis for axis in panels}
    assert by_title["valid group fraction (ABF)"].get_ylim()[1] >= 1.0  # 0.9 is not drawn as the whole panel
    assert all(axis.get_ylabel() for axis in panels)
    assert all(line.get_marker() == "o" for axis in panels for line in axis.get_lines())  # 3 steps: points shown
    figure.clf()


def _drawn(tmp_path, monkeypatch, rows) -> dict:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plt = plot.pyplot()
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    plot.plot_runs([str(run)], str(tmp_path / "curves.png"))
    [figure] = kept
    return {axis.get_title(): axis for axis in figure.axes if axis.get_visible()}


def test_a_reward_inside_0_1_is_drawn_on_0_1_and_a_constant_rate_from_0(tmp_path, monkeypatch):
    # the demo's two steps: 0.5 then 0.4965 filled the whole panel, a flat reward drawn as a fall
    panels = _drawn(tmp_path, monkeypatch, [{"step": 1, "rollout/reward_mean": 0.5, "lr": 1e-5},
                                            {"step": 2, "rollout/reward_mean": 0.4965, "lr": 1e-5}])
    low, high = panels["reward (all rollouts)"].get_ylim()
    assert low <= 0 and high >= 1
    assert panels["learning rate"].get_ylim()[0] == 0


def test_a_reward_outside_0_1_keeps_its_own_scale(tmp_path, monkeypatch):
    panels = _drawn(tmp_path, monkeypatch, [{"step": 1, "rollout/reward_mean": 2.0},
                                            {"step": 2, "rollout/reward_mean": 3.0}])
    low, high = panels["reward (all rollouts)"].get_ylim()
    assert low > 1 and high < 4
