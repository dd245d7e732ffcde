"""``python -m validation.predict_ddp_published`` on the copied CSVs of PyTorch's DDP benchmark:
every ``ddp=yes`` row predicted from its model's one-GPU step, the errors computed from the same
run, and the result compared with the naive baselines'."""

from __future__ import annotations

import importlib
import json
import statistics

import pytest

from validation import predict_ddp_published as published


def test_the_stated_layer_orders_have_the_tables_parameter_counts():
    counts = {name: sum(published.torchvision_sizes(*shape)) for name, shape in published.MODELS.items()}
    assert counts == {
        "resnet50": 25557032,
        "resnet101": 44549160,
        "resnext50_32x4d": 25028904,
        "resnext101_32x8d": 88791336,
    }


def test_torch_1_4_buckets_put_the_small_bucket_last_in_ready_order():
    mib = 1 << 20
    groups = published.torch14_buckets([mib // 2, mib // 2, mib, 3 * mib, mib], cap_bytes=2 * mib)
    # definition order: the first bucket closes at 1 MiB, the next once it reaches 2 MiB (4), 1 left
    assert [g.bytes for g in groups] == [1 * mib, 4 * mib, 1 * mib]  # reversed: the first-defined last
    assert [g.ready_fraction for g in groups] == pytest.approx([1 / 6, 5 / 6, 1.0])


def test_the_twenty_rows_are_predicted_and_beat_unchanged(tmp_path, capsys):
    # Through the program's entry point; the first strategy configuration parsed imports torch.
    assert importlib.import_module("validation.predict_ddp_published").main(["--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "r.json").read_text())
    rows = result["rows"]
    assert len(rows) == 20 and {r["gpus"] for r in rows} == {1, 2, 4, 8, 16}
    for r in rows:
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)
        # the model adds the exposed collectives to the one-GPU step: never below "unchanged"
        assert r["error"] >= r["unchanged_error"] - 1e-12
    assert result["median_abs_error"] == statistics.median(abs(r["error"]) for r in rows)
    assert result["median_abs_error"] < result["median_abs_error_unchanged"]
    assert len(result["directions"]) == 8
    assert f"median |error|: model {result['median_abs_error']:.1%}" in out
    assert f"direction right: {result['directions_right']} of 8" in out
