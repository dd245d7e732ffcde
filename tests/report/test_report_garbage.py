"""Valid JSON with nonsense in dpbench's fields: a clear ResultsError or a report, never a crash."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

import report_synth
from report_synth import write_json
from dpbench.report import ResultsError, load_runs
from dpbench.report.plots import build_sections

GARBAGE = ["x", [1, 2], {"a": 1}, None, True, -1, 1e308, math.nan]
NAME_KEYS = ["kind", "strategy", "workload", "collective", "suite"]
VALUE_KEYS = ["world_size", "global_batch", "steps_per_round", "samples_per_s", "phases", "peak_memory_bytes",
              "scaling_efficiency", "baseline_samples_per_s", "size_bytes", "busbw_gbps", "algbw_gbps", "time_s",
              "options", "sampler", "per_replica_batch"]


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    doc = report_synth.make_doc(cases=report_synth.TRAINING_CASES[1:2] + report_synth.TRAINING_CASES[7:8],
                                rounds=5, timelines=False)
    doc["benchmarks"] = doc["benchmarks"][:3]  # two training cases and one collective
    return doc


@pytest.mark.parametrize("value", ["x", [1, 2], {"a": 1}, None, -1, 1e308], ids=repr)
def test_nonsense_values_still_render(doc, value, tmp_path: Path):
    bad = copy.deepcopy(doc)
    for bench in bad["benchmarks"]:
        bench["extra_info"].update({k: value for k in VALUE_KEYS})
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", bad))
    sections = build_sections(frame)
    assert all(s.image_png_b64 or s.note for s in sections)


@pytest.mark.parametrize("value", [v for v in GARBAGE if v is not None and not isinstance(v, str)], ids=repr)
def test_nonsense_names_are_refused_clearly(doc, value, tmp_path: Path):
    bad = copy.deepcopy(doc)
    bad["benchmarks"][1]["extra_info"]["workload"] = value
    with pytest.raises(ResultsError, match=r"benchmark #1: extra_info.workload: expected a string"):
        load_runs(write_json(tmp_path / "m" / "0001_x.json", bad))
