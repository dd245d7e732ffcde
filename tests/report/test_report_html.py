"""The HTML report: self-contained, escaped, every case in every view, claims from trials."""
from __future__ import annotations

import base64
import html
import html.parser
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

import report_synth
from report_synth import XSS
from dpbench.report import ResultsError, write_report
from dpbench._atomic import atomic_write_text
from dpbench.results.frame import load_runs


class Parts(html.parser.HTMLParser):
    """The report as ``{part id: [table rows as lists of cell texts]}`` plus the summary's claims."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[list[str]]] = {}
        self.claims: list[str] = []
        self.warnings: list[str] = []
        self._part: str | None = None
        self._depth = 0  # div nesting inside the current part
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._text: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div" and "part" in (attrs.get("class") or "").split():
            self._part, self._depth = attrs["id"], 0
            self.rows[self._part] = []
        elif tag == "div" and self._part:
            self._depth += 1
        elif tag == "tr" and self._part:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "li" or (tag == "p" and attrs.get("class") == "warn"):
            self._text = []

    def handle_endtag(self, tag):
        if tag == "div" and self._part:
            if self._depth == 0:
                self._part = None
            else:
                self._depth -= 1
        elif tag == "td" and self._cell is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row:
                self.rows[self._part].append(self._row)
            self._row = None
        elif tag in ("li", "p") and self._text is not None:
            (self.claims if tag == "li" else self.warnings).append("".join(self._text))
            self._text = None

    def handle_data(self, data):
        for sink in (self._cell, self._text):
            if sink is not None:
                sink.append(data)


def parse(page: str) -> Parts:
    parser = Parts()
    parser.feed(page)
    return parser


@pytest.fixture(scope="module")
def page(report_html: Path) -> str:
    return report_html.read_text(encoding="utf-8")


@pytest.mark.slow
def test_self_contained(page: str):
    assert "<script" not in page.lower()
    assert "<link" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page, re.I)
    assert "@import" not in page and "url(" not in page
    images = re.findall(r'<img src="([^"]+)"', page)
    assert len(images) >= 12  # every suite's figures, one PNG each
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1], validate=True).startswith(b"\x89PNG")


def test_hostile_strings_are_escaped(page: str):
    # The candidate run has XSS in a benchmark name, its param, workload, suite, options and machine node.
    assert XSS not in page
    assert "alert(1)" in page  # it is there, as text
    assert page.count(html.escape(XSS)) >= 3
    assert "<script>" not in page.lower()


def test_comparison_uses_the_gates_verdicts(page: str, two_runs):
    text = html.unescape(page)
    assert "0001_base → 0002_cand" in text
    row = re.search(r"<tr class=\"regressed\">(.*?)</tr>", page, re.S)
    assert row and "test_throughput[ddp-mlp-w2]" in row.group(1) and "moderated t on log trials" in row.group(1)
    assert "regressed 1, improved 0, unchanged 14, inconclusive 0, incomparable 0, missing 0, new 1" in text
    # machine mismatch (torch 2.13.0 → 2.14.0) is shown on the comparison
    assert "machines differ: torch: baseline 2.13.0, candidate 2.14.0" in text
    for path in two_runs:
        assert str(path) in page
    assert "abc123" in page  # the lock hash in provenance
    assert 'id="provenance"' in page and "Full machine_info" in page


def test_a_suite_without_single_is_compared_with_the_runs_single_at_the_same_batch(page: str):
    claims = parse(page).claims
    assert "compared with single from the throughput suite of this run" in claims
    assert any(c.startswith("ddp(bucket_cap_mb=5) w2 is ") and "× single (CI " in c for c in claims)


def test_each_suite_has_its_own_section(page: str):
    ids = re.findall(r'<section id="(suite-[^"]+)" class="suite">', page)
    assert ids[:6] == ["suite-throughput", "suite-scaling", "suite-ddp_knobs", "suite-dp_phases", "suite-comm",
                       "suite-script-alert-1-script"]
    parts = parse(page).rows
    assert "suite-scaling-scaling" in parts and "suite-comm-busbw" in parts
    assert "suite-throughput-scaling" not in parts and "suite-throughput-busbw" not in parts


# ---------------------------------------------------------------- no case dropped
@pytest.fixture(scope="module")
def many_html(many_runs, tmp_path_factory) -> str:
    return write_report(list(many_runs), tmp_path_factory.mktemp("many") / "r.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def many(many_runs, many_html) -> tuple[Parts, object]:
    return parse(many_html), load_runs(list(many_runs))


APPLIES = {  # part → which benchmarks it must list
    "headline": lambda r: True,
    "step-times": lambda r: True,
    "phases": lambda r: r["kind"] == "training",
    "memory": lambda r: r["kind"] == "training",
    "timelines": lambda r: isinstance(r.get("sampler.timeline"), str),
    "busbw": lambda r: r["kind"] == "collective",
}


@pytest.mark.slow
def test_every_benchmark_of_every_run_is_in_every_part_that_applies(many):
    parsed, frame = many
    assert frame.groupby("run").size().min() >= 70 and frame["suite"].nunique() >= 5
    checked = 0
    for suite, rows in frame.groupby("suite"):
        for part, applies in APPLIES.items():
            expected = {(r["run"], r["name"]) for _, r in rows.iterrows() if applies(r)}
            if not expected:
                assert f"suite-{suite}-{part}" not in parsed.rows, (suite, part)
                continue
            shown = {(cells[0], name) for cells in parsed.rows[f"suite-{suite}-{part}"]
                     for name in cells if name.startswith("test_")}
            assert expected <= shown, (suite, part, sorted(expected - shown)[:5])
            checked += len(expected)
    n_training = len(report_synth.many_cases())
    # headline and step times list all 73 benchmarks of both runs, phases and memory the training
    # ones, busbw the collectives, timelines the three dp_phases cases
    assert checked == 2 * (2 * (n_training + 4) + 2 * n_training + 4 + 3)


def test_no_figure_mixes_suites(many_html: str):
    """Each image sits in its suite's section and is named after that suite; each decodes as a PNG."""
    for suite, body in re.findall(r'<section id="suite-([^"]+)" class="suite">(.*?)</section>', many_html, re.S):
        images = re.findall(r'<img src="data:image/png;base64,([^"]+)" alt="([^"]+)"', body)
        assert images, suite
        for data, alt in images:
            assert alt.startswith(f"{suite}: ") and base64.b64decode(data).startswith(b"\x89PNG"), (suite, alt)


# ---------------------------------------------------------------- the summary in words
def _expected_ci(numerator, denominator) -> tuple[float, float, float]:
    logs = np.log(np.array(numerator) / np.array(denominator))
    lo, hi = sps.t.interval(0.95, len(logs) - 1, loc=logs.mean(), scale=sps.sem(logs))
    return math.exp(logs.mean()), math.exp(lo), math.exp(hi)


def test_summary_sentences_come_from_paired_trials(tmp_path: Path):
    cases = report_synth.TRAINING_CASES[:3]  # mlp: single, dp, ddp
    doc = report_synth.make_doc(cases=cases, comm=False)
    single = [0.020, 0.024, 0.019, 0.022]  # the machine's speed changed between passes ...
    ddp = [s / 1.31 * f for s, f in zip(single, (1.0, 1.01, 0.99, 1.005))]  # ... ddp kept its lead in each
    dp = [s * f for s, f in zip(single, (0.97, 1.04, 1.02, 0.98))]  # dp: no real difference
    for bench, times in zip(doc["benchmarks"], (single, dp, ddp)):
        bench["extra_info"]["trials"].update(count=4, step_time_s=times)
        bench["extra_info"]["step_time_s"] = float(np.median(times))
        bench["extra_info"].pop("step_time_ci95")
        bench["extra_info"].pop("samples_per_s_ci95")
    path = report_synth.write_json(tmp_path / "m" / "0001_x.json", doc)
    claims = parse(write_report([path], tmp_path / "r.html").read_text()).claims
    # throughput ratio = (64 / case time) / (64 / single time), trial by trial
    ratio, lo, hi = _expected_ci(single, ddp)
    assert f"ddp w2 is {ratio:.2f}× single (CI {lo:.2f}–{hi:.2f}, 4 paired trials)" in claims
    assert f"{ratio:.2f}" == "1.31"
    ratio, lo, hi = _expected_ci(single, dp)
    assert lo < 1 < hi
    assert f"no significant difference between dp w2 and single ({ratio:.2f}×, CI {lo:.2f}–{hi:.2f}, " \
           "4 paired trials)" in claims
    assert any(c.startswith("fastest: ddp w2 at ") for c in claims)


def test_with_one_trial_the_spread_is_said_to_be_unknown(tmp_path: Path):
    run = report_synth.make_run(tmp_path / "results", schema=1, comm=False, timelines=False,
                                cases=report_synth.TRAINING_CASES[:3])
    claims = parse(write_report([run], tmp_path / "r.html").read_text()).claims
    assert any(c.startswith("ddp w2 is ") and "the spread across processes is unknown" in c for c in claims)
    assert not any("CI" in c for c in claims if c.startswith("ddp w2"))


def test_drifting_controls_and_clock_warnings_are_shown(tmp_path: Path):
    name = report_synth.bench_id(report_synth.TRAINING_CASES[1])
    run = report_synth.make_run(tmp_path / "results", comm=False, timelines=False, cases=report_synth.TRAINING_CASES[:3],
                                control_passes=[1.0, 1.0, 1.0, 1.25, 1.3, 1.3],
                                clock_warnings={name: ["sm clock 1410 MHz, below its 1980 MHz maximum (thermal)"]})
    warnings = parse(write_report([run], tmp_path / "r.html").read_text()).warnings
    drift = [w for w in warnings if "the controls drifted" in w]
    assert len(drift) == 1 and "the machine's speed changed during the run" in drift[0]
    assert any(name in w and "trial 6: sm clock 1410 MHz, below its 1980 MHz maximum (thermal)" in w for w in warnings)
    steady = report_synth.make_run(tmp_path / "results2", comm=False, timelines=False,
                                   cases=report_synth.TRAINING_CASES[:3])
    assert not parse(write_report([steady], tmp_path / "s.html").read_text()).warnings


def test_headline_table_shows_trials_cv_and_control(many):
    parsed, frame = many
    row = frame[(frame["suite"] == "throughput") & (frame["run"] == "0001_many1")].iloc[3]
    cells = next(c for c in parsed.rows["suite-throughput-headline"] if c[0] == "0001_many1" and c[3] == row["name"])
    assert cells[4] == "4"  # trials
    assert cells[9] == f"{row['trial_cv'] * 100:.1f}%" and cells[10].endswith("ms")


# ---------------------------------------------------------------- files and errors
def test_single_run_has_no_comparison(tmp_path: Path):
    run = report_synth.make_run(tmp_path / "results", comm=False, timelines=False,
                                cases=report_synth.TRAINING_CASES[:2])
    text = write_report([run], tmp_path / "r.html").read_text()
    assert 'id="comparison"' not in text and "Summary" in text


def test_disjoint_runs_render_with_a_note(tmp_path: Path):
    a = report_synth.make_run(tmp_path, number=1, cases=report_synth.TRAINING_CASES[:1], comm=False)
    b = report_synth.make_run(tmp_path, number=2, cases=report_synth.TRAINING_CASES[1:2], comm=False)
    text = html.unescape(write_report([a, b], tmp_path / "r.html").read_text())
    assert "have no benchmark in common" in text


def test_output_that_is_a_directory_is_refused(tmp_path: Path):
    run = report_synth.make_run(tmp_path / "results", comm=False, timelines=False,
                                cases=report_synth.TRAINING_CASES[:1])
    with pytest.raises(ResultsError, match="-o/--output: expected the path of the HTML file to write, found a "
                                           "directory") as info:
        write_report([run], tmp_path)
    assert "\n" not in str(info.value)


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
