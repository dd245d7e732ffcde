"""Runs of different machines side by side, and what differs between the runs' environments.

The gate judges runs of one machine; a page of runs from an A100 and an H200 is a question of
*how much* faster one is, not a regression. :func:`machines_view` groups the runs by their hardware
(GPU model, GPU count, CPU model: what no environment change can change), pools each machine's
trials per configuration and shows them as labelled columns: each machine's median step time, the
ratio of every machine to the first with a 95% interval (a Welch t-interval of the difference of
the log trial times), and each machine's inventory. It is not gated: no verdict, no threshold.
:func:`environment_lines` says, for the page's header, what differs between the first run's
environment and each other run's (torch and its build, CUDA, cuDNN, NCCL, Python, every package
whose version differs), with :func:`dpbench.ab.provenance.provenance_lines` — the lines
``dpbench ab`` opens its verdict with.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dpbench.ab.provenance import provenance_lines
from dpbench.report.figures import Table
from dpbench.results.load import SavedRun
from dpbench.stats import positive

__all__ = ["HARDWARE", "MachinesView", "environment_lines", "hardware_difference", "machines_view", "ratio_interval"]

# What makes two runs different machines (the environment's fields — torch, CUDA, driver — do not).
HARDWARE = ("gpu", "gpu_count", "cpu")


def _hardware(frame: pd.DataFrame, run: str) -> dict[str, Any]:
    rows = frame[frame["run"] == run]
    out = {}
    for key in HARDWARE:
        column = f"machine.{key}"
        value = rows[column].iloc[0] if column in rows and len(rows) else None
        out[key] = None if value is None or (isinstance(value, float) and math.isnan(value)) else value
    return out


def hardware_difference(frame: pd.DataFrame, first: str, other: str) -> str | None:
    """``gpu: NVIDIA A100-SXM4-40GB vs NVIDIA H200`` where the two runs ran on different hardware."""
    a, b = _hardware(frame, first), _hardware(frame, other)
    diffs = [
        f"{k}: {a[k] if a[k] is not None else 'unknown'} vs {b[k] if b[k] is not None else 'unknown'}"
        for k in HARDWARE
        if str(a[k]) != str(b[k])
    ]
    return "; ".join(diffs) or None


def _label(hardware: Mapping[str, Any]) -> str:
    if hardware.get("gpu"):
        count = hardware.get("gpu_count")
        try:
            return f"{hardware['gpu']} ×{float(count):g}"
        except (TypeError, ValueError):
            return str(hardware["gpu"])
    return str(hardware.get("cpu") or "unknown machine")


def ratio_interval(
    base: Sequence[float], other: Sequence[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """The ratio of the geometric means of ``other`` to ``base`` and its ``confidence`` interval (Welch's
    t on the logs); NaNs where a side has fewer than two positive values."""
    from scipy.special import stdtrit

    a, b = [math.log(v) for v in positive(base)], [math.log(v) for v in positive(other)]
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan, math.nan
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(b) - statistics.fmean(a)
    se = math.sqrt(va + vb)
    if se == 0:
        return math.exp(diff), math.exp(diff), math.exp(diff)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stdtrit(df, 0.5 + confidence / 2)) * se
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def _ms(seconds: float) -> str:
    return "–" if not seconds > 0 else f"{seconds * 1e3:.3g} ms"


def _ratio_text(ratio: float, lo: float, hi: float) -> str:
    if math.isnan(ratio):
        return "–"
    return f"{ratio:.2f}×" + (f" ({lo:.2f}–{hi:.2f})" if not math.isnan(lo) else "")


@dataclass(kw_only=True)
class MachinesView:
    machines: list[str]  # labels, the first machine first
    runs: dict[str, list[str]]  # label → its runs
    inventories: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)
    table: Table = field(default_factory=lambda: Table([], []))


def machines_view(frame: pd.DataFrame, configs: pd.DataFrame, runs: Sequence[str]) -> MachinesView | None:
    """The runs as one column per machine, or None when they all ran on one machine."""
    groups: dict[str, list[str]] = {}
    summaries: dict[str, dict[str, Any]] = {}
    for run in runs:
        hardware = _hardware(frame, run)
        label = _label(hardware)
        groups.setdefault(label, []).append(run)
        summaries.setdefault(label, hardware)
    if len(groups) < 2:
        return None
    labels = list(groups)
    # Per (workload, configuration), each machine's trials, pooled over its runs.
    trials: dict[tuple[str, str], dict[str, list[float]]] = {}
    for workload, config, run, times in zip(
        configs["workload"], configs["config"], configs["run"], configs["trial_times"]
    ):
        label = next(m for m, rs in groups.items() if run in rs)
        key = (workload if isinstance(workload, str) else "–", str(config))
        trials.setdefault(key, {}).setdefault(label, []).extend(positive(times if isinstance(times, list) else []))
    rows = []
    for (workload, config), by_machine in trials.items():
        first = by_machine.get(labels[0], [])
        row = [workload, config] + [_ms(statistics.median(by_machine[m])) if by_machine.get(m) else "–" for m in labels]
        row += [_ratio_text(*ratio_interval(first, by_machine.get(m, []))) for m in labels[1:]]
        rows.append(row)
    header = ["workload", "configuration"] + [f"{m}: step" for m in labels]
    header += [f"{m} / {labels[0]} (95% interval)" for m in labels[1:]]
    view = MachinesView(machines=labels, runs=groups, table=Table(header, rows))
    for label in labels:
        machine = frame[frame["run"] == groups[label][0]]
        fields = {
            k: machine[f"machine.{k}"].iloc[0] if f"machine.{k}" in machine else None
            for k in ("gpu", "gpu_count", "cpu", "node", "driver", "cuda", "torch", "python")
        }
        shown = [
            (k, "–" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)) for k, v in fields.items()
        ]
        view.inventories.append((label, [("runs", ", ".join(groups[label]))] + shown))
    return view


def _facts(run: SavedRun) -> dict[str, Any]:
    """A saved run's environment in the shape the provenance lines read (``machine_info``)."""
    m = run.machine_info
    return {
        "torch": m.get("torch"),
        "torch_git": m.get("torch_git"),
        "torch_build": m.get("torch_build")
        or ("CPU" if m.get("torch") and not m.get("cuda") else f"CUDA {m.get('cuda')}"),
        "cudnn": m.get("cudnn"),
        "nccl": m.get("nccl"),
        "python": m.get("python_version"),
        "driver": m.get("driver"),
        "packages": m.get("packages") if isinstance(m.get("packages"), dict) else {},
    }


def environment_lines(runs: Sequence[SavedRun], names: Sequence[str]) -> list[str]:
    """For each run after the first whose environment differs from the first's: what differs."""
    if len(runs) < 2:
        return []
    first = _facts(runs[0])
    out = []
    for run, name in zip(runs[1:], names[1:]):
        other = _facts(run)
        if other == first:
            continue
        lines = provenance_lines(first, other, names=(names[0], name))
        out.append(" ".join(lines))
    return out
