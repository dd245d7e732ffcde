"""The regression gate tests' shared helpers: runs built in memory, verdicts by name, trials set by hand."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pandas as pd

from dpbench.results.frame import runs_frame
from dpbench.results.load import SavedRun
from validation import synthetic_runs

SLOW = "test_throughput[ddp-mlp-w2]"
OTHER = "test_throughput[dp-mlp-w2]"
_numbers = itertools.count(1)


def frames(*docs: dict) -> pd.DataFrame:
    """One side built in memory (no files), each document one run."""
    runs = [
        SavedRun(
            path=Path(f"/nowhere/m/{next(_numbers):04d}_x.json"),
            machine_info=doc["machine_info"],
            commit_info=doc["commit_info"],
            datetime=doc["datetime"],
            version=doc["version"],
            benchmarks=doc["benchmarks"],
        )
        for doc in docs
    ]
    return runs_frame(runs)


def frame(**kwargs) -> pd.DataFrame:
    return frames(synthetic_runs.make_doc(**kwargs))


def by_name(cmp) -> dict:
    return {b.name.rsplit("::", 1)[-1]: b for b in cmp.benchmarks}


def set_trials(doc: dict, name: str, times: list[float], controls: list[float] | None = None) -> dict:
    """Give benchmark ``name`` exactly these trial times (and controls): a case whose truth is known."""
    bench = next(b for b in doc["benchmarks"] if b["name"] == name)
    trials = bench["extra_info"]["trials"]
    trials.update(count=len(times), step_time_s=times, control_s=controls or [synthetic_runs.CONTROL_S] * len(times))
    bench["extra_info"]["step_time_s"] = statistics.median(times)
    return doc
