"""The figure sections and their parts: a decodable SVG or PNG where there is data, tables that match the frame."""

from __future__ import annotations

import base64
import html
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from dpbench.decision.configs import configurations
from dpbench.report import load_runs, plots, plots_resources
from dpbench.report.data import report_data
from dpbench.report.sections import PARTS, build_sections
from dpbench.results.units import fmt_bytes
from validation import synthetic_runs
from validation.synthetic_runs import write_json

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def full_frame(tmp_path_factory) -> pd.DataFrame:
    return load_runs(synthetic_runs.make_run(tmp_path_factory.mktemp("plots") / "results", trials=4, rounds=3))


def configs_of(frame: pd.DataFrame) -> pd.DataFrame:
    configs = configurations(frame)
    return configs.assign(case=configs["config"])


@pytest.fixture(scope="module")
def sections(full_frame):
    return {p.key: p for s in build_sections(report_data(full_frame)) for p in s.parts}


def _decode(part) -> bytes:
    assert len(part.images) == 1, part.key
    image = part.images[0]
    data = base64.b64decode(image.data, validate=True)
    assert data.startswith(PNG_MAGIC) if image.mime == "image/png" else data.lstrip().startswith(b"<?xml")
    return data


def _svg_texts(part) -> set[str]:
    """The text elements of a part's SVG figure (text is kept as text: svg.fonttype none)."""
    svg = _decode(part).decode()
    return {html.unescape(t).strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)}


# The column of each figure's table that names what the figure draws, one label per row.
LABEL_COLUMN = {
    "throughput": "configuration",
    "step-times": "configuration",
    "phases": "configuration",
    "memory": "configuration",
    "scaling": "strategy",
    "busbw": "size",
}


def test_each_view_is_one_figure_with_its_numbers(sections):
    assert list(sections) == [
        "throughput",
        "scaling",
        "step-times",
        "phases",
        "memory",
        "timelines",
        "busbw",
        "headline",
    ]
    for key, part in sections.items():
        assert part.tables and part.tables[0].rows, key
        if key not in LABEL_COLUMN:
            continue
        # The figure draws every row of its table: each row's label is a text of the SVG.
        table = part.tables[0]
        column = table.columns.index(LABEL_COLUMN[key])
        labels = {row[column] for row in table.rows}
        texts = _svg_texts(part)
        assert labels <= texts, (key, sorted(labels - texts))
    scaling = _svg_texts(sections["scaling"])
    assert "ideal (100%)" in scaling and "scaling efficiency %" in scaling
    assert len(PARTS) == 8


def test_headline_table_matches_the_frame(sections, full_frame):
    table = sections["headline"].tables[0]
    rows = {name: r for r in table.rows for name in r[4].split()}
    for _, r in full_frame[full_frame["suite"] == "throughput"].iterrows():
        cells = rows[r["name"]]
        assert cells[5] == str(r["trials_count"]) == "4"
        assert cells[6] == f"{r['step_time_s'] * 1e3:.3g} ms/step"
        # one throughput definition: global batch / step time (median over trials)
        assert cells[8] == f"{64 / r['step_time_s']:,.0f}"
        lo, hi = 64 / r["step_time_ci95_hi"], 64 / r["step_time_ci95_lo"]
        assert cells[9] == f"{lo:,.0f} – {hi:,.0f}"
        assert cells[10] == f"{r['trial_cv'] * 100:.1f}%" and cells[11] == f"{r['control_median_s'] * 1e3:.3g} ms"


def test_a_case_several_suites_published_is_one_row_with_its_suites(sections, full_frame):
    """dp w2 is in the throughput and the dp_phases suite with one case_key: one row, both listed."""
    keys = full_frame.groupby("case_key")["suite"].agg(list)
    assert keys[keys.map(len) > 1].map(set).tolist() == [{"throughput", "dp_phases"}]
    table = sections["headline"].tables[0].rows
    dp = [r for r in table if r[1] == "mlp" and r[2] == "dp w2"]
    assert len(dp) == 1 and dp[0][3] == "throughput, dp_phases"
    assert dp[0][4] == "test_throughput[dp-mlp-w2] test_dp_phases[dp-mlp-w2]"
    assert len(table) == len(full_frame) - 1


def test_memory_table_shows_dataparallel_device_0_imbalance(sections):
    rows = {r[2]: r for r in sections["memory"].tables[0].rows}
    assert rows["dp w2"][5] == "1.6×"  # the synthetic dp case puts 1.6× on cuda:0
    assert rows["ddp w2"][5] == "1×"


def test_scaling_table_has_the_efficiency_interval(sections, full_frame):
    rows = full_frame[full_frame["scaling_efficiency"].notna()]
    table = sections["scaling"].tables[0].rows
    assert sorted(r[7] for r in table) == sorted(f"{v:.1%}" for v in rows["scaling_efficiency"])
    expected = {
        f"{lo:.1%} – {hi:.1%}" for lo, hi in zip(rows["scaling_efficiency_ci95_lo"], rows["scaling_efficiency_ci95_hi"])
    }
    assert {r[8] for r in table} == expected


def test_busbw_table_in_size_order(sections):
    assert [r[3] for r in sections["busbw"].tables[0].rows] == ["4 KiB", "64 KiB", "1 MiB", "16 MiB"]


def test_phase_tables_list_phases_in_schema_order(sections, tmp_path: Path):
    # dp w2 of the dp_phases suite is the throughput suite's case (one case_key): its row is the
    # throughput suite's, so only the dp_phases-only phases of a separate case would show them.
    assert sections["phases"].tables[0].columns[4:] == ["forward", "backward", "communication", "optimizer"]
    doc = synthetic_runs.make_doc(cases=[synthetic_runs.TRAINING_CASES[-1]], comm=False)
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc))
    part = plots_resources.phases(configs_of(frame), ["0001_x"])
    assert part.tables[0].columns[4:] == ["scatter", "replicate", "apply", "gather", "backward"]


def test_plain_pytest_benchmark_run_gets_the_parts_it_has(real_run: Path):
    keys = {p.key for s in build_sections(report_data(load_runs(real_run))) for p in s.parts}
    assert keys == {"headline", "throughput", "step-times"}


def test_without_raw_samples_the_trials_still_plot(tmp_path: Path):
    frame = load_runs(synthetic_runs.make_run(tmp_path, save_data=False, comm=False, timelines=False))
    rows = configs_of(frame)
    part = plots.step_times(rows, ["0001_synth"])
    assert part.images and all(r[4] == "0" and r[5] == "6" for r in part.tables[0].rows)  # 0 rounds, 6 trials
    assert plots.throughput(rows, ["0001_synth"]).images


def test_mathtext_in_names_is_plain_text(tmp_path: Path):
    doc = synthetic_runs.make_doc(cases=synthetic_runs.TRAINING_CASES[:1], comm=False)
    doc["benchmarks"][0]["extra_info"]["workload"] = r"$\frac{unclosed"
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc))
    assert all(p.images or p.key == "headline" for s in build_sections(report_data(frame)) for p in s.parts)


def test_timeline_written_by_the_sampler_is_plotted(tmp_path: Path):
    """Use the sampler's own writer, so the report reads the format the suites save."""
    from dpbench.sampler.timeline import METRIC_COLUMNS, build_frame, build_marks, write_timeline

    rows = []
    for i in range(10):
        rows.append(
            (
                i * 0.05,
                "cpu",
                [40.0 if n == "cpu_pct" else (8e9 if n == "mem_used_bytes" else math.nan) for n in METRIC_COLUMNS],
            )
        )
        rows.append(
            (
                i * 0.05,
                "pid:123",
                [150.0 if n == "cpu_pct" else (5e8 if n == "rss_bytes" else math.nan) for n in METRIC_COLUMNS],
            )
        )
    run_dir = tmp_path / "m"
    write_timeline(run_dir / "timelines" / "t.csv", build_frame(rows), build_marks([(0.1, "measure")]))
    doc = synthetic_runs.make_doc(cases=[synthetic_runs.TRAINING_CASES[1]], comm=False)
    doc["benchmarks"][0]["extra_info"]["trials"]["timelines"] = ["timelines/t.csv"] + [None] * 5
    frame = load_runs(write_json(run_dir / "0001_x.json", doc))
    part = plots_resources.timelines(configs_of(frame), ["0001_x"])
    assert part.images, part.note
    [row] = part.tables[0].rows
    # No GPU: utilization is the system CPU row's, memory the worker processes' RSS.
    assert row[:4] == ["0001_x", "mlp: dp w2", doc["benchmarks"][0]["name"], "t.csv"]
    assert row[4] == "40" and row[6] == fmt_bytes(5e8)


def test_unreadable_timelines_become_notes(tmp_path: Path):
    doc = synthetic_runs.make_doc(cases=synthetic_runs.TRAINING_CASES[1:3], comm=False)
    doc["benchmarks"][0]["extra_info"]["sampler"]["timeline"] = "../../../etc/passwd"
    doc["benchmarks"][1]["extra_info"]["sampler"]["timeline"] = "missing.csv"
    frame = load_runs(write_json(tmp_path / "m" / "0001_x.json", doc))
    part = plots_resources.timelines(configs_of(frame), ["0001_x"])
    assert not part.images
    assert "inside the run's directory" in part.note and "could not be read" in part.note
