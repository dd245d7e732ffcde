"""The seven plot sections: a decodable PNG or a note, and tables that match the frame."""
from __future__ import annotations

import base64
import math
from pathlib import Path

import pandas as pd
import pytest

import report_synth
from report_synth import write_json
from dpbench.report import load_runs
from dpbench.report import plots
from dpbench.report.plots import PLOTS, build_sections

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KEYS = ["throughput", "scaling", "step-times", "phases", "memory", "timelines", "busbw"]


@pytest.fixture(scope="module")
def full_frame(tmp_path_factory) -> pd.DataFrame:
    return load_runs(report_synth.make_run(tmp_path_factory.mktemp("plots") / "results"))


@pytest.fixture(scope="module")
def sections(full_frame):
    return {s.key: s for s in build_sections(full_frame)}


def _decode(section) -> bytes:
    png = base64.b64decode(section.image_png_b64, validate=True)
    assert png.startswith(PNG_MAGIC)
    return png


def test_every_plot_renders_when_its_data_is_there(sections):
    assert list(sections) == KEYS and len(PLOTS) == 7
    for key, section in sections.items():
        assert section.image_png_b64, f"{key}: no image ({section.note})"
        assert len(_decode(section)) > 5000, key
        assert section.tables and section.tables[0].rows, key


def test_throughput_table_matches_the_frame(sections, full_frame):
    table = sections["throughput"].tables[0]
    rows = {(r[1], r[2]): r for r in table.rows}
    ddp = full_frame[(full_frame["label"] == "ddp w2") & (full_frame["workload"] == "convnet")].iloc[0]
    single = full_frame[(full_frame["label"] == "single w1") & (full_frame["workload"] == "convnet")].iloc[0]
    expected = ddp["global_batch"] / ddp["step_time_median"]
    assert rows[("convnet", "ddp w2")][3] == f"{expected:,.0f}"
    speedup = expected / (single["global_batch"] / single["step_time_median"])
    assert rows[("convnet", "ddp w2")][4] == f"{speedup:.3g}×"


def test_memory_table_shows_dataparallel_device_0_imbalance(sections):
    rows = {r[0]: r for r in sections["memory"].tables[0].rows}
    assert rows["mlp: dp w2 [throughput]"][2] == "1.6×"  # the synthetic dp case puts 1.6× on cuda:0
    assert rows["mlp: ddp w2"][2] == "1×"


def test_scaling_and_busbw_tables(sections, full_frame):
    eff = full_frame["scaling_efficiency"].dropna()
    assert sorted(r[6] for r in sections["scaling"].tables[0].rows) == sorted(f"{v:.1%}" for v in eff)
    busbw = sections["busbw"].tables[0].rows
    assert [r[2] for r in busbw] == ["4 KiB", "64 KiB", "1 MiB", "16 MiB"]


def test_phase_table_lists_phases_in_schema_order(sections):
    assert sections["phases"].tables[0].columns == ["case", "scatter", "replicate", "apply", "gather",
                                                    "forward", "backward", "communication", "optimizer"]


def test_plain_pytest_benchmark_run_gets_notes_not_crashes(real_run: Path, tmp_path: Path):
    frame = load_runs(real_run)
    by_key = {s.key: s for s in build_sections(frame)}
    assert by_key["step-times"].image_png_b64  # raw samples are there
    for key in ("scaling", "phases", "memory", "timelines", "busbw"):
        assert by_key[key].image_png_b64 is None and by_key[key].note, key
    assert "scaling_efficiency" in by_key["scaling"].note


def test_without_raw_samples_throughput_still_plots(tmp_path: Path):
    frame = load_runs(report_synth.make_run(tmp_path, save_data=False, comm=False))
    assert plots.throughput(frame).image_png_b64
    step_times = plots.step_times(frame)
    assert step_times.image_png_b64 is None and "--benchmark-save-data" in step_times.note


def test_mathtext_in_names_is_plain_text(tmp_path: Path):
    doc = report_synth.make_doc(cases=report_synth.TRAINING_CASES[:1], comm=False)
    doc["benchmarks"][0]["extra_info"]["workload"] = r"$\frac{unclosed"
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc))
    assert all(s.image_png_b64 or s.note for s in build_sections(frame))


def test_timeline_written_by_the_sampler_is_plotted(tmp_path: Path):
    """Use the sampler's own writer, so the report reads the format the suites save."""
    from dpbench.sampler.timeline import METRIC_COLUMNS, build_frame, build_marks, write_timeline

    values = {name: math.nan for name in METRIC_COLUMNS}
    rows = []
    for i in range(10):
        rows.append((i * 0.05, "cpu", [40.0 if n == "cpu_pct" else (8e9 if n == "mem_used_bytes" else math.nan)
                                       for n in METRIC_COLUMNS]))
        rows.append((i * 0.05, "pid:123", [150.0 if n == "cpu_pct" else (5e8 if n == "rss_bytes" else math.nan)
                                           for n in METRIC_COLUMNS]))
    assert values  # METRIC_COLUMNS is the shared format
    run_dir = tmp_path / "m"
    write_timeline(run_dir / "timelines" / "t.csv", build_frame(rows), build_marks([(0.1, "measure")]))
    doc = report_synth.make_doc(cases=[report_synth.TRAINING_CASES[1]], comm=False)
    doc["benchmarks"][0]["extra_info"]["sampler"]["timeline"] = "timelines/t.csv"
    frame = load_runs(write_json(run_dir / "0001_x.json", doc))
    section = plots.timelines(frame)
    assert section.image_png_b64, section.note
    table = {r[1]: r for r in section.tables[0].rows}
    assert set(table) == {"cpu", "pid:123"}
    assert table["pid:123"][2] == "150" and table["cpu"][4] == "7.45 GiB"


def test_unreadable_timelines_become_notes(tmp_path: Path):
    doc = report_synth.make_doc(cases=report_synth.TRAINING_CASES[1:3], comm=False)
    doc["benchmarks"][0]["extra_info"]["sampler"]["timeline"] = "../../../etc/passwd"
    doc["benchmarks"][1]["extra_info"]["sampler"]["timeline"] = "missing.csv"
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc))
    section = plots.timelines(frame)
    assert section.image_png_b64 is None
    assert "inside the run's directory" in section.note and "could not be read" in section.note
