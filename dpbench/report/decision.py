"""The decision view: per workload, which configuration is fastest and what changed between runs.

Per workload, on the newest run that has it:

- a heatmap (strategies × world sizes) of **× single at the same global batch**: each
  configuration's throughput over single's, trial i against trial i (:func:`configs.vs_single`,
  the one ratio of the page); framed and bold where its 95% interval excludes 1;
- for the weak-scaling suite a heatmap of the saved **scaling efficiency** (a different
  quantity, named as such: N replicas on N times the samples against N × single);
- one headline per workload (:func:`dpbench.report.decision_text.headline`, at the batch with the
  most configurations): the fastest configuration only where its trials beat every other one's
  significantly, else the configurations level with the best;
- with two or more runs, the change of every configuration between the first run and each later
  one, coloured by the gate's own verdict (:func:`dpbench.gate.compare.compare_frames`).

It renders saved numbers and the gate's verdicts; it judges nothing itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import matplotlib
import matplotlib.colors
import pandas as pd

from dpbench.gate.compare import BenchmarkComparison, Comparison, Verdict
from dpbench.gate.formats import HEADER
from dpbench.gate.formats import rows as gate_rows
from dpbench.decision.configs import SINGLE, single_for, vs_single
from dpbench.report.decision_text import headline
from dpbench.report.figures import strategy_color
from dpbench.report.summary import ci_name, fastest_line, sentence
from dpbench.results.units import fmt_ratio
from dpbench.stats import MIN_CLAIM_CONFIDENCE

__all__ = ["Cell", "Grid", "RunComparison", "VERDICT_COLOURS", "WorkloadDecision", "decisions"]

# The gate's verdicts as colours, the same in the heatmaps and the comparison tables.
VERDICT_COLOURS = {
    Verdict.REGRESSED: "#ef9a9a",
    Verdict.IMPROVED: "#a5d6a7",
    Verdict.UNCHANGED: "#eceff3",
    Verdict.INCONCLUSIVE: "#ffe082",
    Verdict.INCOMPARABLE: "#ffffff",
    Verdict.MISSING: "#ffffff",
    Verdict.NEW: "#ffffff",
}
_RATIO_SPAN = 2.0  # log2 units at which the colour saturates: 4× faster or slower


@dataclass(kw_only=True)
class Cell:
    text: str
    title: str  # the whole claim, as a tooltip
    background: str = "#ffffff"
    dark: bool = False  # white text on a dark background
    strong: bool = False  # framed: the interval excludes 1
    verdict: str = ""


@dataclass(kw_only=True)
class Grid:
    title: str
    caption: str
    corner: str  # what the rows are, above the row labels
    columns: list[str]
    rows: list[tuple[str, str, list[Cell | None]]]  # (label, the strategy's colour, cells)
    legend: list[tuple[str, str]] = field(default_factory=list)  # (colour, what it means)


@dataclass(kw_only=True)
class RunComparison:
    """One later run against the first, as the gate judged it (``note`` when it could not)."""

    baseline: str
    candidate: str
    comparison: Comparison | None = None
    note: str | None = None


@dataclass(kw_only=True)
class WorkloadDecision:
    workload: str
    run: str
    sentences: list[str] = field(default_factory=list)
    grids: list[Grid] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)  # the bullet list, folded under the view
    about: str = ""  # the model's parameter count and the spec it was named by, where recorded


def workload_about(rows: pd.DataFrame) -> str:
    """``3.38 M parameters · spec hf:gpt2@n_layer=2``: what the runs recorded about the model."""
    parts = []
    counts = rows["parameter_count"].dropna() if "parameter_count" in rows else ()
    if len(counts):
        count = float(counts.iloc[0])
        parts.append(f"{count / 1e6:.3g} M parameters" if count >= 1e5 else f"{count:,.0f} parameters")
    specs = rows["workload_spec"].dropna().astype(str) if "workload_spec" in rows else ()
    if len(specs) and specs.iloc[0] != str(rows["workload"].iloc[0]):
        parts.append(f"spec {specs.iloc[0]}")
    return " · ".join(parts)


def _hex(rgba) -> str:
    return matplotlib.colors.to_hex(rgba)


def _ratio_cell(ratio: float, significant: bool, text: str, title: str) -> Cell:
    """Blue for faster than the reference, red for slower (RdBu, symmetric in log2); a ratio whose
    interval contains 1 keeps a pale version of its colour and no frame."""
    x = 0.0 if not ratio > 0 else max(-1.0, min(1.0, math.log2(ratio) / _RATIO_SPAN))
    rgb = matplotlib.colors.to_rgb(matplotlib.colormaps["RdBu"](0.5 + 0.5 * x))
    if not significant:
        rgb = tuple(0.35 * c + 0.65 for c in rgb)  # towards white
    return Cell(text=text, title=title, background=_hex(rgb), dark=significant and abs(x) > 0.55, strong=significant)


def _ws(row: pd.Series) -> str:
    ws = row["world_size"]
    return f"w{ws:g}" if isinstance(ws, (int, float)) and not isinstance(ws, bool) and ws == ws else "–"


def _row_label(row: pd.Series) -> str:
    """The configuration without its world size (that is the column) or batch (the grid's)."""
    name = str(row["case"]).split(" · batch ")[0]
    suffix = f" {_ws(row)}"
    return name[: -len(suffix)] if name.endswith(suffix) else name


def _grid(title: str, caption: str, items: list[tuple[str, str, str, Cell]], corner: str = "strategy") -> Grid:
    """``items``: (row label, strategy, column label, cell), rows in the order given."""
    columns = sorted(dict.fromkeys(c for _, _, c, _ in items), key=lambda c: (len(c), c))
    rows: dict[str, tuple[str, dict[str, Cell]]] = {}
    for label, strategy, column, cell in items:
        rows.setdefault(label, (_hex(strategy_color(strategy)), {}))[1][column] = cell
    return Grid(
        title=title,
        caption=caption,
        corner=corner,
        columns=columns,
        rows=[(label, colour, [cells.get(c) for c in columns]) for label, (colour, cells) in rows.items()],
    )


# ---------------------------------------------------------------- × single
def _ratio_grids(group: pd.DataFrame, single: pd.Series, batch: float) -> tuple[list[Grid], list[str]]:
    """The heatmaps and the bullet claims of one workload's configurations at one global batch."""
    others = group[group["strategy"] != SINGLE]
    if others.empty:
        return [], []
    ratios = {i: vs_single(r, single) for i, r in others.iterrows()}
    best_in_row: dict[str, float] = {}
    for i, r in others.iterrows():
        label = _row_label(r)
        best_in_row[label] = max(best_in_row.get(label, -math.inf), ratios[i].ratio)
    items = []
    for i, r in sorted(others.iterrows(), key=lambda ir: -best_in_row[_row_label(ir[1])]):
        ratio = ratios[i]
        text = f"{ratio.ratio:.2f}×" if ratio.ratio == ratio.ratio else "–"
        items.append(
            (
                _row_label(r),
                r["strategy"],
                _ws(r),
                _ratio_cell(ratio.ratio, ratio.significant, text, sentence(r, single, ratio)),
            )
        )
    plain = [it for it in items if it[0] == it[1]]  # the strategies as they come
    tuned = [it for it in items if it[0] != it[1]]  # strategies with options set (knobs, modes)
    caption = (
        "Each configuration's throughput over single's, trial i against trial i (interleaved trials ran "
        "close in time); blue: faster than single, red: slower; framed and bold: the 95% interval "
        "excludes 1; pale: no significant difference. Hover a cell for its interval."
    )
    grids = [_grid(f"× single at the same global batch ({batch:.0f} samples)", caption, plain)] if plain else []
    if tuned:
        grids.append(
            _grid(
                f"× single at the same global batch ({batch:.0f}): with options",
                "The same ratio for the strategies' options (buckets, hooks, modes).",
                tuned,
                corner="strategy (options)",
            )
        )
    ordered = sorted(ratios.items(), key=lambda kv: -kv[1].ratio if kv[1].ratio == kv[1].ratio else math.inf)
    claims = [fastest_line(group)] + [sentence(others.loc[i], single, ratio) for i, ratio in ordered]
    return grids, claims


# ---------------------------------------------------------------- scaling efficiency
def _efficiency_grid(group: pd.DataFrame) -> Grid | None:
    eff = pd.to_numeric(group.get("scaling_efficiency"), errors="coerce") if "scaling_efficiency" in group else None
    if eff is None or not eff.notna().any():
        return None
    rows = group[eff.notna()].assign(_eff=eff[eff.notna()])
    lo = pd.to_numeric(rows.get("scaling_efficiency_ci95_lo"), errors="coerce")
    hi = pd.to_numeric(rows.get("scaling_efficiency_ci95_hi"), errors="coerce")
    items = []
    order = rows.groupby("strategy_label", sort=False)["_eff"].transform("max")
    for i, r in rows.assign(_o=order).sort_values("_o", ascending=False).iterrows():
        known = lo[i] == lo[i]
        # The interval's own coverage, where the frame computed it from the trials (saved runs: always).
        level = float(r.get("scaling_efficiency_confidence", 0.95))
        level = 0.95 if level != level else level
        significant = known and level >= MIN_CLAIM_CONFIDENCE and (lo[i] > 1 or hi[i] < 1)
        ci = f" ({ci_name(level)} {lo[i]:.0%}–{hi[i]:.0%})" if known else " (fewer than 2 trials: no interval)"
        items.append(
            (
                str(r["strategy_label"]),
                r["strategy"],
                _ws(r),
                _ratio_cell(
                    r["_eff"], significant, f"{r['_eff']:.0%}", f"{r['case']}: scaling efficiency {r['_eff']:.1%}{ci}"
                ),
            )
        )
    return _grid(
        "Scaling efficiency (weak scaling)",
        "A different quantity from × single: each replica keeps its batch, so N replicas process N times "
        "the samples; efficiency = throughput at N / (N × single's on one replica's batch), as the suite "
        "saved it. 100% is ideal; red: below ideal; framed: the interval excludes 100%.",
        items,
    )


# ---------------------------------------------------------------- change between runs
def _by_fullname(comparison: Comparison) -> dict[str, tuple[BenchmarkComparison, list[str]]]:
    return {b.name: (b, row) for b, row in zip(comparison.benchmarks, gate_rows(comparison))}


def _change_cell(b: BenchmarkComparison, row: list[str], config: str) -> Cell:
    detail = "; ".join(f"{h} {v}" for h, v in zip(HEADER[1:], row[1:]))
    text = fmt_ratio(b.ratio) if b.ratio == b.ratio else b.verdict.value
    return Cell(
        text=text,
        title=f"{config}: {b.verdict.value} — {detail}" + (f" — {b.note}" if b.note else ""),
        # a verdict the gate adds later renders plain
        background=VERDICT_COLOURS.get(b.verdict, "#ffffff"),
        verdict=b.verdict.value,
    )


def _verdict_of(row: pd.Series, judged: dict[str, tuple[BenchmarkComparison, list[str]]]):
    for name in row["fullnames"]:
        if name in judged:
            return judged[name]
    return None


def _change_grid(workload: str, configs: pd.DataFrame, comparisons: Sequence[RunComparison]) -> Grid | None:
    judged = [(c, _by_fullname(c.comparison)) for c in comparisons if c.comparison is not None]
    if not judged:
        return None
    mine = configs[configs["workload"].fillna("").astype(str) == workload]
    items = []
    single_comparison = len(judged) == 1
    for c, by_name in judged:
        # Every configuration of either run once: the candidate's, then what only the baseline had.
        sides = pd.concat([mine[mine["run"] == c.candidate], mine[mine["run"] == c.baseline]])
        for _, r in sides.drop_duplicates("case").iterrows():
            found = _verdict_of(r, by_name)
            if found is None:
                continue
            cell = _change_cell(*found, config=str(r["case"]))
            tuned = _row_label(r) != r["strategy"]
            if single_comparison:
                items.append((_row_label(r), r["strategy"], _ws(r), cell, tuned))
            else:
                items.append((str(r["case"]), r["strategy"], c.candidate, cell, tuned))
    if not items:
        return None
    # Strategies with options (knobs, modes) that changed nothing in any run would fill the view:
    # they are counted here and listed in the run comparison.
    moved = {label for label, _, _, cell, _ in items if cell.verdict != Verdict.UNCHANGED.value}
    quiet = {label for label, _, _, _, tuned in items if tuned and label not in moved}
    items = [it[:4] for it in items if it[0] not in quiet]
    first = judged[0][0].baseline
    caption = (
        f"The change of each configuration's median step time from {first} to "
        + (judged[0][0].candidate if single_comparison else "each later run (columns)")
        + " (+ is slower), coloured by the verdict of the regression gate (dpbench compare). Hover a "
        "cell for the test behind it."
        + (
            f" {len(quiet)} strategies with options, unchanged in every run, are listed only in the run comparison."
            if quiet
            else ""
        )
    )
    title = f"Change {first} → {judged[0][0].candidate}" if single_comparison else f"Change since {first}"
    grid = _grid(title, caption, items, corner="strategy" if single_comparison else "configuration")
    shown = {cell.verdict for _, _, _, cell in items}
    grid.legend = [(VERDICT_COLOURS.get(v, "#ffffff"), v.value) for v in Verdict if v.value in shown]
    return grid


# ---------------------------------------------------------------- per workload
def _training(configs: pd.DataFrame) -> pd.DataFrame:
    rows = configs[(configs["kind"].fillna("training") != "collective") & configs["workload"].notna()]
    return rows[pd.to_numeric(rows["samples_per_s"], errors="coerce") > 0]


def decisions(
    configs: pd.DataFrame, runs: Sequence[str], comparisons: Sequence[RunComparison] = ()
) -> list[WorkloadDecision]:
    """Per workload (in order of appearance): its heatmaps, its sentences and its claims."""
    # The columns read here only: boolean selections of the full frame (a hundred-odd columns)
    # copied every column each time.
    wanted = [
        "run",
        "workload",
        "kind",
        "strategy",
        "strategy_label",
        "case",
        "batch",
        "world_size",
        "samples_per_s",
        "samples_per_s_ci95_lo",
        "samples_per_s_ci95_hi",
        "trial_times",
        "fullnames",
        "scaling_efficiency",
        "scaling_efficiency_ci95_lo",
        "scaling_efficiency_ci95_hi",
        "scaling_efficiency_confidence",
        "parameter_count",
        "workload_spec",
    ]
    configs = configs[[c for c in wanted if c in configs.columns]]
    training = _training(configs)
    singles = single_for(training)
    out = []
    for workload in dict.fromkeys(training["workload"].astype(str)):
        present = training[training["workload"].astype(str) == workload]
        run = [r for r in runs if (present["run"] == r).any()][-1]  # the newest run that has it
        group = present[present["run"] == run]
        decision = WorkloadDecision(workload=workload, run=run, about=workload_about(group))
        batches = group["batch"].dropna().value_counts(sort=True)  # the batch with the most configurations first
        for batch in batches.index:
            at_batch = group[group["batch"] == batch]
            single = singles.get((run, workload, float(batch)))
            # One headline per workload, at the batch with the most configurations; the others' are claims.
            said = headline(workload, at_batch, single, batch=f"{batch:.0f}" if len(batches) > 1 else "")
            where = decision.sentences if batch == batches.index[0] else decision.claims
            if single is None:
                if len(at_batch) > 1 and batch == batches.index[0]:
                    decision.claims.append(
                        f"no single configuration of {workload} at global batch {batch:.0f} in "
                        f"{run}: nothing to compare against"
                    )
                    decision.sentences.append(said)
                continue
            grids, claims = _ratio_grids(at_batch, single, batch)
            if not grids:
                continue
            decision.grids += grids
            decision.claims += claims
            where.append(said)
        efficiency = _efficiency_grid(group)
        if efficiency is not None:
            decision.grids.append(efficiency)
        change = _change_grid(workload, configs, comparisons)
        if change is not None:  # beside the first heatmap: "which is fastest" and "what changed" together
            decision.grids.insert(1, change)
        if decision.grids or decision.claims:
            out.append(decision)
    return out
