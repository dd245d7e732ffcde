"""The decision in words: one headline per workload, and the terminal's short summary of it.

The HTML decision view (:mod:`dpbench.report.decision`), ``dpbench report`` and the end of a suite
session print the same sentences from the same estimator: each configuration's throughput against
another's, trial i against trial i (:func:`dpbench.stats.paired_ratio` on
:func:`dpbench.decision.configs.throughputs`; against single :func:`dpbench.decision.configs.vs_single`).
A configuration is crowned the fastest only when its trials beat every other one's significantly;
where some are level with it, the headline names them all and crowns none, and a ratio to single
whose interval holds 1 is said to be no difference, never quoted as a speed-up.
"""

from __future__ import annotations

import math

import pandas as pd

from dpbench.decision.configs import SINGLE, single_for, throughputs, vs_single
from dpbench.results.units import fmt_num
from dpbench.stats import MIN_CLAIM_CONFIDENCE, PairedRatio, paired_ratio

__all__ = ["headline", "summary_lines"]

# The fewest pairs whose [min, max] interval of the median reaches the claim level.
_MIN_PAIRS = next(n for n in range(2, 64) if 1 - 2 * 0.5**n >= MIN_CLAIM_CONFIDENCE)
_NAMED = 4  # a sentence names this many configurations, then counts the rest


def _names(names: list[str]) -> str:
    if len(names) <= _NAMED:
        return ", ".join(names)
    return ", ".join(names[:_NAMED]) + f" and {len(names) - _NAMED} more"


def _interval(r: PairedRatio) -> str:
    return f"CI {r.lo:.2f}–{r.hi:.2f}" if r.pairs >= 2 and math.isfinite(r.lo) else "no interval: < 2 trials"


def _against_single(best: pd.Series, single: pd.Series | None) -> str:
    if single is None or best["strategy"] == SINGLE:
        return ""
    r = vs_single(best, single)
    if r.significant:
        return f" ({r.ratio:.2f}× single, {_interval(r)})"
    return f" (no significant difference from single: {r.ratio:.2f}×, {_interval(r)})"


def _best(group: pd.DataFrame) -> pd.Series:
    return group.loc[pd.to_numeric(group["samples_per_s"], errors="coerce").idxmax()]


def _unclaimed(r: PairedRatio) -> bool:
    """The interval excludes 1, but it covers less than the claim level: too few pairs (a disturbed
    trial left out of 5 leaves 4, an 87.5% interval), so neither "slower" nor "level" is true."""
    return r.pairs >= 2 and not r.significant and math.isfinite(r.lo) and (r.lo > 1 or r.hi < 1)


def _level(best: pd.Series, rest: pd.DataFrame) -> tuple[list[str], list[str], list[str]]:
    """The others the best's trials beat significantly, those level with it, and those its
    trials beat in every pair's interval with too few pairs to claim it."""
    beaten, level, unclaimed = [], [], []
    for _, other in rest.iterrows():
        r = paired_ratio(throughputs(best), throughputs(other))
        side = beaten if r.significant and r.ratio > 1 else unclaimed if _unclaimed(r) else level
        side.append(str(other["case"]))
    return beaten, level, unclaimed


def headline(workload: str, group: pd.DataFrame, single: pd.Series | None, *, batch: str = "") -> str:
    """One workload's answer at one global batch (``batch``: said when several were measured)."""
    best = _best(group)
    where = f"{workload}{f' at global batch {batch}' if batch else ''}"
    rate = f"{fmt_num(best['samples_per_s'])} samples/s"
    rest = group.drop(index=best.name)
    if rest.empty:
        return f"{where}: only {best['case']} ran, at {rate}{_against_single(best, single)}."
    beaten, level, unclaimed = _level(best, rest)
    few = (
        f"; too few paired trials to rank {_names(unclaimed)} "
        f"({MIN_CLAIM_CONFIDENCE:.0%} intervals need {_MIN_PAIRS} pairs)"
        if unclaimed
        else ""
    )
    if not level and not unclaimed:
        return (
            f"{where}: the fastest is {best['case']} at {rate}{_against_single(best, single)}; "
            f"it is significantly faster than all {len(rest)} others."
        )
    if not level:
        return (
            f"{where}: {best['case']} has the highest median at {rate}{_against_single(best, single)}; "
            f"it is significantly faster than {len(beaten)} of the {len(rest)} others{few}."
        )
    tail = f"; they are significantly faster than the other {len(beaten)}" if beaten else ""
    return (
        f"{where}: no single fastest: {best['case']} has the highest median at {rate}, but with these trials "
        f"it is level with {_names(level)}{tail}{few}."
    )


def _memory(row: pd.Series) -> str:
    peaks = [v for k, v in row.items() if str(k).startswith("peak_memory_bytes.") and isinstance(v, (int, float))]
    peaks = [v for v in peaks if v == v and v > 0]
    return f"peak {max(peaks) / 2**20:,.0f} MiB per rank" if peaks else ""


def _against_best(best: pd.Series, other: pd.Series) -> tuple[PairedRatio, str]:
    r = paired_ratio(throughputs(other), throughputs(best))
    if r.pairs < 2:
        return r, f"{r.ratio:.2f}× (no interval: < 2 trials)"
    mark = (
        "slower"
        if r.significant and r.ratio < 1
        else f"too few pairs ({r.pairs}) to claim"
        if _unclaimed(r)
        else "level with it"
    )
    return r, f"{r.ratio:.2f}× ({_interval(r)})  {mark}"


_ROWS = 6  # configurations listed under a headline; the rest are counted


def summary_lines(configs: pd.DataFrame, runs: list[str]) -> list[str]:
    """Per workload, on the newest run that has it: the headline at the batch with the most
    configurations, then each configuration there against the best one (throughput, paired by
    trial, with its interval) and its peak memory per rank where the run recorded it."""
    rows = configs[(configs["kind"].fillna("training") != "collective") & configs["workload"].notna()]
    rows = rows[pd.to_numeric(rows["samples_per_s"], errors="coerce") > 0]
    singles = single_for(rows)
    lines: list[str] = []
    for workload in dict.fromkeys(rows["workload"].astype(str)):
        present = rows[rows["workload"].astype(str) == workload]
        run = [r for r in runs if (present["run"] == r).any()][-1]
        group = present[present["run"] == run]
        batches = group["batch"].dropna().value_counts(sort=True)
        if batches.empty:
            continue
        batch = batches.index[0]
        at_batch = group[group["batch"] == batch]
        said = f"{batch:.0f}" if len(batches) > 1 else ""
        lines.append(headline(workload, at_batch, singles.get((run, workload, float(batch))), batch=said))
        best = _best(at_batch)
        crowned = "the fastest" if "the fastest is" in lines[-1] else "the highest median"
        table = [(str(best["case"]), crowned, _memory(best))]
        others = [(_against_best(best, row), row) for _, row in at_batch.drop(index=best.name).iterrows()]
        # Those level with the best first (the real choice), then by throughput against it.
        others.sort(
            key=lambda o: (
                o[0][0].significant or _unclaimed(o[0][0]),
                -o[0][0].ratio if math.isfinite(o[0][0].ratio) else math.inf,
            )
        )
        table += [(str(row["case"]), text, _memory(row)) for (_, text), row in others[: _ROWS - 1]]
        rest = others[_ROWS - 1 :]
        width = max(len(name) for name, _, _ in table)
        middle = max(len(text) for _, text, _ in table)
        lines += [f"  {name.ljust(width)}  {text.ljust(middle)}  {mem}".rstrip() for name, text, mem in table]
        if rest:
            (last, _), row = rest[-1]
            slower = sum(r.significant and r.ratio < 1 for (r, _), _ in rest)
            unsure = sum(_unclaimed(r) for (r, _), _ in rest)
            parts = [
                (slower, "significantly slower"),
                (unsure, "too few pairs to claim"),
                (len(rest) - slower - unsure, "level"),
            ]
            how = f"all {parts[0][1]}" if slower == len(rest) else ", ".join(f"{n} {what}" for n, what in parts if n)
            lines.append(f"  … {len(rest)} more, {how}, down to {last.ratio:.2f}× ({row['case']})")
    return lines
