"""``validation.predict_collectives_heldout`` on the shared logs: every held-out row is the 16-GPU
log's, each error and summary is computed from the predictions of the same run, and the numbers the
validation page reports come out (16 GPUs from 1–8, with the line rate and with one row stated)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from dpbench.predict.measurements import read_nccl_tests
from validation import predict_collectives_heldout as heldout

DATA = Path(__file__).resolve().parents[1] / "predict" / "data"


@pytest.fixture(scope="module")
def readings() -> list[heldout.Reading]:
    return heldout.readings(DATA)


def test_every_row_is_the_held_out_logs_and_every_summary_is_its_rows(readings):
    sixteen = {m.bytes: m.time_us for m in read_nccl_tests(DATA / "nccl_16.log", collective="all_reduce")}
    eight = {m.bytes: m.time_us for m in read_nccl_tests(DATA / "nccl_8.log", collective="all_reduce")}
    assert len(readings) == 4
    for r in readings:
        stated = r.link.startswith("inter-busbw")
        # every size ≥ 1 MiB of the 16-GPU log, less the row stated
        assert [row.bytes for row in r.rows] == [
            b for b in sorted(sixteen) if b >= 1 << 20 and not (stated and b == 1 << 30)
        ]
        for row in r.rows:
            assert row.measured_us == sixteen[row.bytes] and row.basis in ("stated link",)
            unchanged = eight.get(row.bytes, eight[1 << 30] * row.bytes / (1 << 30))
            assert row.baselines_us["unchanged (8 GPUs)"] == pytest.approx(unchanged, rel=1e-12)
            line = 200.0 if not stated else 1.875 * (1 << 30) / sixteen[1 << 30] / 1e3
            assert row.baselines_us["line rate"] == pytest.approx(1.875 * row.bytes / 1e3 / line, rel=1e-12)
        model = r.summary()["model"]
        errors = [abs(row.predicted_us / row.measured_us - 1) for row in r.rows]
        assert (model["median"], model["worst"]) == (statistics.median(errors), max(errors))


def test_the_validation_pages_numbers(readings):
    got = {(r.link.split("=")[0], r.fit_min_bytes): r.summary() for r in readings}
    # (link, fit's smallest size): model's median and worst |error|, then the baselines' medians
    expected = {
        ("inter", 0): (0.226, 0.500, 0.483, 0.395),
        ("inter-busbw", 0): (0.028, 0.461, 0.467, 0.065),
        ("inter", 1 << 20): (0.358, 0.374, 0.483, 0.395),
        ("inter-busbw", 1 << 20): (0.029, 0.143, 0.467, 0.065),
    }
    for key, (median, worst, unchanged, line) in expected.items():
        s = got[key]
        assert (s["model"]["median"], s["model"]["worst"]) == pytest.approx((median, worst), abs=5e-4)
        assert s["unchanged (8 GPUs)"]["median"] == pytest.approx(unchanged, abs=5e-4)
        assert s["line rate"]["median"] == pytest.approx(line, abs=5e-4)
    for r in readings:  # the model's median beats both baselines' on this data set, and says so
        assert [v.split(":")[0] for v in r.verdicts()] == ["beats unchanged (8 GPUs)", "beats line rate"]


def test_a_predictor_that_does_not_beat_a_baseline_says_so():
    row = heldout.Row(
        bytes=1 << 20,
        world_size=16,
        measured_us=100.0,
        predicted_us=130.0,
        basis="fitted",
        algorithm="tree",
        baselines_us={"unchanged": 110.0},
    )
    r = heldout.Reading(name="x", link=None, fit_min_bytes=0, world_size=16, rows=(row,), origin="")
    assert r.verdicts() == ["does NOT beat unchanged: median 30.0% against 10.0% (worst 30.0% against 10.0%)"]


def test_the_command_prints_each_reading_and_writes_json(tmp_path, capsys):
    out = tmp_path / "heldout.json"
    assert heldout.main(["--data", str(DATA), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("== 16 from 1-8") == 4 and "model beats line rate" in text
    doc = json.loads(out.read_text())
    assert [d["summary"]["model"]["sizes"] for d in doc] == [15, 14, 15, 14]
