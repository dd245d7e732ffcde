"""The decision view: per question (a workload at one recipe), the answer of the decision model
(:mod:`dpbench.decision`) and what changed between runs.

Per question, on the newest run that has its workload:

- its headline (:func:`dpbench.decision.text.headline`), generated from the answer's claims;
- a heatmap (strategies × world sizes) of **× single** at the recipe: each configuration's claim
  against single (the model's paired ratio), framed and bold where it is a claim (faster or
  slower at the stated level);
- every configuration's claim against the leader and single, folded under it;
- on the workload's first question: the weak-scaling suite's saved **scaling efficiency** (a
  different quantity, named as such), and with two or more runs the change of every configuration
  between the first run and each later one, coloured by the gate's own verdict
  (:func:`dpbench.gate.compare.compare_frames`).

It renders the model's answers and the gate's verdicts; it ranks and tests nothing itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import matplotlib
import matplotlib.colors
import pandas as pd

from dpbench.decision.claims import CLAIM_LEVEL, Claim
from dpbench.decision.model import Answer, Decision, Standing
from dpbench.decision.questions import training_rows
from dpbench.decision.text import claim_text, frugal_text, headline, joules_text, rate_text
from dpbench.gate.compare import BenchmarkComparison, GateComparison, Verdict
from dpbench.gate.formats import HEADER
from dpbench.gate.formats import rows as gate_rows
from dpbench.report.figures import strategy_color
from dpbench.report.run_notes import ci_name
from dpbench.results.units import fmt_ratio

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
    comparison: GateComparison | None = None
    note: str | None = None


@dataclass(kw_only=True)
class WorkloadDecision:
    """One question's view: its title (the workload at its recipe), headline, heatmaps and claims."""

    workload: str
    run: str
    outcome: str = ""
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
def _row_of(s: Standing) -> str:
    """The configuration without its world size (that is the column)."""
    ws = s.entry.world_size
    suffix = f" w{ws}" if ws is not None else ""
    return s.name[: -len(suffix)] if suffix and s.name.endswith(suffix) else s.name


def _column_of(s: Standing) -> str:
    return f"w{s.entry.world_size}" if s.entry.world_size is not None else "–"


def _ratio_grids(answer: Answer) -> list[Grid]:
    """The heatmaps of one question: each configuration's claim against single, as the model made it."""
    others = [s for s in answer.standings if s.vs_single is not None]
    if not others:
        return []
    best_in_row: dict[str, float] = {}
    for s in others:
        r = s.vs_single.ratio.ratio  # type: ignore[union-attr]
        best_in_row[_row_of(s)] = max(best_in_row.get(_row_of(s), -math.inf), r if r == r else -math.inf)
    items = []
    for s in sorted(others, key=lambda s: -best_in_row[_row_of(s)]):
        c = s.vs_single
        assert c is not None
        text = f"{c.ratio.ratio:.2f}×" if c.ratio.ratio == c.ratio.ratio else "–"
        claimed = c.claim in (Claim.FASTER, Claim.SLOWER)
        title = f"{s.name}: {claim_text(c, 'single')}"
        items.append((_row_of(s), s.entry.strategy, _column_of(s), _ratio_cell(c.ratio.ratio, claimed, text, title)))
    plain = [it for it in items if it[0] == it[1]]  # the strategies as they come
    tuned = [it for it in items if it[0] != it[1]]  # strategies with options set (knobs, modes)
    caption = (
        "Each configuration's throughput over single's at this recipe, trial i against trial i "
        "(interleaved trials ran close in time); blue: faster than single, red: slower; framed and bold: "
        "a claim (faster or slower at the stated level); pale: level or unsettled. Hover a cell for its claim."
    )
    grids = [_grid("× single", caption, plain)] if plain else []
    if tuned:
        grids.append(
            _grid(
                "× single: with options",
                "The same ratio for the strategies' options (buckets, hooks, modes).",
                tuned,
                corner="strategy (options)",
            )
        )
    return grids


def _claims(answer: Answer) -> list[str]:
    """Every configuration of the question against the leader (and single), as the model claims."""
    out = []
    for s in answer.standings:
        against = "the leader" if s.vs_leader is None else claim_text(s.vs_leader, answer.leader or "the leader")
        single = f"; {claim_text(s.vs_single, 'single')}" if s.vs_single is not None else ""
        # busy, or spread past the noise model: said once, where no claim of it already says so
        said = any(c is not None and s.contended in c.why for c in (s.vs_leader, s.vs_single))
        busy = f"; {s.contended}" if s.contended and not said else ""
        energy = f", {joules_text(s.joules_per_sample)}" if s.joules_per_sample == s.joules_per_sample else ""
        out.append(f"{s.name} ({rate_text(s.samples_per_s)}{energy}, {s.trials} trials): {against}{single}{busy}")
    out += [f"{name}: left out of the ranking: {why}" for name, why in answer.excluded]
    return out


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
        significant = known and level >= CLAIM_LEVEL and (lo[i] > 1 or hi[i] < 1)
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
def _by_fullname(comparison: GateComparison) -> dict[str, tuple[BenchmarkComparison, list[str]]]:
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


# ---------------------------------------------------------------- per question
def decisions(
    configs: pd.DataFrame,
    runs: Sequence[str],
    comparisons: Sequence[RunComparison] = (),
    *,
    decision: Decision,
) -> list[WorkloadDecision]:
    """Per question of ``decision`` (:func:`dpbench.decision.decide`, computed once by the caller,
    with the fingerprint's departures): its headline, heatmaps and claims; the workload's first
    question also carries the weak-scaling efficiency and the change between runs."""
    training = training_rows(configs)
    out = []
    seen: set[str] = set()
    for answer in decision.answers:
        workload = answer.question.workload
        group = training[(training["workload"].astype(str) == workload) & (training["run"] == answer.run)]
        view = WorkloadDecision(
            workload=answer.question.title,
            run=answer.run,
            about=workload_about(group) if len(group) else "",
            outcome=answer.outcome.value,
            # The heading names the question: the sentence under it does not again.
            sentences=[line for line in (headline(answer, named=False), frugal_text(answer)) if line is not None],
            grids=_ratio_grids(answer),
            claims=_claims(answer),
        )
        if workload not in seen:
            seen.add(workload)
            efficiency = _efficiency_grid(group) if len(group) else None
            if efficiency is not None:
                view.grids.append(efficiency)
            change = _change_grid(workload, configs, comparisons)
            if change is not None:  # beside the first heatmap: "which is fastest" and "what changed" together
                view.grids.insert(1, change)
        out.append(view)
    return out
