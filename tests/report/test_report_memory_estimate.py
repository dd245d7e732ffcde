"""The memory view shows the saved estimate beside the measured memory, and its error per case."""

from __future__ import annotations

from dpbench.report import load_runs, plots_resources
from dpbench.report.data import report_data
from validation import synthetic_runs
from validation.synthetic_runs import write_json

MIB = 2**20


def _estimate(params: int, peak: int | None) -> dict:
    rank = {
        "rank": 0, "params_bytes": params, "grads_bytes": params, "optimizer_state_bytes": 2 * params,
        "comm_buffer_bytes": params, "activation_bytes": None if peak is None else MIB,
        "peak_bytes": peak,
    }  # fmt: skip
    need = peak if peak is not None else 5 * params
    return {"strategy": "ddp", "world_size": 2, "need_bytes": need, "ranks": [rank, {**rank, "rank": 1}]}


def _measured(params: int, peak: int) -> list[dict]:
    return [
        {"rank": r, "params_bytes": params, "grads_bytes": params, "optimizer_state_bytes": 2 * params,
         "peak_kind": "cuda_max_allocated", "peak_bytes": peak}
        for r in (0, 1)
    ]  # fmt: skip


def test_the_error_table_lists_each_case_with_a_saved_estimate(tmp_path):
    doc = synthetic_runs.make_doc(comm=False)
    benches = doc["benchmarks"]
    benches[0]["extra_info"].update(
        memory_estimate=_estimate(10 * MIB, 55 * MIB), memory_per_rank=_measured(10 * MIB, 50 * MIB)
    )
    benches[1]["extra_info"].update(
        memory_estimate=_estimate(4 * MIB, None), memory_per_rank=_measured(4 * MIB, 30 * MIB)
    )
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc))
    part = report_data(frame).part(plots_resources.memory)
    errors = part.tables[-1]
    assert errors.columns[3:] == [
        "state estimated", "state measured", "state error", "peak estimated", "peak measured", "peak error"
    ]  # fmt: skip
    rows = sorted(r[3:] for r in errors.rows)
    assert rows == [
        ["16 MiB", "16 MiB", "+0.0%", "– (state only)", "30 MiB (cuda_max_allocated)", "–"],
        ["40 MiB", "40 MiB", "+0.0%", "55 MiB", "50 MiB (cuda_max_allocated)", "+10.0%"],
    ]
    assert "red diamond marks the estimated peak" in part.description
