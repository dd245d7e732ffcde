"""Loading saved runs: the real pytest-benchmark format, run lookup, and every bad input."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from validation import synthetic_runs
from validation.synthetic_runs import write_json
from dpbench.report import ResultsError, load_runs, resolve_runs
from dpbench.results.load import read_run, resolve_run
from dpbench.stats import log_t_interval
from dpbench.report.timeline import timeline_path
from dpbench.schema import READABLE_SCHEMAS, SCHEMA_VERSION


@pytest.mark.slow
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
    # schema 1: per-step time = round time / steps_per_round; one trial, no control
    assert k2["step_time_s"] == pytest.approx(k2["stats.median"] / 2) and k2["unit"] == "s/step"
    assert k2["step_samples"] == pytest.approx([v / 2 for v in k2["samples"]])
    assert k2["trial_times"] == [k2["step_time_s"]] and k2["trials_count"] == 1 and k2["trial_controls"] == []
    assert k2["samples_per_s"] == pytest.approx(8 / k2["step_time_s"])
    assert (k2["strategy"], k2["workload"], k2["world_size"]) == ("single", "tiny", 1)
    plain = by_name.loc["test_plain"]
    assert pd.isna(plain["strategy"]) and plain["label"] == "test_plain"
    assert plain["step_time_s"] == plain["stats.median"] and plain["unit"] == "s/round"
    assert frame["machine_id"].iloc[0] == real_run.parent.name
    assert frame["run"].iloc[0] == "0001_tiny"


def test_frame_flattens_extra_info_and_machine(results: Path):
    path = synthetic_runs.make_run(results)
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
    phases = frame[frame["suite"] == "dp_phases"].iloc[0]
    assert phases["sampler.timeline"].endswith("-t0.csv") and len(phases["trial_timelines"]) == 6
    # the same case in two suites gets the suite in its label
    labels = set(frame.loc[frame["strategy"] == "dp", "label"])
    assert labels == {"dp w2 [throughput]", "dp w2 [dp_phases]"}


def test_resolve_files_directories_and_ids(results: Path):
    a1 = synthetic_runs.make_run(results, number=1, name="first")
    a2 = synthetic_runs.make_run(results, number=2, name="second")
    b1 = synthetic_runs.make_run(results, number=1, name="other", machine_id="Linux-CPython-3.12-64bit")
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
    doc = synthetic_runs.make_doc(cases=[synthetic_runs.TRAINING_CASES[0]], comm=False)
    doc["benchmarks"][0]["extra_info"] = extra
    return doc


@pytest.mark.parametrize("extra,match", [
    ({"schema": max(READABLE_SCHEMAS) + 1, "kind": "training"}, r"schema 3 is newer than this dpbench reads \(schemas 1, 2\)"),
    ({"schema": 0, "kind": "training"}, "older than this dpbench reads"),
    ({"kind": "training", "strategy": "ddp"}, "schema 0 is older"),  # pre-release: fields without a version
    ({"schema": "1", "kind": "training"}, "expected an integer"),
    ({"schema": 2, "kind": "training", "trials": [0.1, 0.2]}, "extra_info.trials: expected an object"),
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
    doc = synthetic_runs.make_doc(comm=False)
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
    doc = synthetic_runs.make_doc(cases=[synthetic_runs.TRAINING_CASES[1]])
    doc["benchmarks"][0]["extra_info"]["requested_options"] = {"chunk_sizes": None, "mode": "x"}
    comm = doc["benchmarks"][1]
    comm["extra_info"]["iters_per_round"] = 5  # a collective repeated 5 times per timed round
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc)).set_index("name")
    assert frame.loc[doc["benchmarks"][0]["name"], "label"] == "dp(mode=x) w2"  # unset options say nothing
    row = frame.loc[comm["name"]]
    assert row["label"] == "all_reduce(4 KiB) w2"
    # the workers' time per call, never round time / iters
    assert row["step_time_s"] == comm["extra_info"]["time_s"] and row["unit"] == "s/call"


def test_extra_info_cannot_overwrite_the_report_columns(tmp_path: Path):
    doc = synthetic_runs.make_doc(cases=[synthetic_runs.TRAINING_CASES[0]], comm=False)
    bench = doc["benchmarks"][0]
    bench["extra_info"].update(fullname="spoofed", samples=[1.0], label="spoofed", trial_times=[9.0],
                               **{"stats.median": 0})
    row = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc)).iloc[0]
    assert row["fullname"] == bench["fullname"] and row["extra.fullname"] == "spoofed"
    assert row["samples"] == bench["stats"]["data"] and row["label"] == "single w1"
    assert row["stats.median"] == bench["stats"]["median"] and row["extra.stats.median"] == 0
    assert row["trial_times"] == bench["extra_info"]["trials"]["step_time_s"] and row["extra.trial_times"] == [9.0]
    # the writer's own step_time_s and samples_per_s stay readable beside the derived ones
    assert row["extra.step_time_s"] == row["step_time_s"] == bench["extra_info"]["step_time_s"]


def test_labels_use_requested_options_not_every_resolved_default(tmp_path: Path):
    resolved = {"bucket_cap_mb": 25.0, "static_graph": False, "comm_hook": None, "accumulation_steps": 1}
    extra_benchmarks = []
    for requested in ({}, {"bucket_cap_mb": 25.0}):
        doc = synthetic_runs.make_doc(cases=[("ddp_knobs", "mlp", "ddp", resolved, 2, 0.02)], comm=False)
        bench = doc["benchmarks"][0]
        bench["name"] = bench["fullname"] = f"test_ddp_knob[{len(extra_benchmarks)}]"
        bench["extra_info"]["requested_options"] = requested
        extra_benchmarks.append(bench)
    doc = synthetic_runs.make_doc(cases=[], comm=False, extra_benchmarks=extra_benchmarks)
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc))
    assert sorted(frame["strategy_label"]) == ["ddp", "ddp(bucket_cap_mb=25.0)"]
    assert frame["options.static_graph"].tolist() == [False, False]  # the resolved options stay in the frame


# ---------------------------------------------------------------- schema 1 and 2, the reading rules
def _rows(path: Path) -> tuple[pd.DataFrame, dict]:
    doc = json.loads(path.read_text())
    return load_runs(path).set_index("name"), {b["name"]: b for b in doc["benchmarks"]}


def test_schema_2_round_trip(results: Path):
    frame, raw = _rows(synthetic_runs.make_run(results, schema=2, trials=4, rounds=3, timelines=False))
    assert SCHEMA_VERSION == 2 and len(frame) == len(raw)
    for name, bench in raw.items():
        row, extra, trials = frame.loc[name], bench["extra_info"], bench["extra_info"]["trials"]
        assert row["schema"] == 2 and row["trials_count"] == trials["count"] == 4
        assert row["trial_times"] == trials["step_time_s"] and row["trial_controls"] == trials["control_s"]
        assert row["trial_cv"] == pytest.approx(trials["cv"])
        # stats.data are seconds per step (per call) already: never divided by steps_per_round
        assert row["step_samples"] == bench["stats"]["data"] and len(row["step_samples"]) == 4 * 3
        if extra["kind"] == "training":
            assert row["step_time_s"] == extra["step_time_s"] and row["unit"] == "s/step"
            assert [row["step_time_ci95_lo"], row["step_time_ci95_hi"]] == extra["step_time_ci95"]
            assert row["samples_per_s"] == pytest.approx(extra["global_batch"] / extra["step_time_s"])
            assert [row["samples_per_s_ci95_lo"], row["samples_per_s_ci95_hi"]] == pytest.approx(
                extra["samples_per_s_ci95"])
            assert row["case_key"] == extra["case_key"]
        else:
            assert row["step_time_s"] == extra["time_s"] and row["unit"] == "s/call"
            assert [row["step_time_ci95_lo"], row["step_time_ci95_hi"]] == extra["time_ci95"]
            assert pd.isna(row["samples_per_s"])  # a collective moves bytes, not samples
        assert pd.isna(row["incomparable"])
    scaled = frame.loc["test_scaling[ddp-mlp-w4]"]
    ci = raw["test_scaling[ddp-mlp-w4]"]["extra_info"]["scaling_efficiency_ci95"]
    assert [scaled["scaling_efficiency_ci95_lo"], scaled["scaling_efficiency_ci95_hi"]] == ci


def test_schema_1_round_trip(results: Path):
    frame, raw = _rows(synthetic_runs.make_run(results, schema=1, timelines=False))
    for name, bench in raw.items():
        row, extra = frame.loc[name], bench["extra_info"]
        assert row["schema"] == 1 and row["trials_count"] == 1 and row["trial_controls"] == []
        assert row["trial_times"] == [row["step_time_s"]] and pd.isna(row["step_time_ci95_lo"])
        if extra["kind"] == "training":
            steps = extra["steps_per_round"]
            assert row["step_time_s"] == pytest.approx(bench["stats"]["median"] / steps)
            assert row["step_samples"] == pytest.approx([v / steps for v in bench["stats"]["data"]])
            # one throughput definition: global batch / step time, not schema 1's own samples_per_s
            assert row["samples_per_s"] == pytest.approx(64 / row["step_time_s"])
            assert row["extra.samples_per_s"] == extra["samples_per_s"] != row["samples_per_s"]
        else:
            assert row["step_time_s"] == extra["time_s"]
            assert row["step_time_s"] != pytest.approx(bench["stats"]["median"] / extra["iters_per_round"], rel=0.1)
            assert row["step_samples"] is None  # schema-1 rounds were timed in the calling process


def test_schema_1_training_without_steps_per_round_has_no_per_step_time(tmp_path: Path):
    doc = synthetic_runs.make_doc(schema=1, cases=synthetic_runs.TRAINING_CASES[:1], comm=False)
    del doc["benchmarks"][0]["extra_info"]["steps_per_round"]
    row = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc)).iloc[0]
    assert pd.isna(row["step_time_s"]) and row["trial_times"] == [] and pd.isna(row["samples_per_s"])
    assert "without steps_per_round" in row["incomparable"]


def test_the_interval_is_computed_from_the_trials_where_the_writer_left_it_out(tmp_path: Path):
    doc = synthetic_runs.make_doc(cases=synthetic_runs.TRAINING_CASES[:1], comm=False, trials=5)
    extra = doc["benchmarks"][0]["extra_info"]
    written = extra.pop("step_time_ci95")
    row = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc)).iloc[0]
    assert (row["step_time_ci95_lo"], row["step_time_ci95_hi"]) == pytest.approx(written)
    assert (row["step_time_ci95_lo"], row["step_time_ci95_hi"]) == log_t_interval(extra["trials"]["step_time_s"])


def test_an_unknown_run_id_lists_the_saved_runs(results: Path):
    synthetic_runs.make_run(results, number=1, name="first", timelines=False)
    synthetic_runs.make_run(results, number=2, name="second", timelines=False)
    with pytest.raises(ResultsError) as info:
        resolve_runs(["0009"], results_dir=results)
    message = str(info.value)
    assert "'0009'" in message and "\n" not in message
    assert f"saved runs under {results}/: {synthetic_runs.MACHINE_ID}/0001_first, {synthetic_runs.MACHINE_ID}/0002_second" \
        in message


def test_clock_warnings_are_read_per_trial_or_from_the_kept_summary(tmp_path: Path):
    doc = synthetic_runs.make_doc(cases=synthetic_runs.TRAINING_CASES[:2], comm=False, trials=3,
                                clock_warnings={synthetic_runs.bench_id(synthetic_runs.TRAINING_CASES[0]): ["throttled"]})
    second = doc["benchmarks"][1]["extra_info"]
    second["trials"].pop("sampler")
    second["sampler"]["clock_warnings"] = ["clocks not locked", 42]
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc))
    assert frame["clock_warnings"].tolist() == [["trial 3: throttled"], ["trial 1: clocks not locked"]]
