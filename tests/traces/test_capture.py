"""Traces captured by ``Run.trace`` in real workers (CPU/gloo; the CUDA path is gpu-marked)."""

from __future__ import annotations

import gzip
import json
import statistics

import pytest
import torch
from _slow_rank import LATE_S, SLOW_RANK_ONE

import dpbench
from dpbench.traces.analysis import analyse_case


def _traced(strategy, workload, tmp_path, *, steps=3, **options):
    with dpbench.launch(strategy, workload, world_size=2, global_batch=16, **options) as run:
        run.step(2)  # untimed warm-up, as a trial does before tracing
        result = run.trace(steps, tmp_path)
    return result, analyse_case(result.files)


@pytest.mark.serial  # a time bound: under pytest-xdist it runs alone
@pytest.mark.slow
def test_a_rank_that_sleeps_before_forward_is_the_straggler_at_every_collective(tmp_path):
    good, seen = 0, []
    for trial in range(10):  # fresh workers each time: a trial
        result, case = _traced("ddp", SLOW_RANK_ONE, tmp_path / f"t{trial}")
        skews = [c["skew_s"] for c in case["collectives"]]
        # Named at every collective; late by the injected sleep: the median within ±25%, each one
        # within ±50% (a core shared with another test's processes delays single collectives).
        ok = (
            len(skews) >= 3
            and abs(statistics.median(skews) - LATE_S) <= 0.25 * LATE_S
            and all(abs(s - LATE_S) <= 0.5 * LATE_S for s in skews)
            and all(c["straggler"] == 1 for c in case["collectives"])
        )
        good += ok
        seen.append([(round(c["skew_s"] * 1e3, 1), c["straggler"]) for c in case["collectives"]])
    assert good >= 9, (
        f"rank 1 was the 20 ms straggler (median ± 25%, each ± 50%) at every collective in {good} of 10 trials: {seen}"
    )


@pytest.mark.slow
def test_ddp_communicates_concurrently_with_compute_and_per_param_allreduce_does_not(tmp_path):
    for trial in range(3):  # interleaved, fresh workers each
        _, ddp = _traced("ddp", "mlp", tmp_path / f"ddp{trial}")
        _, per_param = _traced("allreduce", "mlp", tmp_path / f"pp{trial}", mode="per-param")
        ddp_overlap = sum(r["overlap_s"] for r in ddp["ranks"])
        pp_overlap = sum(r["overlap_s"] for r in per_param["ranks"])
        assert ddp["overlap_label"] == per_param["overlap_label"] == "concurrent"
        assert ddp_overlap > pp_overlap, (trial, ddp_overlap, pp_overlap)


@pytest.mark.slow
def test_trace_files_are_gzipped_kineto_json_with_our_labels_and_one_per_rank(tmp_path):
    result, case = _traced("allreduce", SLOW_RANK_ONE, tmp_path, steps=2, mode="per-param")
    assert [f.name for f in result.files] == ["rank0.json.gz", "rank1.json.gz"]
    assert len(result.step_times) == 3 and result.warmup == 1 and len(result.active_step_times) == 2
    trace = json.loads(gzip.decompress(result.files[1].read_bytes()))
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {
        "ProfilerStep#1",
        "ProfilerStep#2",
        "dpbench:compute",
        "dpbench:communication",
        "dpbench:optimizer",
    } <= names
    assert trace["distributedInfo"]["rank"] == 1
    assert not list(tmp_path.glob(".*"))  # no partial or temporary file left beside them
    assert [r["steps"] for r in case["ranks"]] == [2, 2] and case["problems"] == []


@pytest.mark.slow
def test_in_process_replica_threads_are_refused_with_a_reason_and_the_run_goes_on(tmp_path):
    with dpbench.launch("dp", SLOW_RANK_ONE, world_size=2, global_batch=16) as run:
        result = run.trace(2, tmp_path)
        after = run.step(1)
    assert result.files == [] and "replicas run as threads of one worker process" in result.skip_reason
    assert len(after.step_times) == 1 and not any(tmp_path.iterdir())


def test_bad_arguments_name_what_was_wrong(tmp_path):
    from dpbench.launcher.tracing import trace_run

    class _Spec:
        strategy = "ddp"

    class _Run:
        spec = _Spec()

    with pytest.raises(ValueError, match="k must be an int >= 1, got 0"):
        trace_run(_Run(), None, 0, tmp_path, warmup=1)
    with pytest.raises(ValueError, match="warmup must be an int >= 0, got -1"):
        trace_run(_Run(), None, 1, tmp_path, warmup=-1)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="path must be a directory.*found a file"):
        trace_run(_Run(), None, 1, tmp_path / "file", warmup=1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_traces_hold_kernels_and_a_memory_snapshot_of_one_step(tmp_path):
    with dpbench.launch(
        "ddp", "mlp", world_size=min(2, max(1, torch.cuda.device_count())), global_batch=64, device="cuda"
    ) as run:
        run.step(2)
        result = run.trace(3, tmp_path)
    case = analyse_case(result.files)
    assert case["device_kind"] == "cuda" and case["overlap_label"] == "hidden"
    assert all(r["compute_s"] > 0 for r in case["ranks"])
    assert result.memory_files and all(f.stat().st_size > 0 for f in result.memory_files)
