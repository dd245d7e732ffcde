"""Across the ranks of one case: each collective's arrival skew and straggler (HolisticTraceAnalysis's
definition: the rank that arrives last), from the per-rank arrivals :mod:`dpbench.traces.analysis` reads."""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["collective_skew", "skew_summary"]


def collective_skew(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per collective: every rank's arrival, the skew and the straggler (needs ≥ 2 ranks)."""
    if len(ranks) < 2:
        return []
    by_seq = all(a["seq"] is not None for r in ranks for a in r["collectives"])
    keyed = []
    for r in ranks:
        # Arrivals on one clock: each rank's trace offset relative to the first rank's.
        shift = (r["clock_offset_ns"] - ranks[0]["clock_offset_ns"]) / 1e9  # integers: exact
        keyed.append(
            {
                (a["seq"] if by_seq else i): {**a, "arrival_s": a["arrival_s"] + shift}
                for i, a in enumerate(r["collectives"])
            }
        )
    common = sorted(set.intersection(*(set(k) for k in keyed))) if keyed else []
    out = []
    for index, key in enumerate(common):
        arrivals = [k[key]["arrival_s"] for k in keyed]
        first = min(arrivals)
        straggler = max(range(len(arrivals)), key=lambda i: arrivals[i])
        out.append(
            {
                "index": index,
                "seq": key if by_seq else None,
                "name": keyed[0][key]["name"],
                "arrival_offsets_s": [a - first for a in arrivals],
                "skew_s": max(arrivals) - first,
                "straggler": ranks[straggler]["rank"],
            }
        )
    return out


def skew_summary(collectives: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not collectives:
        return None
    skews = [c["skew_s"] for c in collectives]
    counts: dict[int, int] = {}
    for c in collectives:
        counts[c["straggler"]] = counts.get(c["straggler"], 0) + 1
    straggler = max(counts, key=lambda r: (counts[r], -r))
    return {
        "collectives": len(collectives),
        "median_skew_s": statistics.median(skews),
        "max_skew_s": max(skews),
        "straggler": straggler,
        "straggler_share": counts[straggler] / len(collectives),
    }
