"""Loading saved runs: the real pytest-benchmark format, run lookup, and every bad input."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

import report_synth
from report_synth import write_json
from dpbench.report import ResultsError, load_runs, resolve_runs
from dpbench.report.load import read_run, resolve_run
from dpbench.report.timeline import timeline_path
from dpbench.schema import SCHEMA_VERSION


def test_real_pytest_benchmark_file_loads(real_run: Path):
    raw = json.loads(real_run.read_text())
    frame = load_runs(real_run)
    assert len(frame) == len(raw["benchmarks"]) == 3
    by_name = frame.set_index("name")
    for bench in raw["benchmarks"]:
        row = by_name.loc[bench["name"]]
        assert row["stats.median"] == bench["stats"]["median"]
        assert row["stats.rounds"] == bench["stats"]["rounds"]
        assert row["samples"] == bench["stats"]["data"]  # raw rounds kept by --benchmark-save-data
        assert row["fullname"] == bench["fullname"]
    k2 = by_name.loc["test_step[2]"]
    # per-step time = round time / steps_per_round
    assert k2["step_time_median"] == pytest.approx(k2["stats.median"] / 2)
    assert k2["step_samples"] == pytest.approx([v / 2 for v in k2["samples"]])
    assert (k2["strategy"], k2["workload"], k2["world_size"]) == ("single", "tiny", 1)
    plain = by_name.loc["test_plain"]
    assert pd.isna(plain["strategy"]) and plain["label"] == "test_plain"
    assert plain["step_time_median"] == plain["stats.median"]
    assert frame["machine_id"].iloc[0] == real_run.parent.name
    assert frame["run"].iloc[0] == "0001_tiny"


def test_frame_flattens_extra_info_and_machine(results: Path):
    path = report_synth.make_run(results)
    frame = load_runs(path)
    doc = json.loads(path.read_text())
    assert len(frame) == len(doc["benchmarks"])
    row = frame[frame["name"] == "test_throughput[allreduce-modeoverlap-mlp-w2]"].iloc[0]
    extra = doc["benchmarks"][3]["extra_info"]
    assert row["options.mode"] == "overlap" and row["options"] == {"mode": "overlap"}
    assert row["phases.forward"] == extra["phases"]["forward"]
    assert row["peak_memory_bytes.cuda:1"] == extra["peak_memory_bytes"]["cuda:1"]
    assert row["label"] == "allreduce(mode=overlap) w2"
    assert row["machine.torch"] == "2.13.0" and row["machine.gpu"] == "NVIDIA H100 80GB HBM3"
    assert row["commit.branch"] == "main"
    assert row["sampler.timeline"].endswith(".csv")
    # the same case in two suites gets the suite in its label
    labels = set(frame.loc[frame["strategy"] == "dp", "label"])
    assert labels == {"dp w2 [throughput]", "dp w2 [dp_phases]"}


def test_resolve_files_directories_and_ids(results: Path):
    a1 = report_synth.make_run(results, number=1, name="first")
    a2 = report_synth.make_run(results, number=2, name="second")
    b1 = report_synth.make_run(results, number=1, name="other", machine_id="Linux-CPython-3.12-64bit")
    assert resolve_runs([a1], results_dir=results) == [a1]
    assert sorted(resolve_runs([results])) == sorted([a2, b1])  # newest per machine
    assert sorted(resolve_runs([], results_dir=results)) == sorted([a2, b1])
    assert resolve_runs(["0002"], results_dir=results) == [a2]
    assert resolve_runs(["0001_first"], results_dir=results) == [a1]
    assert resolve_runs(["0001_first.json"], results_dir=results) == [a1]
    assert resolve_run(results / a1.parent.name) == a2
    with pytest.raises(ResultsError, match="ambiguous"):
        resolve_run("0001", results_dir=results)
    # mtime cannot reorder runs: pytest-benchmark's number decides which is newest
    os.utime(a1, (2e9, 2e9))
    assert resolve_run(results / a1.parent.name) == a2


@pytest.mark.parametrize("setup,match", [
    (lambda d: d / "missing.json", "expected a results file, a directory or a saved-run id"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "no saved runs"),
    (lambda d: (d / "bad.json").write_text('{"machine_info": {') and d / "bad.json", "corrupt JSON"),
    (lambda d: write_json(d / "pkg.json", {"name": "left-pad", "version": "1.0"}), "not a pytest-benchmark results file"),
    (lambda d: write_json(d / "list.json", [1, 2]), "not a pytest-benchmark results file"),
    (lambda d: (d / "bin.json").write_bytes(b"\xff\xfe\x00garbage") and d / "bin.json", "not UTF-8"),
    (lambda d: write_json(d / "none.json", {"machine_info": {}, "benchmarks": [], "datetime": "x"}), "no benchmarks"),
    (lambda d: write_json(d / "str.json", {"machine_info": {}, "benchmarks": "x", "datetime": "x"}), "'benchmarks': expected a list"),
])
def test_bad_inputs_give_one_line_errors(tmp_path: Path, setup, match):
    target = setup(tmp_path)
    with pytest.raises(ResultsError, match=match) as info:
        load_runs(target, results_dir=tmp_path)
    assert "\n" not in str(info.value)


def _doc_with_extra(extra: dict) -> dict:
    doc = report_synth.make_doc(cases=[report_synth.TRAINING_CASES[0]], comm=False)
    doc["benchmarks"][0]["extra_info"] = extra
    return doc


@pytest.mark.parametrize("extra,match", [
    ({"schema": SCHEMA_VERSION + 1, "kind": "training"}, "newer than this dpbench reads"),
    ({"schema": 0, "kind": "training"}, "older than this dpbench reads"),
    ({"kind": "training", "strategy": "ddp"}, "schema 0 is older"),  # pre-release: fields without a version
    ({"schema": "1", "kind": "training"}, "expected an integer"),
])
def test_schema_versions(tmp_path: Path, extra, match):
    path = write_json(tmp_path / "r.json", _doc_with_extra(extra))
    with pytest.raises(ResultsError, match=match):
        read_run(path)


def test_foreign_extra_info_is_fine(tmp_path: Path):
    path = write_json(tmp_path / "r.json", _doc_with_extra({"note": "someone else's benchmark"}))
    assert load_runs(path)["note"].iloc[0] == "someone else's benchmark"


@pytest.mark.parametrize("mutate,match", [
    (lambda b: b.pop("name"), "'name': expected a string"),
    (lambda b: b["stats"].update(median="fast"), "stats.median: expected a number"),
    (lambda b: b["stats"].update(data=["1", "2"]), "stats.data: expected a list of numbers"),
    (lambda b: b.update(extra_info=[1]), "'extra_info': expected an object"),
])
def test_malformed_benchmarks_are_named(tmp_path: Path, mutate, match):
    doc = report_synth.make_doc(comm=False)
    mutate(doc["benchmarks"][2])
    path = write_json(tmp_path / "r.json", doc)
    with pytest.raises(ResultsError, match=f"benchmark #2: {match}"):
        read_run(path)


def test_loading_never_evaluates_content(tmp_path: Path):
    # Strings that would do something if eval'd or unpickled stay inert strings.
    payload = "__import__('os').system('touch PWNED')"
    doc = _doc_with_extra({"schema": 1, "kind": "training", "strategy": payload, "workload": "!!python/object"})
    frame = load_runs(write_json(tmp_path / "r.json", doc))
    assert frame["strategy"].iloc[0] == payload
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()


def test_timeline_paths_are_confined_to_the_run_directory(tmp_path: Path):
    run = tmp_path / "m" / "0001_x.json"
    run.parent.mkdir()
    assert timeline_path(str(run), "timelines/a.csv") == (run.parent / "timelines/a.csv").resolve()
    assert timeline_path(str(run), "../../etc/passwd") is None
    assert timeline_path(str(run), "/etc/passwd") is None
    assert timeline_path(str(run), 42) is None


def test_labels_and_per_iteration_times_of_collectives(tmp_path: Path):
    doc = report_synth.make_doc(cases=[report_synth.TRAINING_CASES[1]])
    doc["benchmarks"][0]["extra_info"]["options"] = {"chunk_sizes": None, "mode": "x"}
    comm = doc["benchmarks"][1]
    comm["extra_info"]["iters_per_round"] = 5  # a collective repeated 5 times per timed round
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc)).set_index("name")
    assert frame.loc[doc["benchmarks"][0]["name"], "label"] == "dp(mode=x) w2"  # unset options say nothing
    row = frame.loc[comm["name"]]
    assert row["label"] == "all_reduce(4 KiB) w2"
    assert row["step_time_median"] == pytest.approx(comm["stats"]["median"] / 5)


def test_extra_info_cannot_overwrite_the_report_columns(tmp_path: Path):
    doc = report_synth.make_doc(cases=[report_synth.TRAINING_CASES[0]], comm=False)
    bench = doc["benchmarks"][0]
    bench["extra_info"].update(fullname="spoofed", samples=[1.0], label="spoofed", **{"stats.median": 0})
    row = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc)).iloc[0]
    assert row["fullname"] == bench["fullname"] and row["extra.fullname"] == "spoofed"
    assert row["samples"] == bench["stats"]["data"] and row["label"] == "single w1"
    assert row["stats.median"] == bench["stats"]["median"] and row["extra.stats.median"] == 0


def test_labels_use_requested_options_not_every_resolved_default(tmp_path: Path):
    resolved = {"bucket_cap_mb": 25.0, "static_graph": False, "comm_hook": None, "accumulation_steps": 1}
    extra_benchmarks = []
    for requested in ({}, {"bucket_cap_mb": 25.0}):
        doc = report_synth.make_doc(cases=[("ddp_knobs", "mlp", "ddp", resolved, 2, 0.02)], comm=False)
        bench = doc["benchmarks"][0]
        bench["name"] = bench["fullname"] = f"test_ddp_knob[{len(extra_benchmarks)}]"
        bench["extra_info"]["requested_options"] = requested
        extra_benchmarks.append(bench)
    doc = report_synth.make_doc(cases=[], comm=False, extra_benchmarks=extra_benchmarks)
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc))
    assert sorted(frame["strategy_label"]) == ["ddp", "ddp(bucket_cap_mb=25.0)"]
    assert frame["options.static_graph"].tolist() == [False, False]  # the resolved options stay in the frame
