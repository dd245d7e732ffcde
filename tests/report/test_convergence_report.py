"""The "Time to accuracy" part: curves, seconds per epoch, d2l's sentence, time to target, parity verdict."""

from __future__ import annotations

import math

import pytest

from dpbench.report.convergence import d2l_line, parity_verdict, time_to_accuracy
from dpbench.report.html import render_report
from dpbench.results.frame import runs_frame
from dpbench.results.load import read_run
from validation import synthetic_runs

CASES = [
    ("convergence", "digits-mlp", "single", {}, 1, 0.002),
    ("convergence", "digits-mlp", "ddp", {}, 2, 0.003),
    ("convergence", "digits-mlp", "fsdp", {}, 2, 0.004),
    ("throughput", "mlp", "ddp", {}, 2, 0.01),
]
CURVES = {"single": [0.5, 0.9, 0.96], "ddp": [0.5, 0.9, 0.96], "fsdp": [0.5, 0.88, 0.95]}
SECS = {"single": 1.0, "ddp": 1.5, "fsdp": 2.25}


def _convergence(strategy: str) -> dict:
    curve, sec = CURVES[strategy], SECS[strategy]
    reached = next(i + 1 for i, a in enumerate(curve) if a >= 0.9)
    return {
        "recipe": "digits-mlp",
        "dataset": "digits",
        "epochs": 3,
        "test_accuracy": curve,
        "train_loss": [1.0, 0.5, 0.25],
        "sec_per_epoch": sec,
        "sec_per_epoch_ci95": [sec * 0.9, sec * 1.1],
        "epoch_samples_per_s": 1408 / sec,
        "target_accuracy": 0.9,
        "epochs_to_target": reached,
        "time_to_target_s": sec * reached,
        "parity_tolerance": 0.005,
        "accuracy_gap_to_reference": None if strategy == "single" else curve[-1] - CURVES["single"][-1],
    }


def _run(tmp_path):
    doc = synthetic_runs.make_doc(cases=CASES, comm=False, trials=2)
    for bench in doc["benchmarks"]:
        extra = bench["extra_info"]
        if extra["suite"] == "convergence":
            extra["convergence"] = _convergence(extra["strategy"])
    return read_run(synthetic_runs.write_json(tmp_path / synthetic_runs.MACHINE_ID / "0001_conv.json", doc))


def test_the_part_shows_d2ls_sentence_time_to_target_and_a_verdict_beyond_noise(tmp_path):
    frame = runs_frame([_run(tmp_path)])
    rows = frame[frame["suite"] == "convergence"].assign(case=lambda f: f["label"])
    part = time_to_accuracy(rows, ["0001_conv"])
    assert part.title == "Time to accuracy" and [i.title for i in part.images] == [
        "test accuracy per epoch",
        "seconds per epoch",
    ]
    table, verdicts = part.tables
    by_case = {row[2].split(":")[0]: row for row in table.rows}
    assert by_case["ddp w2"][2] == "ddp w2: test acc 0.96, 1.5 sec/epoch"
    assert by_case["fsdp w2"][3] == "0.950" and by_case["fsdp w2"][9] == "-1.00 pp"
    assert by_case["single w1"][8] == "2 s (epoch 2, ≥ 0.900)" and by_case["fsdp w2"][8] == "6.75 s (epoch 3, ≥ 0.900)"
    assert by_case["ddp w2"][6] == "1.35 s – 1.65 s"
    assert "1.00 pp" in verdicts.rows[0][2] and "BEYOND float noise (> 0.50 pp)" in verdicts.rows[0][2]
    # The throughput suite's rows carry no curve: no part there.
    assert time_to_accuracy(frame[frame["suite"] == "throughput"].assign(case=lambda f: f["label"]), []) is None


@pytest.mark.slow  # renders a whole report
def test_the_report_renders_the_part_in_its_own_section(tmp_path):
    html = render_report([_run(tmp_path)])
    start = html.index('<section id="convergence"')
    section = html[start : html.index("</section>", start)]
    assert "Time to accuracy" in section and "single w1: test acc 0.96, 1 sec/epoch" in section
    # Only there: the throughput suite's figures carry no accuracy curve.
    assert html.count("test acc 0.96") == section.count("test acc 0.96")


def test_parity_verdicts():
    assert parity_verdict({"single w1": 0.9638, "ddp w2": 0.9638}, 0.005) == (
        "all 2 strategies reached the same final test accuracy, 0.9638 (gap 0 pp): within float noise (≤ 0.50 pp)"
    )
    assert "within float noise" in parity_verdict({"a": 0.964, "b": 0.961}, 0.005)
    assert "BEYOND" in parity_verdict({"a": 0.964, "b": 0.95}, 0.005)
    assert "no parity expected" in parity_verdict({"a": 0.92, "b": 0.90}, None)
    assert parity_verdict({"a": 0.9, "b": math.nan}, 0.005) == "one strategy only: nothing to compare"
    assert d2l_line("ddp w2", 0.8412, 2.1) == "ddp w2: test acc 0.84, 2.1 sec/epoch"
