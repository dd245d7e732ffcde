"""The report's "Traces" section: sentence, bars, skew table, file links, skip and disagreement notes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpbench.report.html import render_report
from dpbench.report.traces import build_traces
from dpbench.results.frame import runs_frame
from dpbench.results.load import read_run
from dpbench.traces.analysis import analyse_case, compare_two_pass
from tests.traces._kineto import cpu_rank, write
from validation.synthetic_runs import make_run


def _traced_run(results: Path) -> Path:
    cases = [("throughput", "mlp", "ddp", {}, 2, 0.012), ("throughput", "mlp", "dp", {}, 2, 0.016)]
    path = make_run(results, cases=cases, comm=False, timelines=False, trials=2, rounds=2)
    case_dir = path.parent / "traces" / "r1" / "ddp"
    case_dir.mkdir(parents=True)
    files = [write(case_dir / "rank0.json.gz", cpu_rank(70)), write(case_dir / "rank1.json.gz", cpu_rank(90, rank=1))]
    names = ["traces/r1/ddp/rank0.json.gz", "traces/r1/ddp/rank1.json.gz", "../../outside.json.gz"]
    breakdown = analyse_case(files, names=names[:2])
    breakdown["files"] = names  # a crafted path outside the run's directory must not become a link
    breakdown["two_pass"] = compare_two_pass(breakdown, exposed_comm_s=60e-6, overlap_fraction=0.0)
    breakdown["overhead"] = {"traced_step_s": 0.011, "untraced_step_s": 0.010, "ratio": 1.1}
    doc = json.loads(path.read_text())
    for bench in doc["benchmarks"]:
        strategy = bench["extra_info"].get("strategy")
        if strategy == "ddp":
            bench["extra_info"]["trace_breakdown"] = breakdown
        elif strategy == "dp":
            bench["extra_info"]["trace_breakdown"] = {"skipped": "dp cannot be traced per rank: threads"}
    path.write_text(json.dumps(doc))
    return path


def test_each_traced_case_gets_its_sentence_bars_skew_and_confined_links(results: Path):
    ddp, dp = build_traces(runs_frame([read_run(_traced_run(results))]))
    assert ddp.case == "ddp w2" and ddp.sentence.startswith("ddp w2: 69% of the step is compute")
    assert ddp.image is not None and [row[0] for row in ddp.table.rows] == ["0", "1"]
    assert ddp.skew.rows[0][4] == "rank 1"
    assert [label for label, _ in ddp.links] == ["traces/r1/ddp/rank0.json.gz", "traces/r1/ddp/rank1.json.gz"]
    assert all(uri.startswith("file://") for _, uri in ddp.links)
    assert any("disagree by" in n for n in ddp.notes) and any("1.1×" in n for n in ddp.notes)
    assert dp.sentence == "dp w2: not traced — dp cannot be traced per rank: threads." and dp.image is None


@pytest.mark.slow
def test_the_traces_section_says_what_dominates_and_links_the_files(results: Path):
    html = render_report([read_run(_traced_run(results))])
    start = html.index('<section id="traces"')
    section = html[start : html.index("</section>", start)]
    assert 'href="#traces"' in html
    # Rank 0: compute 68, rank 1 (all-reduce issued at 90): 70 of 100 µs; rank 1 is 20 µs late.
    assert (
        "ddp w2: 69% of the step is compute (6% exposed communication, 25% idle); rank 1 arrives 0.02 ms "
        "late (median) at 1 of 1 collectives."
    ) in section
    assert "dp w2: not traced — dp cannot be traced per rank: threads." in section
    assert section.count("data:image/svg+xml;base64,") == 1  # one stacked bar: the traced case
    assert section.count('<a href="file://') == 2 and "outside.json.gz" not in section.split("Files:")[1]
    assert "disagree by" in section and "more than the 15.0% tolerance" in section
    assert "Tracing overhead: traced steps took 1.1×" in section
    assert "ui.perfetto.dev" in section and "chrome://tracing" in section
    assert "Skew per collective (1 rows)" in section


def test_no_traced_case_no_section(report_html: Path):
    html = report_html.read_text()
    assert '<section id="traces"' not in html and 'href="#traces"' not in html
