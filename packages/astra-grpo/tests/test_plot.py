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
