"""Dataset statistics of trajectories (paper appendix A.1.1, Figures 9-10): a table and PNG plots.

Messages per sample, tool calls per sample, role shares, unique tools called, tool-call failures.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from astra_core.extras import require

ROLES = ("system", "user", "assistant", "tool")


@dataclass
class DatasetStats:
    messages_per_sample: list[int] = field(default_factory=list)
    tool_calls_per_sample: list[int] = field(default_factory=list)
    roles: Counter = field(default_factory=Counter)
    tools: Counter = field(default_factory=Counter)  # calls per tool name
    failed_calls: int = 0  # tool messages that are errors ("Error: ...")

    @property
    def samples(self) -> int:
        return len(self.messages_per_sample)

    def add(self, trajectory: dict) -> None:
        messages = trajectory["messages"]
        self.messages_per_sample.append(len(messages))
        calls = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        self.tool_calls_per_sample.append(len(calls))
        self.roles.update(m["role"] for m in messages)
        self.tools.update(c["function"]["name"] for c in calls)
        self.failed_calls += sum(1 for m in messages if m["role"] == "tool"
                                 and (m.get("content") or "").lstrip().lower().startswith("error"))

    def summary(self) -> dict:
        messages, calls = self.messages_per_sample, self.tool_calls_per_sample
        total_messages, total_calls = sum(messages), sum(calls)
        return {
            "samples": self.samples,
            "messages": total_messages,
            "messages_per_sample_mean": round(statistics.fmean(messages), 2) if messages else 0.0,
            "messages_per_sample_median": statistics.median(messages) if messages else 0,
            "messages_per_sample_max": max(messages, default=0),
            "tool_calls": total_calls,
            "tool_calls_per_sample_mean": round(statistics.fmean(calls), 2) if calls else 0.0,
            "samples_with_tool_calls": sum(1 for c in calls if c > 0),
            "samples_with_1_to_5_calls": sum(1 for c in calls if 1 <= c <= 5),
            "role_shares": {role: round(self.roles[role] / total_messages, 4) if total_messages else 0.0
                            for role in ROLES},
            "unique_tools": len(self.tools),
            "failed_tool_calls": self.failed_calls,
        }


def collect(trajectories: Iterable[dict]) -> DatasetStats:
    stats = DatasetStats()
    for trajectory in trajectories:
        stats.add(trajectory)
    return stats


def table(stats: DatasetStats) -> str:
    s = stats.summary()

    def pct(part: int, whole: int) -> str:
        return f"{100 * part / whole:.1f}%" if whole else "-"

    rows = [
        ("samples", f"{s['samples']:,}"),
        ("messages", f"{s['messages']:,}"),
        ("messages per sample (mean / median / max)",
         f"{s['messages_per_sample_mean']} / {s['messages_per_sample_median']} / {s['messages_per_sample_max']}"),
        ("tool calls", f"{s['tool_calls']:,}"),
        ("tool calls per sample (mean)", f"{s['tool_calls_per_sample_mean']}"),
        ("samples with tool calls", f"{s['samples_with_tool_calls']:,} ({pct(s['samples_with_tool_calls'], s['samples'])})"),
        ("samples with 1-5 tool calls",
         f"{s['samples_with_1_to_5_calls']:,} ({pct(s['samples_with_1_to_5_calls'], s['samples'])})"),
        *((f"role share: {role}", f"{100 * share:.1f}%") for role, share in s["role_shares"].items()),
        ("unique tools called", f"{s['unique_tools']:,}"),
        ("failed tool calls", f"{s['failed_tool_calls']:,} ({pct(s['failed_tool_calls'], s['tool_calls'])})"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows) + "\n"


def _histogram(ax, values: list[int], xlabel: str) -> None:
    top = max(values, default=0)
    from matplotlib.ticker import MaxNLocator

    ax.hist(values, bins=range(0, top + 2), align="left", color="#4C72B0", edgecolor="white")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("samples")
    for axis in (ax.xaxis, ax.yaxis):  # counts: whole-number ticks
        axis.set_major_locator(MaxNLocator(integer=True))


def pyplot():
    """matplotlib.pyplot on the Agg backend; MissingExtra naming the `plots` extra when matplotlib is absent."""
    matplotlib = require("matplotlib", extra="astra-toolgraph[plots]", needed_by="astra-toolgraph stats --plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(stats: DatasetStats, out_dir: str | Path, top_tools: int = 20) -> list[Path]:
    """Write the four figures as PNGs into `out_dir`; return their paths."""
    plt = pyplot()

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def save(fig, name: str) -> None:
        path = out / name
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    fig, ax = plt.subplots(figsize=(6, 4))
    _histogram(ax, stats.messages_per_sample, "messages per sample")
    ax.set_title(f"Messages per sample (mean {stats.summary()['messages_per_sample_mean']})")
    save(fig, "messages_per_sample.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    _histogram(ax, stats.tool_calls_per_sample, "tool calls per sample")
    ax.set_title(f"Tool calls per sample (mean {stats.summary()['tool_calls_per_sample_mean']})")
    save(fig, "tool_calls_per_sample.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    shares = stats.summary()["role_shares"]
    ax.bar(list(shares), [100 * v for v in shares.values()], color=["#8172B2", "#55A868", "#4C72B0", "#C44E52"])
    ax.set_ylabel("% of messages")
    ax.set_title("Role shares")
    save(fig, "role_shares.png")

    fig, ax = plt.subplots(figsize=(7, max(3, 0.3 * min(top_tools, len(stats.tools)) + 1)))
    common = stats.tools.most_common(top_tools)[::-1]
    ax.barh([name for name, _ in common], [count for _, count in common], color="#4C72B0")
    ax.set_xlabel("calls")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # counts: whole-number ticks
    ax.set_title(f"Tools called ({len(stats.tools)} unique; top {len(common)})")
    save(fig, "unique_tools.png")
    return written
