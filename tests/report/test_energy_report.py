"""GPU energy and the sampled window in the report, from fabricated saved runs: the numbers table's
J/sample and avg W columns (or why energy is absent, once), the line a case whose GPU window was
too short for NVML gets, the decision's "most frugal" line — and a run saved before energy existed
still loads and renders without any of them."""

from __future__ import annotations

import json
from pathlib import Path

from dpbench.decision.text import frugal_text
from dpbench.measure.energy import energy_info, trial_energy
from dpbench.report import plots
from dpbench.report.data import report_data
from dpbench.report.decision import decisions
from dpbench.report.run_notes import run_warnings
from dpbench.results.frame import load_runs
from validation.synthetic_runs import make_doc

CASES = [
    ("throughput", "mlp", "single", {}, 1, 0.020),
    ("throughput", "mlp", "ddp", {}, 2, 0.012),
    ("throughput", "mlp", "dp", {}, 2, 0.016),
]
SAMPLES = 25_600  # samples the timed rounds of each trial trained
TRIALS = 6
# J per sample per trial: ddp is the fastest and spends the most per sample; single the least.
JOULES = {"single": 0.010, "ddp": 0.016, "dp": 0.013}
SPREAD = (1.00, 1.01, 0.99, 1.00, 1.02, 0.98)
IDLE = {"devices": {"cuda:0": {"w": 61.0, "absent": None}}, "absent": None}
SHORT = {"window_s": 0.41, "needed_s": 2.0, "short": True}
LONG = {"window_s": 2.6, "needed_s": 2.0, "short": False}


def _gpu_summary(joules: float | None) -> dict:
    absent = None if joules is not None else "no_counter"
    gpu = {"energy_j": joules, "energy_window_s": 2.5, "energy_absent": absent, "energy_held_s": 0.0}
    return {"devices": {"cuda:0": gpu} if joules is not None else {}}


def _saved(tmp_path: Path, *, gpu: bool) -> Path:
    doc = make_doc(cases=CASES, comm=False, timelines=False, trials=TRIALS, seed=3)
    for bench in doc["benchmarks"]:
        extra = bench["extra_info"]
        strategy = extra["strategy"]
        records = [
            trial_energy(_gpu_summary(JOULES[strategy] * f * SAMPLES if gpu else None), samples=SAMPLES) for f in SPREAD
        ]
        extra["energy"] = energy_info(records, left_out=[False] * TRIALS, idle=IDLE if gpu else None)
        short = strategy == "dp" and gpu  # two of dp's six trials sampled its GPU for 0.41 s only
        windows = [SHORT if short and t in (1, 4) else LONG for t in range(TRIALS)]
        extra["sampled_window"] = (
            {"needed_s": 2.0, "window_s": [w["window_s"] for w in windows], "short": [w["short"] for w in windows]}
            if gpu
            else None
        )
    path = tmp_path / "Linux-CPython-3.11-64bit" / f"0001_{'gpu' if gpu else 'cpu'}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _data(path: Path):
    return report_data(load_runs([path]))


def _table(data) -> dict[str, dict[str, str]]:
    part = plots.headline(data.configs, data.runs)
    table = part.tables[0]
    return {row[2]: dict(zip(table.columns, row)) for row in table.rows}, part


def test_a_gpu_run_shows_energy_per_sample_and_average_draw_beside_the_idle_draw(tmp_path):
    rows, part = _table(_data(_saved(tmp_path, gpu=True)))
    assert list(next(iter(rows.values())))[-2:] == ["J/sample", "avg W"]
    # Medians over the trials (0.01 × the middle two of SPREAD) and their between-trial CV.
    assert rows["single w1"]["J/sample"] == "0.01 J/sample (CV 1.4%)"
    assert rows["ddp w2"]["J/sample"] == "0.016 J/sample (CV 1.4%)"
    # 0.01 J/sample × 25,600 samples over 2.5 s: 102 W, beside the session's idle 61 W.
    assert rows["single w1"]["avg W"] == "102 W (idle 61 W)"
    assert "not power × time" in part.description


def test_a_case_whose_gpu_window_was_too_short_for_nvml_says_so(tmp_path):
    data = _data(_saved(tmp_path, gpu=True))
    lines = [w for w in run_warnings(data.frame) if "sampled for" in w]
    assert lines == [
        "0001_gpu · dp w2: its GPUs were sampled for 0.41 s in 2 of 6 trials, shorter than the 2.0 s NVML's "
        "readings need (see the sampler's docs): its utilization and power there mean little, and its energy is "
        "absent where it was too short"
    ]


def test_the_decision_names_the_most_frugal_configuration_beside_the_fastest(tmp_path):
    data = _data(_saved(tmp_path, gpu=True))
    answer = data.decided().answers[0]
    assert answer.leader == "ddp w2" and answer.frugal is not None and answer.frugal.name == "single w1"
    line = frugal_text(answer)
    assert line is not None and line.startswith(
        "The most frugal is single w1 at 0.01 J/sample, not the fastest, ddp w2"
    )
    assert line.endswith("the fastest uses more.")
    view = decisions(data.configs, data.runs, decision=data.decided())[0]
    assert view.sentences[1] == line
    assert any(c.startswith("single w1 (") and ", 0.01 J/sample, 6 trials)" in c for c in view.claims)


def test_a_cpu_run_says_once_why_energy_is_absent_never_zero(tmp_path):
    data = _data(_saved(tmp_path, gpu=False))
    rows, part = _table(data)
    assert "J/sample" not in next(iter(rows.values()))
    assert part.description.endswith(
        " GPU energy per sample is absent: no readable energy counter (a CPU run, or NVML reads none on this GPU)."
    )
    assert data.decided().answers[0].frugal is None
    assert not [w for w in run_warnings(data.frame) if "sampled for" in w]


def test_a_run_saved_before_energy_existed_loads_and_renders_without_it(tmp_path):
    doc = make_doc(cases=CASES, comm=False, timelines=False, trials=TRIALS, seed=3)
    path = tmp_path / "Linux-CPython-3.11-64bit" / "0001_old.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    data = _data(path)
    rows, part = _table(data)
    assert "J/sample" not in next(iter(rows.values())) and "energy" not in part.description
    answer = data.decided().answers[0]
    assert answer.frugal is None and all(s.joules_per_sample != s.joules_per_sample for s in answer.standings)
    assert not [w for w in run_warnings(data.frame) if "sampled for" in w]


def test_the_whole_page_renders_a_gpu_run_with_energy(tmp_path):
    from dpbench.report import write_report

    out = write_report([_saved(tmp_path, gpu=True)], tmp_path / "report.html")
    page = Path(out).read_text()
    assert "The most frugal is single w1" in page and "J/sample" in page and "102 W (idle 61 W)" in page
