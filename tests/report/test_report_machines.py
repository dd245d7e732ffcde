"""Machines side by side (runs of different hardware as labelled columns, not gated) and the header's
line of what differs between the runs' environments."""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import pytest

from dpbench.cli import main
from dpbench.report.html import render_report
from dpbench.report.machines import ratio_interval
from dpbench.results.load import read_run
from validation import synthetic_runs
from validation.synthetic_runs import TRAINING_CASES, bench_id

A100 = synthetic_runs.default_machine(gpus=[{"name": "NVIDIA A100-SXM4-40GB"}] * 4, driver="560.1")
TWICE = {bench_id(case): 2.0 for case in TRAINING_CASES}


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_ratio_interval_is_welchs_on_the_logs():
    ratio, lo, hi = ratio_interval([1.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    assert (ratio, lo, hi) == (2.0, 2.0, 2.0)  # no spread: the interval is the point
    ratio, lo, hi = ratio_interval([1.0, 1.1, 0.9, 1.05], [2.0, 2.2, 1.9, 2.1])
    assert lo < ratio < hi and math.isclose(
        ratio, math.exp(sum(map(math.log, [2.0, 2.2, 1.9, 2.1])) / 4 - sum(map(math.log, [1.0, 1.1, 0.9, 1.05])) / 4)
    )
    assert all(math.isnan(v) for v in ratio_interval([1.0], [2.0, 2.1]))


@pytest.mark.slow
def test_runs_of_two_machines_are_columns_with_ratios_not_verdicts(tmp_path: Path):
    h100 = synthetic_runs.make_run(tmp_path, number=1, seed=1, timelines=False)
    a100 = synthetic_runs.make_run(tmp_path, number=2, seed=2, machine=A100, slowdown=TWICE, timelines=False)
    page = render_report([read_run(h100), read_run(a100)])
    text = _text(page)
    assert 'id="machines"' in page and "Machines side by side" in text
    assert "NVIDIA H100 80GB HBM3 ×4: step" in text and "NVIDIA A100-SXM4-40GB ×4: step" in text
    assert "NVIDIA A100-SXM4-40GB ×4 / NVIDIA H100 80GB HBM3 ×4 (95% interval)" in text
    # Every training case is twice as slow on the A100, the collectives are not: each ratio's interval
    # holds its true factor (one row per configuration; a case two suites published is one row).
    section = " ".join(_text(page[page.index('id="machines"') : page.index("Inventories")]).split())
    rows = re.findall(r"(\w+) (\S+ w\d) \S+ ms \S+ ms (\d+\.\d\d)× \((\d+\.\d\d)–(\d+\.\d\d)\)", section)
    names = {(workload, f"{strategy} w{ws}") for _, workload, strategy, options, ws, _ in TRAINING_CASES if not options}
    assert names <= {(w, c) for w, c, *_ in rows}, rows
    # A run's own offset (the synthetic noise has one per run) is beyond what trials show: an interval
    # may miss by that much, so most, not all, hold the truth; every ratio is near it.
    held = 0
    for _workload, config, ratio, lo, hi in rows:
        true = 1.0 if "iB)" in config else 2.0  # the collectives: "all_reduce(4 KiB) w2"
        assert abs(float(ratio) / true - 1) < 0.1 and float(lo) < float(ratio) < float(hi), (config, ratio, lo, hi)
        held += float(lo) <= true <= float(hi)
    assert held >= 0.75 * len(rows), rows
    # The gate does not judge them: the comparison says why, the machines' inventories are shown.
    assert "runs of different machines (gpu: NVIDIA H100 80GB HBM3 vs NVIDIA A100-SXM4-40GB): not judged" in text
    assert "Inventories" in text and "560.1" in text and "550.54" in text
    assert "regressed" not in section


@pytest.mark.slow
def test_one_machine_has_no_machines_view_and_the_header_says_what_differs(tmp_path: Path):
    packages = {"torch": "2.13.0+cpu", "numpy": "2.2.6", "filelock": "3.20.0"}
    base = synthetic_runs.default_machine(
        torch="2.13.0+cpu", cuda=None, nccl=None, packages=packages, torch_build="CPU"
    )
    head = synthetic_runs.default_machine(
        torch="2.14.1+cu130",
        cuda="13.0",
        torch_build="CUDA 13.0",
        cudnn="92400",
        packages={**packages, "torch": "2.14.1+cu130", "filelock": "3.20.3", "triton": "3.6.0"},
    )
    one = synthetic_runs.make_run(tmp_path, number=1, seed=1, machine=base, timelines=False)
    two = synthetic_runs.make_run(tmp_path, number=2, seed=2, machine=head, timelines=False)
    page = render_report([read_run(one), read_run(two)])
    text = _text(page)
    assert 'id="machines"' not in page
    (line,) = re.findall(r"Environments differ: ([^\n]*)", text)
    assert line.strip() == (
        "0001_synth: torch 2.13.0+cpu (CPU), Python 3.11.7, driver 550.54 · 0002_synth: torch 2.14.1+cu130 (CUDA 13.0, "
        "cuDNN 92400, NCCL 2.21.5), Python 3.11.7, driver 550.54; 2 other packages differ: filelock 3.20.0 → "
        "3.20.3, triton (absent) → 3.6.0"
    )


def test_compare_refuses_pooling_machines_and_points_to_the_report(tmp_path: Path, capsys):
    one = synthetic_runs.make_run(tmp_path, number=1, seed=1, timelines=False, comm=False)
    two = synthetic_runs.make_run(tmp_path, number=2, seed=2, machine=A100, timelines=False, comm=False)
    three = synthetic_runs.make_run(tmp_path, number=3, seed=3, timelines=False, comm=False)
    assert main(["compare", "--baseline", str(one), str(two), "--candidate", str(three)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs from different machines (gpu:" in err[0], err
    assert err[0].endswith("to see machines side by side, use dpbench report RUN RUN"), err
