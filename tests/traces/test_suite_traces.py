"""``--dpbench-trace`` end to end: traces published beside the saved run, the breakdown in
extra_info, dp skipped with its reason and still measured, and nothing saved on Ctrl-C. A bad
``DPBENCH_TRACE`` is the session's usage error: tests/measure/test_tracing.py (one usage error runs
end to end in tests/test_suites_smoke.py)."""

from __future__ import annotations

import json
import uuid

import pytest
from _suites_helpers import _env, _interrupted_run, _leftovers, _pytest

pytestmark = pytest.mark.slow


def test_traced_suite_run_publishes_one_trace_per_rank_and_the_breakdown(tmp_path, short_tmp):
    marker = uuid.uuid4().hex
    storage = tmp_path / "results"
    proc = _pytest(
        [
            "suites/test_throughput.py",
            "-q",
            "-k",
            "ddp-mlp-w2 or dp-mlp-w2",
            "--dpbench-trace",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save=traced",
        ],
        _env(marker, DPBENCH_TRIALS="1", TMPDIR=str(short_tmp)),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    (run,) = storage.glob("*/0001_traced.json")
    infos = {b["extra_info"]["strategy"]: b["extra_info"] for b in json.loads(run.read_text())["benchmarks"]}
    ddp = infos["ddp"]["trace_breakdown"]
    assert [run.parent / f for f in ddp["files"]] == sorted(run.parent.glob("traces/*/ddp-mlp-w2-b64/rank*.json.gz"))
    assert len(ddp["files"]) == 2 and ddp["problems"] == [] and ddp["overlap_label"] == "concurrent"
    assert [r["rank"] for r in ddp["ranks"]] == [0, 1] and ddp["overhead"]["ratio"] > 0
    assert "replicas run as threads" in infos["dp"]["trace_breakdown"]["skipped"]
    assert infos["dp"]["step_time_s"] > 0  # still measured
    assert not list(short_tmp.glob("dpbench-traces-*"))  # the staging directory is gone
    assert not _leftovers(marker, grace=10)


def test_ctrl_c_during_a_traced_run_publishes_no_trace(tmp_path):
    marker = uuid.uuid4().hex
    _interrupted_run(
        tmp_path,
        marker,
        when=r"trial 2/2 · .*ddp-mlp-w2",
        args=["suites/", "-k", "test_throughput and ddp-mlp-w2", "--dpbench-trace"],
    )
    assert not list((tmp_path / "results").rglob("traces/*")), "an interrupted session published traces"
