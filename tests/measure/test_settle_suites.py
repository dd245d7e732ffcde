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
    # At most 8 trials: the design's one look is at 5 (plan_looks(8).steps), so the run is cheap and
    # stops there whatever the machine does.
    proc = _pytest(
        [
            "suites/test_throughput.py",
            "-k",
            "single or ddp and not bucket",
            "--dpbench-until-settled",
            "--dpbench-max-trials=8",
            "--dpbench-budget=10m",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save=settled",
            "-q",
        ],
        _env(marker),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "2 cases × 5–8 trials until settled, interleaved" in out, out[-4000:]
    assert "2 cases; ~" in out and "5–8 trials each, until settled at 93.8%" in out and "budget 10 min" in out
    assert "trials settled after 5 passes" in out or "the trials stopped after 5 passes" in out, out[-4000:]
    (saved,) = storage.glob("*/0001_settled.json")
    run = json.loads(saved.read_text())
    plan = plan_looks(8)
    settled = run["machine_info"]["dpbench"]["until_settled"]
    assert settled["passes"] == 5 and settled["max_trials"] == 8 and settled["budget_s"] == 600.0
    assert settled["claim_level"] == plan.look_level and settled["stopped"] in ("settled", "design")
    for bench in run["benchmarks"]:
        assert bench["extra_info"]["claim_level"] == plan.look_level
        assert bench["extra_info"]["trials"]["count"] == 5
    assert not _leftovers(marker, grace=10)
