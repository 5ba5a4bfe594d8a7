"""Figures from eval_result records, shaped like the ASTRA paper's tables.

- Agentic (Tables 1–2): BFCL-MT Base / Missing Func / Missing Param / Long Context / Overall (mean of
  the four); tau2-Bench Retail / Telecom / Overall (mean of the two; airline is reported apart, as the
  paper leaves it out); ACEBench Multi Turn / Multi Step / Overall (mean of the two; end-to-end accuracy).
- tau2 reliability (AReaL-SEA Table 1): pass^1..pass^k and pass@k per domain, k up to the trials run.
- ACEBench process accuracy per split.
- Non-agentic (Table 3): AIME2024 / AIME2025 / Avg per decoding setting, and the mean of the settings.

All figures are percentages. A benchmark figure averages its items over every trial run.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from astra_core.extras import require
from astra_core.jsonl import MalformedLine, iter_raw_lines, parse_line

from astra_eval.metrics import mean_pass, task_outcomes

BFCL = [("multi_turn_base", "Base"), ("multi_turn_miss_func", "Missing Func"),
        ("multi_turn_miss_param", "Missing Param"), ("multi_turn_long_context", "Long Context")]
TAU2 = [("retail", "Retail"), ("telecom", "Telecom")]
ACE = [("multi_turn", "Multi Turn"), ("multi_step", "Multi Step")]
AIME = [("aime2024", "AIME2024"), ("aime2025", "AIME2025")]
AIME_SETTINGS = [("topk20", "top-k 20"), ("topk-1", "top-k -1")]

Figures = dict[tuple[str, str], float]  # (group, column) -> percent


@dataclass
class Loaded:
    """The eval_result records read, and the lines that are not one (each with its source and reason)."""

    records: list[dict] = field(default_factory=list)
    rejects: list[dict] = field(default_factory=list)

    @property
    def read(self) -> int:
        return len(self.records) + len(self.rejects)


# What the figures read of an eval_result, checked before any is computed: the shared schema's record, a score that
# is a share of the item solved (astra-core's eval_result schema types it only as a number), and the labels that
# group the records (a setting or language that is not a string would break the grouping).
_SHARE = {"type": "number", "minimum": 0, "maximum": 1}
_LABEL = {"type": ["string", "null"]}
EVAL_INPUT = {
    "title": "eval_result",
    "allOf": [{"$ref": "https://astra-toolkit.dev/schemas/eval_result.json"},
              {"properties": {"score": _SHARE, "setting": _LABEL, "language": _LABEL,
                              "details": {"properties": {"language": _LABEL, "process_accuracy": _SHARE}}}}],
}


def result_files(paths: Iterable[str | Path]) -> list[str]:
    """Files as given ('-' is stdin), a directory as every *.jsonl under it."""
    files: list[str] = []
    for path in map(str, paths):
        files += sorted(map(str, Path(path).rglob("*.jsonl"))) if Path(path).is_dir() else [path]
    return files


def trial_key(record: dict, *, by_model: bool = True) -> tuple:
    """What one record is the outcome of: (model,) benchmark, category, setting or language, item, trial."""
    language = record.get("language") or record.get("details", {}).get("language")
    return ((model_of(record),) if by_model else ()) + (
        record["benchmark"], record["category"], record.get("setting") or language, record["item_id"], record["trial"])


def load(paths: Iterable[str | Path], *, by_model: bool = True) -> Loaded:
    """The eval_result records of files or directories (one run). A line that is not a valid eval_result (a
    `success` that is not a boolean, a missing score, a score outside [0, 1], ...) counts in no figure: it is a
    reject with the reason and the line. So is a second record of an item's trial (of one model, or of the run
    with by_model=False): it would count that trial twice; the first is kept and the reject names both."""
    loaded = Loaded()
    first: dict[tuple, tuple[str, str]] = {}  # trial key -> (id, file:line) of the record kept
    for source, lineno, raw in iter_raw_lines(result_files(paths)):
        where = f"{source}:{lineno}"
        try:
            record = parse_line(source, lineno, raw, EVAL_INPUT).record
        except MalformedLine as bad:
            named = f"field {bad.field}: " if bad.field else ""
            loaded.rejects.append({"id": bad.record_id, "reason": f"malformed: {named}{bad.message}", "source": where,
                                   "line": raw.decode("utf-8", "replace").rstrip("\r\n")})
            continue
        key = trial_key(record, by_model=by_model)
        if key in first:
            kept_id, kept_where = first[key]
            loaded.rejects.append({
                "id": record["id"], "source": where, "record": record,
                "reason": f"duplicate trial: trial {record['trial']} of item {record['item_id']!r} "
                          f"({' '.join(str(k) for k in key[-5:-2] if k)}) is both record {kept_id!r} ({kept_where}), "
                          f"which counts, and record {record['id']!r} ({where})"})
            continue
        first[key] = (record["id"], where)
        loaded.records.append(record)
    return loaded


def model_of(record: dict) -> str:
    for step in reversed(record.get("meta", {}).get("provenance", [])):
        if str(step.get("command", "")).startswith("astra-eval run"):
            return step.get("model") or "?"
    return "?"


def _mean(values: list[float]) -> float | None:
    return 100.0 * statistics.fmean(values) if values else None


def _put(figures: Figures, key: tuple[str, str], value: float | None) -> None:
    if value is not None:
        figures[key] = value


def _overall(figures: Figures, group: str, columns: list[str]) -> None:
    present = [figures[(group, c)] for c in columns if (group, c) in figures]
    if present:
        figures[(group, "Overall")] = statistics.fmean(present)


def figures(records: list[dict]) -> Figures:
    """Every figure the records support (one model's or one run's records)."""
    by: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        language = record.get("language") or record.get("details", {}).get("language")
        by[(record["benchmark"], record["category"], record.get("setting") or language)].append(record)
    out: Figures = {}
    for category, label in BFCL:
        _put(out, ("BFCL-MT", label), _mean([r["score"] for r in by.get(("bfcl", category, None), [])]))
    _overall(out, "BFCL-MT", [label for _, label in BFCL])
    for domain, label in [*TAU2, ("airline", "Airline")]:
        rows = by.get(("tau2", domain, None), [])
        if not rows:
            continue
        outcomes = task_outcomes(rows)
        trials = min(len(t) for t in outcomes.values())
        out[("tau2-Bench", label)] = 100.0 * mean_pass(outcomes, 1)
        for k in range(1, trials + 1):
            out[(f"tau2 {domain}", f"pass^{k}")] = 100.0 * mean_pass(outcomes, k)
        out[(f"tau2 {domain}", f"pass@{trials}")] = 100.0 * mean_pass(outcomes, trials, at=True)
    _overall(out, "tau2-Bench", [label for _, label in TAU2])
    for language in ("en", "zh"):
        group = "ACEBench" if language == "en" else "ACEBench (zh)"
        for split, label in ACE:
            rows = by.get(("acebench", split, language), [])
            _put(out, (group, label), _mean([r["score"] for r in rows]))
            _put(out, (f"{group} process", label),
                 _mean([r["details"].get("process_accuracy", 0.0) for r in rows]))
        _overall(out, group, [label for _, label in ACE])
    settings_done = []
    for setting, setting_label in AIME_SETTINGS:
        group = f"AIME {setting_label}"
        for year, label in AIME:
            _put(out, (group, label), _mean([r["score"] for r in by.get(("aime", year, setting), [])]))
        present = [out[(group, label)] for _, label in AIME if (group, label) in out]
        if present:
            out[(group, "Avg")] = statistics.fmean(present)
            settings_done.append(out[(group, "Avg")])
    if settings_done:
        out[("AIME", "Final")] = statistics.fmean(settings_done)
    return out


def failures(records: list[dict]) -> dict[str, int]:
    """Items that errored (timeouts, endpoint errors, ...), by kind: they count as failures above."""
    counts: dict[str, int] = defaultdict(int)
    for record in records:
        if record.get("error"):
            counts[record["error"].split(":", 1)[0]] += 1
    return dict(counts)


@dataclass
class Errors:
    """Of one model's items of one benchmark: how many were attempted (every record) and how many errored."""

    attempted: int = 0
    errored: int = 0
    kinds: Counter = field(default_factory=Counter)


def errors(records: list[dict]) -> dict[tuple[str, str], Errors]:
    """(model, benchmark) -> attempted items and errors by kind. Every figure divides by `attempted`."""
    out: dict[tuple[str, str], Errors] = defaultdict(Errors)
    for record in records:
        counts = out[(model_of(record), record["benchmark"])]
        counts.attempted += 1
        if record.get("error"):
            counts.errored += 1
            counts.kinds[record["error"].split(":", 1)[0]] += 1
    return dict(sorted(out.items()))


def render_errors(table: dict[tuple[str, str], Errors]) -> str:
    lines = ["Errors (items that raised while running; scored 0 and counted in every figure above)"]
    for (model, benchmark), counts in table.items():
        kinds = ", ".join(f"{kind} ×{n}" for kind, n in counts.kinds.most_common())
        lines.append(f"  {model} {benchmark}: {counts.errored} of {counts.attempted} items"
                     + (f" ({kinds})" if kinds else ""))
    return "\n".join(lines)


# -- tables -----------------------------------------------------------------------------------------

TABLES = [
    ("Agentic benchmarks (paper Tables 1-2)", ["BFCL-MT", "tau2-Bench", "ACEBench", "ACEBench (zh)"]),
    ("tau2-Bench reliability (pass^k: all k trials succeed; pass@k: at least one)",
     ["tau2 retail", "tau2 telecom", "tau2 airline"]),
    ("ACEBench process accuracy", ["ACEBench process", "ACEBench (zh) process"]),
    ("Non-agentic benchmarks (paper Table 3; temperature 0.6, top-p 0.95)",
     ["AIME top-k 20", "AIME top-k -1", "AIME"]),
]


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def render(rows: dict[str, Figures], *, label: str = "Model") -> str:
    """Text tables: one row per model/run, one column per figure present in any row."""
    blocks = []
    for title, groups in TABLES:
        columns = []
        for group in groups:
            seen = []
            for figs in rows.values():
                seen += [column for (g, column) in figs if g == group and column not in seen]
            columns += [(group, column) for column in _ordered(group, seen)]
        if not columns:
            continue
        header_groups = [group for group, _ in columns]
        header_cols = [column for _, column in columns]
        widths = [max(len(g), len(c), 6) for g, c in columns]
        name_width = max([len(label), *map(len, rows)])
        lines = [title,
                 " " * name_width + "  " + "  ".join(_group_header(header_groups, i, w) for i, w in enumerate(widths)),
                 label.ljust(name_width) + "  " + "  ".join(c.rjust(w) for c, w in zip(header_cols, widths, strict=True))]
        lines.append("-" * len(lines[-1]))
        for name, figs in rows.items():
            cells = [_fmt(figs.get(key)).rjust(w) for key, w in zip(columns, widths, strict=True)]
            lines.append(name.ljust(name_width) + "  " + "  ".join(cells))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) if blocks else "(no eval_result records)"


def _group_header(groups: list[str], index: int, width: int) -> str:
    first = index == 0 or groups[index - 1] != groups[index]
    return (groups[index] if first else "").ljust(width)[:width]


_ORDER = {label: i for i, label in enumerate(
    [lab for _, lab in BFCL] + [lab for _, lab in TAU2] + [lab for _, lab in ACE]
    + [lab for _, lab in AIME] + ["Avg", "Overall", "Final", "Airline"])}


def _ordered(group: str, columns: list[str]) -> list[str]:
    def key(column: str) -> tuple:
        if column.startswith("pass"):
            return (column.startswith("pass@"), int(column.split("^")[-1].split("@")[-1]))
        return (_ORDER.get(column, 99), column)

    return sorted(columns, key=key)


def by_model(records: list[dict]) -> dict[str, Figures]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        grouped[model_of(record)].append(record)
    return {model: figures(rows) for model, rows in grouped.items()}


def headline(figs: Figures) -> dict[str, float]:
    """The figures a comparison chart shows: every agentic/AIME column, by 'group: column'."""
    keep = ("BFCL-MT", "tau2-Bench", "ACEBench", "ACEBench (zh)", "AIME top-k 20", "AIME top-k -1", "AIME")
    return {f"{group}: {column}": value for (group, column), value in figs.items() if group in keep}


def pyplot():
    """matplotlib.pyplot on the Agg backend; MissingExtra naming the `plots` extra when matplotlib is absent."""
    matplotlib = require("matplotlib", extra="astra-eval[plots]", needed_by="astra-eval compare --png")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


CHART_GROUPS = ("BFCL-MT", "tau2-Bench", "ACEBench", "ACEBench (zh)", "AIME top-k 20", "AIME top-k -1")
PANEL_TITLES = {"AIME top-k 20": "AIME (sampled with top-k 20)", "AIME top-k -1": "AIME (sampled without top-k)"}
# Tick labels that say what a column averages: tau2's Overall is the paper's (the TAU2 domains); airline is extra.
TICK_LABELS = {("tau2-Bench", "Overall"): f"Overall ({', '.join(label for _, label in TAU2)})",
               ("tau2-Bench", "Airline"): "Airline (not in Overall)"}


def bar_chart(runs: dict[str, Figures], path: str | Path) -> None:
    """A grouped bar chart (one panel per benchmark, one bar per run, at most 3 panels a row) written as
    PNG; the legend names the runs above the panels, where it covers no bar."""
    fig = bar_figure(runs)
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


def bar_figure(runs: dict[str, Figures]):
    plt = pyplot()
    groups = [g for g in CHART_GROUPS if any(g == key[0] for figs in runs.values() for key in figs)]
    if not groups:
        raise ValueError("no figures to plot")
    ncols = min(3, len(groups))
    nrows = -(-len(groups) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.3 * nrows + 0.8), squeeze=False,
                             layout="constrained")
    for ax, group in zip(axes.flat, groups, strict=False):
        _bar_panel(ax, group, runs)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=min(len(runs), 4), fontsize=8, frameon=False)
    fig.supxlabel("a bar's number: its score; '–': the run has no result for that figure", fontsize=7)
    return fig


def _bar_panel(ax, group: str, runs: dict[str, Figures]) -> None:
    columns = _ordered(group, sorted({c for figs in runs.values() for (g, c) in figs if g == group}))
    width = 0.8 / max(len(runs), 1)
    for index, (name, figs) in enumerate(runs.items()):
        values = [figs.get((group, c), float("nan")) for c in columns]  # a run without the figure: no bar
        positions = [i + (index - (len(runs) - 1) / 2) * width for i in range(len(columns))]
        bars = ax.bar(positions, values, width, label=name)
        ax.bar_label(bars, labels=["" if v != v else f"{v:.0f}" for v in values], fontsize=7)
        for x, value in zip(positions, values, strict=True):
            if value != value:
                ax.text(x, 1.5, "–", ha="center", va="bottom", fontsize=8, color="0.5")
    ax.set_title(PANEL_TITLES.get(group, group))
    ax.set_xticks(range(len(columns)), [TICK_LABELS.get((group, c), c) for c in columns], rotation=30, ha="right",
                  fontsize=8)
    ax.set_xlim(-0.5, len(columns) - 0.5)  # every run's slot, with a bar or not
    ax.set_ylim(0, 112)
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("problems solved (%)" if group.startswith("AIME") else "score (% of items)")
