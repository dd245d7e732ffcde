"""The terminal decision of ``dpbench run`` is the suite session's decision (one estimator), read
from the saved run: on a real quick run, a configuration whose 4 paired trials are each slower is
not called level, and none is crowned "fastest" while others are level with it."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

from dpbench.report.session_summary import decision_text
from dpbench.runner.summary import print_decision

QUICK = Path(__file__).parents[1] / "gate" / "data" / "quick-throughput.json.gz"


def test_the_run_decision_is_the_sessions_decision(tmp_path):
    path = tmp_path / "0001_quick.json"
    path.write_bytes(gzip.decompress(QUICK.read_bytes()))
    out = io.StringIO()
    print_decision(path, out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "decision (per workload; the report has every number):"
    assert lines[1:] == decision_text([path]).splitlines()
    assert lines[1] == (
        "mlp: single w1 has the highest median at 4,760 samples/s; it is significantly faster than 3 of "
        "the 6 others; too few paired trials to rank manual w2, allreduce w2, fsdp w2 (90% intervals need 5 pairs)."
    )
    assert not [line for line in lines if line.startswith("  fastest:")]  # the old summary's crown


def test_a_run_without_training_benchmarks_says_so(tmp_path):
    run = json.loads(gzip.decompress(QUICK.read_bytes()))
    run["benchmarks"] = run["benchmarks"][:1]
    run["benchmarks"][0]["extra_info"] = {**run["benchmarks"][0]["extra_info"], "kind": "collective"}
    path = tmp_path / "0001_collective.json"
    path.write_text(json.dumps(run))
    out = io.StringIO()
    print_decision(path, out=out)
    assert out.getvalue().splitlines()[1:] == ["no training benchmarks in this run"]
