"""The decision in the terminal after ``dpbench run``: per workload, the fastest configuration and the
others against it (paired trials, 95% intervals), memory per rank, scaling efficiency, and what was
inconclusive — a few lines read straight from the saved run (JSON), no report machinery."""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from dpbench.stats import paired_ratio

__all__ = ["print_decision", "decision_lines"]


def _label(info: dict[str, Any]) -> str:
    options = info.get("requested_options") or {}
    extra = ",".join(f"{k}={v}" for k, v in sorted(options.items()) if k != "optimizer")
    optimizer = options.get("optimizer")
    name = info["strategy"] + (f"({extra})" if extra else "") + (f"+{optimizer}" if optimizer else "")
    return f"{name} w{info['world_size']}"


def _memory(info: dict[str, Any]) -> str:
    peaks = [v for v in (info.get("peak_memory_bytes") or {}).values() if isinstance(v, (int, float))]
    return f"{max(peaks) / 2**20:.0f} MiB/rank" if peaks else "memory n/a"


def _trials(info: dict[str, Any]) -> list[float]:
    return list((info.get("trials") or {}).get("step_time_s") or [])


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def decision_lines(run: dict[str, Any]) -> list[str]:
    """The summary of one saved run (pytest-benchmark JSON) as lines of text."""
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for bench in run.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if info.get("kind") == "training" and info.get("workload") and info.get("samples_per_s"):
            by_workload.setdefault(str(info["workload"]), []).append(info)
    lines: list[str] = []
    for workload, infos in by_workload.items():
        count = next((i.get("parameter_count") for i in infos if i.get("parameter_count")), None)
        size = (
            f" ({count / 1e6:.3g} M parameters)"
            if count and count >= 1e5
            else f" ({count:,} parameters)"
            if count
            else ""
        )
        lines.append(f"{workload}{size}")
        # The throughput comparison: the suite's rows, at the global batch most of them share.
        rows = [i for i in infos if i.get("suite") == "throughput"] or infos
        batch = Counter(i["global_batch"] for i in rows).most_common(1)[0][0]
        seen: dict[str, dict[str, Any]] = {}
        for info in rows:
            if info["global_batch"] == batch:
                seen.setdefault(_label(info), info)
        # Ranked by the geometric mean of the trials' step times: the estimator of the paired ratios
        # below, so no configuration reads as faster than the one named fastest.
        ranked = sorted(seen.items(), key=lambda item: _geomean(_trials(item[1])) or 1 / item[1]["samples_per_s"])
        best_label, best = ranked[0]
        lines.append(
            f"  fastest: {best_label}, {best['samples_per_s']:.4g} samples/s at batch {batch}, {_memory(best)}"
        )
        unclear = []
        for label, info in ranked[1:]:
            ratio = paired_ratio(_trials(best), _trials(info))  # its step time ÷ the fastest's: × slower
            if ratio.pairs < 2 or math.isnan(ratio.lo):
                unclear.append(label)
                lines.append(f"  {label}: {info['samples_per_s']:.4g} samples/s (too few trials to compare)")
                continue
            # Its step time over the fastest's, trial i against trial i (the ranking above is by
            # median throughput, so a paired ratio below 1 can happen when neither is clearly faster).
            times = 1 / ratio.ratio
            interval = f"CI {1 / ratio.hi:.2f}–{1 / ratio.lo:.2f}, {ratio.pairs} paired trials"
            if ratio.lo <= 1 <= ratio.hi:
                unclear.append(label)
                verdict = f"no significant difference (step time {times:.2f}× the fastest's, {interval})"
            else:
                verdict = f"step time {times:.2f}× the fastest's ({interval})"
            lines.append(f"  {label}: {verdict}, {_memory(info)}")
        efficiencies = [
            f"{_label(i)} {i['scaling_efficiency']:.2f}"
            for i in infos
            if i.get("suite") == "scaling" and isinstance(i.get("scaling_efficiency"), (int, float))
        ]
        if efficiencies:
            lines.append("  scaling efficiency: " + ", ".join(efficiencies))
        if unclear:
            lines.append(f"  inconclusive against {best_label}: {', '.join(unclear)} (more trials would tell)")
    return lines or ["no training benchmarks in this run"]


def print_decision(run_file: str | Path, *, out: TextIO | None = None) -> None:
    """Print the decision of the run saved in ``run_file``."""
    run = json.loads(Path(run_file).read_text(encoding="utf-8"))
    out = out or sys.stdout
    print("decision (per workload; the report has every number):", file=out)
    for line in decision_lines(run):
        print(line, file=out)
