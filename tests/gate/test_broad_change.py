"""A change that moves most benchmarks at once: the gate must tell a regression of everything (the
controls held) from a machine that moved (the controls moved too).

The baseline is a real quick run's throughput suite (21 benchmarks, 5 trials each, its controls); the
candidate a copy whose chosen cases are slower by an exact factor, controls untouched or moved with them.
Noise-free on purpose: the verdict each case deserves is known exactly.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest
from _compare_helpers import frames

from dpbench.gate.compare import compare_frames
from dpbench.gate.verdicts import Verdict

DATA = Path(__file__).parent / "data" / "quick-throughput.json.gz"


@pytest.fixture(scope="module")
def real() -> dict:
    with gzip.open(DATA, "rt") as f:
        return json.load(f)


def _scaled(doc: dict, factor: float, *, which, controls: float = 1.0) -> dict:
    """A copy of ``doc`` whose benchmarks chosen by ``which(name)`` take ``factor`` × their trial times
    (every step-time field scaled alike) and whose controls all take ``controls`` ×."""
    out = copy.deepcopy(doc)
    for bench in out["benchmarks"]:
        info = bench["extra_info"]
        trials = info["trials"]
        trials["control_s"] = [c * controls for c in trials["control_s"]]
        f = factor if which(bench["name"]) else controls
        trials["step_time_s"] = [t * f for t in trials["step_time_s"]]
        trials["round_times_s"] = [[t * f for t in r] for r in trials["round_times_s"]]
        info["step_time_s"] *= f
        for key in ("mean", "median", "min", "max"):
            bench["stats"][key] *= f
    return out


def _relu_cases(name: str) -> bool:
    return "-mlp-" in name or "-lenet-" in name


def _verdicts(cmp) -> dict[str, Verdict]:
    return {b.name.rsplit("::", 1)[-1]: b.verdict for b in cmp.benchmarks}


def test_a_regression_of_most_cases_with_the_controls_still_fails(real):
    """The 14 mlp/lenet cases ×1.7, the 7 transformer cases and every control untouched: the
    regression the gate passed as "the machine changed" (other benchmarks +70%, controls +0%)."""
    cand = _scaled(real, 1.7, which=_relu_cases)
    cmp = compare_frames(frames(real), frames(cand))
    verdicts = _verdicts(cmp)
    assert len(verdicts) == 21
    # Every slowed case is flagged (the baseline's disturbed trials, which this run holds, are left out
    # of every side alike: dpbench.results.disturbed).
    assert {n for n, v in verdicts.items() if v == Verdict.REGRESSED} == {n for n in verdicts if _relu_cases(n)}
    assert {verdicts[n] for n in verdicts if not _relu_cases(n)} == {Verdict.UNCHANGED}
    assert cmp.family.reference_size == 7 and cmp.family.reference_anchored
    assert (
        cmp.family.broad_note == "14 of 21 cases slower by +70.0% while the controls held (+0.0%): a broad regression"
    )
    assert cmp.family.shift_basis == "benchmarks"  # judged beyond the 7 cases that stayed with the controls
    assert cmp.family.broad == "regression"
    assert cmp.exit_code == 1


def test_every_case_slower_with_the_controls_still_fails_the_job(real):
    cand = _scaled(real, 1.3, which=lambda name: True)
    cmp = compare_frames(frames(real), frames(cand))
    assert cmp.family.shift_basis == "controls"
    assert cmp.family.broad == "regression"
    assert cmp.family.broad_note.startswith("21 of 21 cases slower by +30.0% while the controls held")
    assert cmp.exit_code == 1


def test_every_case_and_the_controls_slower_is_the_machine(real):
    cand = _scaled(real, 1.12, which=lambda name: True, controls=1.12)
    cmp = compare_frames(frames(real), frames(cand))
    assert set(_verdicts(cmp).values()) <= {Verdict.UNCHANGED, Verdict.INCONCLUSIVE}
    assert cmp.family.broad == "machine"
    assert cmp.exit_code == 0


def test_an_unchanged_copy_passes_with_no_broad_change(real):
    cmp = compare_frames(frames(real), frames(copy.deepcopy(real)))
    assert set(_verdicts(cmp).values()) == {Verdict.UNCHANGED}
    assert cmp.family.broad == "none"
    assert cmp.exit_code == 0
