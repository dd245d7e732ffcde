"""Valid JSON with nonsense in dpbench's fields: a clear ResultsError or a report, never a crash."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from dpbench.report import ResultsError, load_runs, plots
from dpbench.report.data import report_data
from dpbench.report.decision import decisions
from dpbench.report.sections import build_sections
from validation import synthetic_runs
from validation.synthetic_runs import write_json

GARBAGE = ["x", [1, 2], {"a": 1}, None, True, -1, 1e308, math.nan]
NAME_KEYS = ["kind", "strategy", "workload", "collective", "suite"]
VALUE_KEYS = [
    "world_size",
    "global_batch",
    "steps_per_round",
    "samples_per_s",
    "phases",
    "peak_memory_bytes",
    "scaling_efficiency",
    "baseline_samples_per_s",
    "size_bytes",
    "busbw_gbps",
    "algbw_gbps",
    "time_s",
    "options",
    "sampler",
    "per_replica_batch",
    "step_time_s",
    "step_time_ci95",
    "time_ci95",
    "scaling_efficiency_ci95",
    "samples_per_s_ci95",
    "energy",
    "sampled_window",
]
ENERGY_KEYS = ["j_per_sample", "j_per_sample_cv", "avg_w", "idle_w", "absent", "trials"]
WINDOW_KEYS = ["needed_s", "window_s", "short"]
TRIAL_KEYS = ["count", "step_time_s", "control_s", "cv", "sampler", "timelines", "order"]


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    doc = synthetic_runs.make_doc(cases=synthetic_runs.TRAINING_CASES[1:2], rounds=3, trials=3, timelines=False)
    doc["benchmarks"] = doc["benchmarks"][:2]  # one training case and one collective
    return doc


@pytest.mark.parametrize("value", ["x", [1, 2], {"a": 1}, None, -1, 1e308], ids=repr)
def test_nonsense_values_still_render(doc, value, tmp_path: Path):
    bad = copy.deepcopy(doc)
    for bench in bad["benchmarks"]:
        bench["extra_info"].update({k: value for k in VALUE_KEYS})
        bench["extra_info"]["trials"].update({k: value for k in TRIAL_KEYS})
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", bad))
    sections = build_sections(report_data(frame))
    # every benchmark is still listed, with what could be read
    assert sorted(r[4] for s in sections for p in s.parts if p.key == "headline" for r in p.tables[0].rows) == sorted(
        b["name"] for b in bad["benchmarks"]
    )


@pytest.mark.parametrize("value", [v for v in GARBAGE if v is not None and not isinstance(v, str)], ids=repr)
def test_nonsense_names_are_refused_clearly(doc, value, tmp_path: Path):
    bad = copy.deepcopy(doc)
    bad["benchmarks"][1]["extra_info"]["workload"] = value
    with pytest.raises(ResultsError, match=r"benchmark #1: extra_info.workload: expected a string"):
        load_runs(write_json(tmp_path / "m" / "0001_x.json", bad))


@pytest.mark.parametrize("value", ["x", [1, 2], [True, "x"], {"a": 1}, None, -1, 1e308], ids=repr)
def test_nonsense_inside_energy_and_the_sampled_window_still_renders(doc, value, tmp_path: Path):
    bad = copy.deepcopy(doc)
    for bench in bad["benchmarks"]:
        bench["extra_info"]["energy"] = dict.fromkeys(ENERGY_KEYS, value)
        bench["extra_info"]["sampled_window"] = {**dict.fromkeys(WINDOW_KEYS, value), "short": [True, value]}
    data = report_data(load_runs(write_json(tmp_path / "m" / "0001_x.json", bad)))  # the run's warnings
    # What reads them: the numbers table, the decision (its frugal line) and its view.
    assert len(plots.headline(data.configs, data.runs).tables[0].rows) == 2
    decisions(data.configs, data.runs, decision=data.decided())
