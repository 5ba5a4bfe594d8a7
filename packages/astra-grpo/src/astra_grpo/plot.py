"""Training curves from one or more runs' metrics.jsonl (paper Figure 8 style: turns per trajectory
over training, one line per run, e.g. the F1 / recall-only / precision-only reward ablation)."""

from __future__ import annotations

import json
from pathlib import Path

from astra_core.extras import require

from astra_grpo.tracking import METRICS_FILE

# (metric, panel title) in drawing order; panels whose metric no run has are left out.
PANELS = [
    ("rollout/turns_mean", "turns per trajectory"),
    ("rollout/reward_mean", "reward (all rollouts)"),
    ("rollout/tool_calls_mean", "tool calls per trajectory"),
    ("rollout/response_tokens_mean", "generated tokens per trajectory"),
    ("valid_fraction", "valid group fraction (ABF)"),
    ("rollout/format_validity", "well-formed tool calls"),
    ("loss", "loss"),
    ("grad_norm", "gradient norm"),
    ("lr", "learning rate"),
]
# The y axis of each panel: what its numbers count. Fractions are drawn on 0..1, so a small change is not
# magnified to fill the panel.
UNITS = {
    "rollout/turns_mean": "assistant turns (mean)",
    "rollout/reward_mean": "reward, 0-1 (mean)",
    "rollout/tool_calls_mean": "tool calls (mean)",
    "rollout/response_tokens_mean": "tokens (mean)",
    "valid_fraction": "share of groups",
    "rollout/format_validity": "share of tool calls",
    "loss": "policy loss",
    "grad_norm": "L2 norm (before clipping)",
    "lr": "learning rate",
}
FRACTIONS = {"valid_fraction", "rollout/format_validity"}
# Drawn on 0..1 too when every value lies there (an F1 or tau2 reward; a custom reward may not).
UNIT_INTERVAL_IF_INSIDE = {"rollout/reward_mean"}
# Drawn from 0: a constant or slowly decaying rate is not magnified into a slope.
FROM_ZERO = {"lr"}
MARKERS_UP_TO = 30  # steps: fewer points than this are drawn with markers (two points are not a trend)


def read_metrics(run: str | Path) -> list[dict]:
    path = Path(run)
    path = path / METRICS_FILE if path.is_dir() else path
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def smooth(values: list[float], window: int) -> list[float]:
    if window <= 1:
        return values
    out, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        out.append(total / min(index + 1, window))
    return out


def pyplot():
    """matplotlib.pyplot on the Agg backend; MissingExtra naming the `plots` extra when matplotlib is absent."""
    matplotlib = require("matplotlib", extra="astra-grpo[plots]", needed_by="astra-grpo plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_runs(runs: list[str], output: str, *, labels: list[str] | None = None, metrics: list[str] | None = None,
              window: int = 1, title: str | None = None) -> list[str]:
    """Draw the panels to `output` (PNG/PDF/SVG by extension); returns the metrics drawn."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    histories = [read_metrics(run) for run in runs]
    labels = labels or [Path(run).name or str(run) for run in runs]
    wanted = [(m, t) for m, t in PANELS if metrics is None or m in metrics]
    wanted += [(m, m) for m in (metrics or []) if m not in dict(PANELS)]
    drawn = [(m, t) for m, t in wanted if any(m in row for rows in histories for row in rows)]
    if not drawn:
        raise ValueError(f"none of the metrics {[m for m, _ in wanted]} is in {', '.join(map(str, runs))}")
    columns = min(3, len(drawn))
    rows = (len(drawn) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows + 0.4 * (len(runs) > 1)),
                                squeeze=False, layout="constrained")
    for axis, (metric, panel) in zip(axes.flat, drawn, strict=False):
        _panel(axis, metric, panel, histories, labels, window)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    for axis in list(axes.flat)[len(drawn):]:
        axis.set_visible(False)
    if title:
        figure.suptitle(title)
    if len(runs) > 1:  # above the panels, where it covers no curve
        handles, names = axes.flat[0].get_legend_handles_labels()
        figure.legend(handles, names, loc="outside upper center", ncol=min(len(runs), 4), fontsize=8, frameon=False)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=120)
    plt.close(figure)
    return [m for m, _ in drawn]


def _panel(axis, metric: str, panel: str, histories: list[list[dict]], labels: list[str], window: int) -> None:
    drawn = []
    for history, label in zip(histories, labels, strict=True):
        points = [(row["step"], row[metric]) for row in history if metric in row]
        drawn += [value for _, value in points]
        if points:
            steps, values = zip(*points, strict=True)
            axis.plot(steps, smooth(list(values), window), label=label, linewidth=1.6,
                      marker="o" if len(points) < MARKERS_UP_TO else None, markersize=4)
    axis.set_title(panel, fontsize=10)
    axis.set_xlabel("training step")
    axis.set_ylabel(UNITS.get(metric, ""), fontsize=8)
    if metric in FRACTIONS or (metric in UNIT_INTERVAL_IF_INSIDE and drawn and 0 <= min(drawn) <= max(drawn) <= 1):
        axis.set_ylim(-0.03, 1.03)
    elif metric in FROM_ZERO and drawn and min(drawn) >= 0:
        axis.set_ylim(bottom=0, top=max(drawn) * 1.1 or 1)
    axis.grid(alpha=0.3)
