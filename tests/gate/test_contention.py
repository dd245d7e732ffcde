"""Other processes' load during the trials: measured from the sampler's summaries, and a guard on the
broad verdict (the controls can miss contention that the multi-process trials meet).

``data/aa-contended-*.json.gz``: two real runs of the same code (the mlp cases of the throughput
suite, quick profile) taken on the 2-core development VM while other engineers' test suites ran;
other processes used about half and three quarters of the CPUs, and the benchmarks moved +25% to
+600% while the controls held.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
from pathlib import Path

import pytest
from _compare_helpers import frames
from test_broad_change import _scaled

from dpbench.decision.contention import foreign_cpu
from dpbench.gate.compare import compare_frames

DATA = Path(__file__).parent / "data"


def _load(name: str) -> dict:
    with gzip.open(DATA / name, "rt") as f:
        return json.load(f)


def _sampler(machine_pct: float, *pid_pcts: float) -> dict:
    devices = {"cpu": {"cpu_pct_mean": machine_pct}}
    devices.update({f"pid:{100 + i}": {"cpu_pct_mean": p} for i, p in enumerate(pid_pcts)})
    return {"devices": devices}


def test_foreign_share_is_the_machines_use_minus_the_watched_processes():
    # 2 cores. Trial 1: the machine 100% busy, two ranks at 60% and 40% of one core (50% of the
    # machine) → 0.5. Trial 2: 50% busy, one rank at 60% of a core → 0.2. Trial 3: the ranks' own
    # use exceeds the machine's reading (sampling jitter) → 0, not negative. The median: 0.2.
    trials = {"sampler": [_sampler(100.0, 60.0, 40.0), _sampler(50.0, 60.0), _sampler(30.0, 50.0, 30.0)]}
    assert foreign_cpu(trials, 2) == pytest.approx(0.2)
    assert math.isnan(foreign_cpu({"sampler": []}, 2))
    assert math.isnan(foreign_cpu(trials, None))  # no core count: unknown, not a guess


def test_a_contended_aa_pair_is_unsettled_not_a_broad_regression():
    base, same = _load("aa-contended-base.json.gz"), _load("aa-contended-same.json.gz")
    cmp = compare_frames(frames(base), frames(same))
    assert cmp.family.broad == "unsettled"
    assert cmp.exit_code == 0
    assert cmp.family.broad_note.startswith("7 of 7 cases slower by +25.4% to +597.9% while the controls held (-1.3%)")
    assert (
        "but other processes used 78% of the CPUs during the candidate's trials (50% during the baseline's), "
        "which the controls may have missed: inconclusive for the job"
    ) in cmp.family.broad_note
    assert any(w.startswith("other processes used 78% of the CPUs") for w in cmp.warnings)


def _contended(doc: dict) -> dict:
    """``doc`` with every trial's sampler saying the machine was all busy while its own processes got a
    third of what they had: other processes took the rest."""
    out = copy.deepcopy(doc)
    for bench in out["benchmarks"]:
        for summary in bench["extra_info"]["trials"]["sampler"]:
            for key, device in summary["devices"].items():
                if key == "cpu":
                    device["cpu_pct_mean"] = 100.0
                elif key.startswith("pid:"):
                    device["cpu_pct_mean"] /= 3
    return out


def test_a_broad_regression_on_a_quiet_machine_still_fails_and_on_a_busy_one_is_unsettled():
    real = _load("quick-throughput.json.gz")
    slower = _scaled(real, 1.3, which=lambda name: True)
    quiet = compare_frames(frames(real), frames(slower))
    assert (quiet.family.broad, quiet.exit_code) == ("regression", 1)
    busy = compare_frames(frames(real), frames(_contended(slower)))
    assert busy.family.broad == "unsettled"
    assert "which the controls may have missed" in busy.family.broad_note
    # Cases regressed on their own still fail the job: the guard is on the broad verdict only.
    assert busy.exit_code == (1 if busy.regressions else 0)
