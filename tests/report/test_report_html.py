"""The HTML report: self-contained, escaped, with comparison and provenance; atomic writes."""
from __future__ import annotations

import base64
import html
import os
import re
from pathlib import Path

import pytest

import report_synth
from report_synth import XSS
from dpbench.report import ResultsError, write_report
from dpbench._atomic import atomic_write_text


@pytest.fixture(scope="module")
def page(report_html: Path) -> str:
    return report_html.read_text(encoding="utf-8")


def test_self_contained(page: str):
    assert "<script" not in page.lower()
    assert "<link" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page, re.I)
    assert "@import" not in page and "url(" not in page
    images = re.findall(r'<img src="([^"]+)"', page)
    assert len(images) == 7
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1], validate=True).startswith(b"\x89PNG")


def test_hostile_strings_are_escaped(page: str):
    # The candidate run has XSS in a benchmark name, its param, workload, options and machine node.
    assert XSS not in page
    assert "alert(1)" in page  # it is there, as text
    assert page.count(html.escape(XSS)) >= 3
    assert "<script>" not in page.lower()


def test_comparison_and_provenance(page: str, two_runs):
    assert "0001_base → 0002_cand" in html.unescape(page)
    row = re.search(r"<tr class=\"regressed\">(.*?)</tr>", page, re.S)
    assert row and "test_throughput[ddp-mlp-w2]" in row.group(1)
    # machine mismatch (torch 2.13.0 → 2.14.0) is shown on the comparison
    assert "machines differ: torch: baseline 2.13.0, candidate 2.14.0" in html.unescape(page)
    for path in two_runs:
        assert str(path) in page
    assert "abc123" in page  # the lock hash in provenance
    assert 'id="provenance"' in page and "Full machine_info" in page


def test_single_run_has_no_comparison(tmp_path: Path):
    run = report_synth.make_run(tmp_path / "results", comm=False, timelines=False,
                                cases=report_synth.TRAINING_CASES[:2])
    out = write_report([run], tmp_path / "r.html")
    text = out.read_text()
    assert 'id="comparison"' not in text and "Summary" in text


def test_disjoint_runs_render_with_a_note(tmp_path: Path):
    a = report_synth.make_run(tmp_path, number=1, cases=report_synth.TRAINING_CASES[:1], comm=False)
    b = report_synth.make_run(tmp_path, number=2, cases=report_synth.TRAINING_CASES[1:2], comm=False)
    text = html.unescape(write_report([a, b], tmp_path / "r.html").read_text())
    assert "have no benchmark in common" in text


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path: Path):
    target = tmp_path / "report.html"
    target.write_text("old report")
    with pytest.raises(TypeError):
        atomic_write_text(target, 12345)  # type: ignore[arg-type]  # fails mid-write
    assert target.read_text() == "old report"
    assert os.listdir(tmp_path) == ["report.html"]  # no temp file left behind
    atomic_write_text(target, "new report")
    assert target.read_text() == "new report" and os.listdir(tmp_path) == ["report.html"]


def test_bad_run_leaves_no_output(tmp_path: Path):
    out = tmp_path / "r.html"
    with pytest.raises(ResultsError):
        write_report([tmp_path / "nope.json"], out, results_dir=tmp_path)
    assert not out.exists()
