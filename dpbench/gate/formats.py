"""The gate's outputs: the terminal table, Markdown for a PR comment, JSON, github-action-benchmark.

The HTML report's comparison tables use :func:`rows` too, so both read the same.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from dpbench.gate.compare import BenchmarkComparison, GateComparison, Verdict
from dpbench.results.units import fmt_p, fmt_ratio, fmt_time

__all__ = [
    "HEADER",
    "display_names",
    "family_line",
    "rows",
    "summary_line",
    "to_github_action_benchmark",
    "to_json",
    "to_markdown",
    "to_text",
    "verdict_line",
]

HEADER = ["benchmark", "baseline", "candidate", "change", "trials", "p", "test", "control", "verdict"]


def display_names(names: list[str]) -> dict[str, str]:
    """Full pytest names → the test id alone (``test_x[case]``) wherever that stays unique."""
    short = {n: n.rsplit("::", 1)[-1] for n in names}
    counts: dict[str, int] = {}
    for s in short.values():
        counts[s] = counts.get(s, 0) + 1
    return {n: (s if counts[s] == 1 else n) for n, s in short.items()}


def _row(b: BenchmarkComparison, name: str) -> list[str]:
    verdict = b.verdict.value.upper() if b.verdict == Verdict.REGRESSED else b.verdict.value
    trials = f"{b.baseline_trials} vs {b.candidate_trials}"
    return [
        name,
        fmt_time(b.baseline_s, b.unit),
        fmt_time(b.candidate_s, b.unit),
        fmt_ratio(b.ratio),
        trials,
        fmt_p(b.p_value),
        b.test or "–",
        fmt_ratio(b.control_ratio),
        verdict,
    ]


def rows(cmp: GateComparison) -> list[list[str]]:
    names = display_names([b.name for b in cmp.benchmarks])
    return [_row(b, names[b.name]) for b in cmp.benchmarks]


def summary_line(cmp: GateComparison) -> str:
    """``regressed 1, improved 0, unchanged 12, …`` — every verdict, zeros included."""
    return ", ".join(f"{verdict} {count}" for verdict, count in cmp.counts.items())


def _pct(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.1%}"


def family_line(cmp: GateComparison) -> str:
    """What the comparison estimated from all its benchmarks: the test's assumptions, in one line."""
    f = cmp.family
    parts = [
        f"{f.size} distinct cases tested ({f.method}{', paired in schedule order' if cmp.paired else ''}; "
        f"Holm: family-wise false-alarm rate ≤ {cmp.alpha:g})",
        f"typical trial spread {_pct(f.prior_sd)} (log-normal across cases, sd of logs {f.prior_spread:.2f}"
        + (f", {f.prior_slope:+.2f} per log of the step time)" if f.prior_slope else ")"),
    ]
    if f.method == "trials":
        aa = (
            ""
            if math.isnan(f.between_run_sd_aa)
            else f"; measured by the --aa runs {_pct(f.between_run_sd_aa)} "
            f"(spread {f.between_run_spread_aa:.2f}), used per case"
        )
        parts.append(
            f"between-run offset of the median case {_pct(f.between_run_sd)} (log-normal across cases, "
            f"spread {f.between_run_spread:.2f}){aa}"
        )
    parts.append(f"controls moved {fmt_ratio(f.control_shift)}, the median benchmark {fmt_ratio(f.median_shift)}")
    if f.shift_basis == "controls" and math.isfinite(f.broad_change):
        parts.append(
            f"the benchmarks as a whole moved {fmt_ratio(f.broad_change)} against the controls (beyond the "
            f"threshold, p = {fmt_p(f.broad_p)}): each case is judged beyond the controls"
        )
    elif f.shift_basis == "interleaved":
        parts.append(
            "the sides ran interleaved on one machine: no machine move is taken out (a move of the controls "
            "is the sides' own doing)"
        )
    elif f.shift_basis == "benchmarks":
        chosen = (
            f"the {f.reference_size} of {f.size} cases that moved as the controls did"
            if f.reference_anchored and f.reference_size < f.size
            else "the other benchmarks"
        )
        parts.append(f"each case is judged beyond the median move of {chosen}")
    return "; ".join(parts)


def verdict_line(cmp: GateComparison) -> str:
    rule = f"slower than the machine's move by > {cmp.threshold:.1%} with p < {cmp.alpha:g} after Holm"
    short = display_names([b.name for b in cmp.benchmarks])
    # The job's own verdict on a move of (nearly) everything comes first: it is what the reader must act on.
    parts = [cmp.family.broad_note] if cmp.family.broad_note else []
    if cmp.regressions:
        n = len(cmp.regressions)
        names = ", ".join(short[b.name] for b in cmp.regressions)
        parts.append(f"{n} regression{'s' if n > 1 else ''} ({rule}): {names}")
    else:
        compared = sum(b.verdict not in (Verdict.MISSING, Verdict.NEW, Verdict.INCOMPARABLE) for b in cmp.benchmarks)
        parts.append(f"no regressions ({rule}) in {compared} compared benchmarks")
    missing = cmp.of(Verdict.MISSING)
    if missing:
        how = "allowed by --allow-missing" if cmp.allow_missing else "fails the gate; --allow-missing accepts it"
        parts.append(f"{len(missing)} missing from the candidate ({how})")
    return "; ".join(parts)


def to_text(cmp: GateComparison) -> str:
    """A plain-text table for the terminal; the counts and the verdict last."""
    table = [HEADER] + rows(cmp)
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    lines = [f"baseline:  {cmp.baseline}", f"candidate: {cmp.candidate}", ""]
    for i, row in enumerate(table):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    short = display_names([b.name for b in cmp.benchmarks])
    notes = [f"note: {short[b.name]}: {b.note}" for b in cmp.benchmarks if b.note and b.verdict != Verdict.MISSING]
    return "\n".join(lines + [""] + notes + [family_line(cmp), summary_line(cmp), verdict_line(cmp)]) + "\n"


def _md(text: str) -> str:
    """Escape a string from a results file for a Markdown table cell (no HTML, no markup)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\`*_[]|#":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


def to_markdown(cmp: GateComparison) -> str:
    """A summary for a pull-request comment."""
    icon = "❌" if cmp.exit_code else "✅"
    lines = [
        "## dpbench compare",
        "",
        f"{icon} **{_md(verdict_line(cmp))}**",
        "",
        _md(summary_line(cmp)),
        "",
        _md(family_line(cmp)),
        "",
    ]
    lines += [f"> ⚠️ {_md(w)}" for w in cmp.warnings] + ([""] if cmp.warnings else [])
    lines += [f"Baseline {_md(cmp.baseline)} → candidate {_md(cmp.candidate)}", ""]
    lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows(cmp)]
    short = display_names([b.name for b in cmp.benchmarks])
    notes = [f"- {_md(short[b.name])}: {_md(b.note)}" for b in cmp.benchmarks if b.note]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def to_json(cmp: GateComparison, *, next_steps: bool = False) -> dict[str, Any]:
    """The comparison as JSON; ``next_steps``: each benchmark also carries its ``next_step`` (the
    terminal's plan for an inconclusive case; '' for the others)."""

    def clean(value: Any) -> Any:  # JSON has no NaN; verdicts are their strings
        if isinstance(value, Verdict):
            return value.value
        return None if isinstance(value, float) and math.isnan(value) else value

    return {
        "baseline": cmp.baseline,
        "candidate": cmp.candidate,
        "threshold": cmp.threshold,
        "alpha": cmp.alpha,
        "allow_missing": cmp.allow_missing,
        "paired": cmp.paired,
        "warnings": cmp.warnings,
        "counts": cmp.counts,
        "family": {k: clean(v) for k, v in asdict(cmp.family).items()},
        "regressions": [b.name for b in cmp.regressions],
        "exit_code": cmp.exit_code,
        "benchmarks": [_benchmark_json(cmp, b, clean, next_steps) for b in cmp.benchmarks],
    }


def _benchmark_json(cmp: GateComparison, b: BenchmarkComparison, clean, next_steps: bool) -> dict[str, Any]:
    out = {k: clean(v) for k, v in asdict(b).items()}
    if next_steps:
        from dpbench.gate.next_step import next_step

        aa = math.isfinite(cmp.family.between_run_sd_aa)
        out["next_step"] = next_step(b, alpha=cmp.alpha, family_size=cmp.family.size, method=cmp.family.method, aa=aa)
    return out


def to_github_action_benchmark(cmp: GateComparison) -> list[dict[str, Any]]:
    """The candidate's numbers in github-action-benchmark's ``customSmallerIsBetter`` format."""
    out = []
    for b in cmp.benchmarks:
        if b.verdict == Verdict.MISSING or math.isnan(b.candidate_s):
            continue
        extra = f"verdict: {b.verdict.value}; change vs baseline: {fmt_ratio(b.ratio)}; p: {fmt_p(b.p_value)}"
        out.append(
            {"name": b.name, "unit": b.unit, "value": b.candidate_s, "extra": f"{extra}; trials: {b.candidate_trials}"}
        )
    return out
