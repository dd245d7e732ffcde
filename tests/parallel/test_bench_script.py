"""Smoke test of python -m benchmarks.dp_overhead with a tiny model, so the benchmark cannot rot."""

from __future__ import annotations

import importlib
import json


def test_bench_script_prints_every_case_and_writes_json(tmp_path, capsys):
    bench = importlib.import_module("benchmarks.dp_overhead")
    out_file = tmp_path / "bench.json"
    args = [
        "--device",
        "cpu",
        "--rounds",
        "2",
        "--iters",
        "1",
        "--width",
        "16",
        "--depth",
        "1",
        "--batch",
        "4",
        "--json",
        str(out_file),
    ]
    assert bench.main(args) == 0
    printed = capsys.readouterr().out
    rows = json.loads(out_file.read_text())["rows"]
    assert {(r["case"], r["variant"]) for r in rows} == {
        ("forward", "plain"),
        ("forward", "dpbench DP x1"),
        ("forward tiny", "plain"),
        ("forward tiny", "dpbench DP x1"),
        ("fwd+bwd small", "plain"),
        ("fwd+bwd small", "dpbench DP x1"),
        ("fwd+bwd", "plain"),
        ("fwd+bwd", "dpbench DP x2 (same device)"),
    }
    for r in rows:
        assert r["median_ms"] > 0 and r["variant"] in printed
        if r["variant"] == "plain":  # the baseline against itself
            assert r["vs_baseline_pct"] == 0 and r["paired_overhead_us"] == 0
