"""Smoke test of python -m benchmarks.sharding on a small case, so the benchmark cannot rot."""

from __future__ import annotations

import importlib
import json

import pytest


@pytest.mark.slow
def test_bench_sharding_prints_every_variant_and_the_optimizer_state_split(tmp_path, capsys):
    bench = importlib.import_module("benchmarks.sharding")
    out_file = tmp_path / "sharding.json"
    assert (
        bench.main(
            ["--workload", "mlp", "--global-batch", "8", "--rounds", "2", "--steps", "1", "--json", str(out_file)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    rows = {r["variant"]: r for r in json.loads(out_file.read_text())["rows"]}
    assert list(rows) == ["ddp", "zero", "fsdp reshard_after_forward=True", "fsdp reshard_after_forward=False"]
    for name, row in rows.items():
        assert name in printed and row["step_time_s"] > 0 and len(row["round_times_s"]) == 2
    full = [m["optimizer_state_bytes"] for m in rows["ddp"]["memory_per_rank"]]
    for name in ("zero", "fsdp reshard_after_forward=True"):
        split = [m["optimizer_state_bytes"] for m in rows[name]["memory_per_rank"]]
        assert abs(sum(split) - full[0]) <= 0.01 * full[0]  # the state is split, not copied
        assert max(split) < 0.75 * full[0]
