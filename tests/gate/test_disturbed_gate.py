"""The gate and disturbed trials: it judges the trials kept (re-measurements in their slots,
unreplaced disturbed ones left out), says so in the verdict's note, and stays calibrated when the
machine disturbs 1 trial in 50 (validation.noise)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from dpbench.gate.compare import compare_frames, pool_side
from dpbench.results.frame import load_runs
from validation.noise import CLEAN, aa_false_alarms, measured_disturbances

DATA = Path(__file__).resolve().parents[1] / "data" / "quick-run-disturbed-trial.json.gz"
SINGLE = "test_scaling[single-mlp-w1]"


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    path = tmp_path_factory.mktemp("results") / "vm" / "0001_quick.json"
    path.parent.mkdir()
    path.write_bytes(gzip.decompress(DATA.read_bytes()))
    return load_runs([path])


def test_the_gate_pools_the_kept_trials_and_notes_the_unreplaced_ones(frame):
    pooled = pool_side(frame, "baseline")
    name = next(n for n in pooled if n.endswith(SINGLE))
    assert len(pooled[name].runs[0]) == len(pooled[name].control_runs[0]) == 4  # the 216 ms trial left out
    assert max(pooled[name].runs[0]) < 0.02
    cmp = compare_frames(frame, frame)
    judged = {b.name: b for b in cmp.benchmarks}
    assert judged[name].note == (
        "the baseline holds 1 disturbed trial not measured again (left out where enough remain); "
        "the candidate holds 1 disturbed trial not measured again (left out where enough remain)"
    )
    assert judged[name].baseline_trials == 4 and judged[name].ratio == 1.0
    clean = next(b for n, b in judged.items() if n.endswith("test_scaling[ddp-mlp-w1]"))
    assert clean.note == ""


def test_measured_disturbances_are_the_runs_flagged_trials(frame):
    found = measured_disturbances(frame)
    assert len(found) == 16
    single = max(found, key=lambda d: d.step)
    assert single.step == pytest.approx(0.21608 / 0.0124773, rel=1e-3) and single.control > 9


@pytest.mark.slow
def test_aa_jobs_with_one_disturbed_trial_in_50_stay_calibrated(frame):
    """Seeded, small: the full 1,000-job figures are validation.simulate_disturbed_gate's (docs/validation)."""
    got = aa_false_alarms(
        CLEAN, measured_disturbances(frame), jobs=100, benchmarks=30, trials=5, rate=1 / 50, threshold=0.1, alpha=0.01
    )
    assert got["disturbed"] > 0
    assert got["left_out"] <= 2 and got["remeasured"] <= 2, got
