"""The suites until settled, end to end: real fresh-process trials of two cases, the plan and end
lines, and the design's level saved with every training case."""

from __future__ import annotations

import json
import uuid

import pytest
from _suites_helpers import _env, _leftovers, _pytest

from dpbench.decision.sequential import plan_looks

pytestmark = pytest.mark.slow


def test_the_throughput_suite_until_settled_saves_the_designs_level(tmp_path):
    marker = uuid.uuid4().hex
    storage = tmp_path / "results"
    # At most 6 trials: the design looks at 5 and 6 (plan_looks(6).looks), so the run is cheap and
    # stops by the sixth pass whatever the machine does.
    proc = _pytest(
        [
            "suites/test_throughput.py",
            "-k",
            "single or ddp and not bucket",
            "--dpbench-until-settled",
            "--dpbench-max-trials=6",
            "--dpbench-budget=10m",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save=settled",
            "-q",
        ],
        _env(marker),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "2 cases × 5–6 trials until settled, interleaved" in out, out[-4000:]
    assert "2 cases; ~" in out and "looks at 5 and 6 trials, until settled at 90% per question" in out
    assert "budget 10 min" in out
    assert "trials settled after 5 passes" in out or "the trials stopped at their maximum (6)" in out, out[-4000:]
    (saved,) = storage.glob("*/0001_settled.json")
    run = json.loads(saved.read_text())
    plan = plan_looks(6)
    settled = run["machine_info"]["dpbench"]["until_settled"]
    assert settled["passes"] in (5, 6) and settled["budget_s"] == 600.0
    assert (settled["max_trials"], settled["looks"], settled["level"]) == (6, [5, 6], 0.9)
    assert settled["claim_looks"] == len(plan.looks) == 2 and settled["stopped"] in ("settled", "maximum")
    for bench in run["benchmarks"]:
        assert bench["extra_info"]["claim_looks"] == 2
        assert bench["extra_info"]["trials"]["count"] == settled["passes"]
    assert not _leftovers(marker, grace=10)
