"""Configurations: the frame with one row per measured case per run, and the one ratio "× single".

Several suites publish the same measured case (``case_key``: strategy, workload, world size,
batch, resolved options): ``test_throughput[ddp-mlp-w2]`` and ``test_scaling[ddp-mlp-w2]`` are
the same trials. The report shows such a case once, naming every suite that published it.

Every "× single" on the page (decision heatmap, sentences, tables) comes from
:func:`vs_single`: the case's trials against single's trials of the same run, workload and
global batch, trial i against trial i (:func:`dpbench.stats.paired_ratio`).
"""

from __future__ import annotations

import math

import pandas as pd

from dpbench.schema import BASELINE_STRATEGY
from dpbench.stats import SHOWN_CONFIDENCE, PairedRatio, paired_ratio

__all__ = ["SINGLE", "configurations", "joules_per_sample", "single_for", "throughputs", "vs_single"]

SINGLE = BASELINE_STRATEGY
SUITE_METRICS = ("scaling_efficiency", "relative_to_ddp", "baseline_samples_per_s", "sampler.timeline")


def _batch(frame: pd.DataFrame) -> pd.Series:
    """The global batch as the frame read it (samples/s × s/step), rounded: NaN where unknown."""
    batch = pd.to_numeric(frame["samples_per_s"], errors="coerce") * pd.to_numeric(
        frame["step_time_s"], errors="coerce"
    )
    return batch.round()


def configurations(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, ``case_key``) — rows without a key stay one per benchmark — with
    ``suites`` (every suite that published it, in order), ``benchmarks`` / ``fullnames`` (theirs),
    ``batch`` and ``config``: the case's name inside its workload (``ddp w2``; `` · batch N``
    added where the workload has the same strategy and world size at several batches)."""
    keyed = frame["case_key"].map(lambda v: isinstance(v, str) and v != "")
    key = frame["case_key"].where(keyed, "bench:" + frame["fullname"].astype(str))
    frame = frame.assign(_key=key, batch=_batch(frame))
    suite = frame["suite"].map(lambda v: v if isinstance(v, str) and v else "")
    grouped = frame.assign(_suite=suite).groupby(["run", "_key"], sort=False)
    suites = grouped["_suite"].agg(lambda s: tuple(dict.fromkeys(v for v in s if v)))
    names = grouped["name"].agg(lambda s: tuple(dict.fromkeys(s)))
    fullnames = grouped["fullname"].agg(lambda s: tuple(dict.fromkeys(s)))
    out = frame.drop_duplicates(["run", "_key"], keep="first").copy()
    index = pd.MultiIndex.from_arrays([out["run"], out["_key"]])
    # What only one suite computes about the shared trials (scaling efficiency, × DDP) comes
    # from whichever of its benchmarks carries it.
    for column in [c for c in frame.columns if c.startswith(SUITE_METRICS)]:
        out[column] = list(grouped[column].first().reindex(index))
    out["suites"] = list(suites.reindex(index))
    out["benchmarks"] = list(names.reindex(index))
    out["fullnames"] = list(fullnames.reindex(index))
    out["config"] = [_name(r) for _, r in out.iterrows()]
    workload = out["workload"].fillna("").astype(str)
    # The same strategy and world size at several batches (throughput vs weak scaling): say which.
    batches = out.groupby([workload, out["config"]])["batch"].transform(lambda b: b.dropna().nunique())
    many = (batches > 1) & out["batch"].notna()
    out.loc[many, "config"] = out.loc[many, "config"] + " · batch " + out.loc[many, "batch"].map("{:.0f}".format)
    # Anything still ambiguous inside a run and workload (other options resolved the same way): the benchmark.
    dup = out.assign(_w=workload).duplicated(["run", "_w", "config"], keep=False)
    out.loc[dup, "config"] = out.loc[dup, "config"] + " [" + out.loc[dup, "name"].astype(str) + "]"
    return out.drop(columns="_key").reset_index(drop=True)


def _name(row: pd.Series) -> str:
    """``ddp(bucket_cap_mb=5) w2``: the frame's label without the ``[suite]`` it needed to tell
    suites apart (one configuration now lists its suites instead)."""
    label, short = str(row["label"]), str(row["strategy_label"])
    ws = row["world_size"]
    if label.startswith(f"{short} w") and isinstance(ws, (int, float)) and not isinstance(ws, bool):
        return f"{short} w{ws:g}"
    return label


def throughputs(row: pd.Series) -> list[float]:
    """Samples/s of each trial: global batch / that trial's step time; NaN in the slot of a trial
    left out (disturbed), so that trial i still pairs with trial i."""
    batch = row["batch"]
    return [batch / t if t > 0 else math.nan for t in row["trial_times"]] if batch > 0 else []


def joules_per_sample(row: pd.Series) -> list[float]:
    """GPU energy per sample of each trial (``energy.trials``), NaN where the counter was not read or
    the trial is left out (disturbed), so that trial i still pairs with trial i; [] where the run
    recorded no energy (older runs, convergence cases)."""
    records = row.get("energy.trials")
    if not isinstance(records, list):
        return []
    times = row["trial_times"] if isinstance(row.get("trial_times"), list) else []
    out = []
    for i, record in enumerate(records):
        value = record.get("j_per_sample") if isinstance(record, dict) else None
        kept = i < len(times) and times[i] > 0  # a left-out slot is NaN
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        out.append(float(value) if kept and number and value > 0 else math.nan)
    return out


def single_for(configs: pd.DataFrame) -> dict[tuple[str, str, float], pd.Series]:
    """``(run, workload, batch)`` → that run's single configuration of the workload at that batch."""
    singles = configs[(configs["strategy"] == SINGLE) & configs["batch"].notna()]
    out: dict[tuple[str, str, float], pd.Series] = {}
    for _, row in singles.iterrows():
        out.setdefault((str(row["run"]), str(row["workload"]), float(row["batch"])), row)
    return out


def vs_single(case: pd.Series, single: pd.Series) -> PairedRatio:
    """The case's throughput / single's at the same global batch, trial i against trial i; with
    fewer than two pairs the plain ratio of the medians (``pairs`` says which)."""
    ratio = paired_ratio(throughputs(case), throughputs(single), SHOWN_CONFIDENCE)
    if ratio.pairs >= 2:
        return ratio
    plain = float(case["samples_per_s"]) / float(single["samples_per_s"])
    return PairedRatio(ratio=plain, lo=math.nan, hi=math.nan, pairs=ratio.pairs)
