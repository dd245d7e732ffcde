"""The HTML report: self-contained, escaped, every case in every view, claims from trials."""

from __future__ import annotations

import base64
import hashlib
import html
import html.parser
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
from _long_spec import LONG_SPEC, long_spec_run
from scipy import stats as sps

from dpbench._atomic import atomic_write_text
from dpbench.decision.claims import CLAIM_LEVEL, comparison_level, family_size
from dpbench.decision.configs import configurations
from dpbench.errors import UsageError
from dpbench.report import ResultsError, write_report
from dpbench.results.frame import load_runs
from dpbench.stats import paired_ratio
from validation import synthetic_runs
from validation.synthetic_runs import XSS


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
    # One inline script (sorting and filtering tables), allowed by its hash and nothing else.
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S)
    assert len(scripts) == 1 and scripts[0][0] == ""
    digest = base64.b64encode(hashlib.sha256(scripts[0][1].encode("utf-8")).digest()).decode()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert f"script-src 'sha256-{digest}'" in csp and "unsafe-inline" not in csp.split("script-src")[1]
    assert "fetch(" not in scripts[0][1] and "XMLHttpRequest" not in scripts[0][1]
    assert "<link" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page, re.I)
    assert "@import" not in page and "url(" not in page
    images = re.findall(r'<img src="([^"]+)"', page)
    assert len(images) >= 6  # one figure per kind
    for src in images:
        mime, data = re.match(r"data:(image/png|image/svg\+xml);base64,(.*)", src).groups()
        raw = base64.b64decode(data, validate=True)
        assert raw.startswith(b"\x89PNG") if mime == "image/png" else b"<svg" in raw[:2000]
        assert b"<script" not in raw


def test_hostile_strings_are_escaped(page: str):
    # The candidate run has XSS in a benchmark name, its param, workload, suite, options and machine node.
    assert XSS not in page
    assert "alert(1)" in page  # it is there, as text
    assert page.count(html.escape(XSS)) >= 3
    assert page.lower().count("<script") == 1  # the table script alone


def test_comparison_uses_the_gates_verdicts(page: str, two_runs):
    text = html.unescape(page)
    assert "0001_base → 0002_cand" in text
    row = re.search(r"<tr class=\"regressed\">(.*?)</tr>", page, re.S)
    assert row and "test_throughput[ddp-mlp-w2]" in row.group(1) and "moderated test on log trials" in row.group(1)
    assert "<td>ddp w2</td>" in row.group(1)
    assert "regressed 1, improved 0, unchanged 14, inconclusive 0, incomparable 0, missing 0, new 1" in text
    # machine mismatch (torch 2.13.0 → 2.14.0) is shown on the comparison
    assert "machines differ: torch: baseline 2.13.0, candidate 2.14.0" in text
    for path in two_runs:
        assert str(path) in page
    assert "abc123" in page  # the lock hash in provenance
    assert 'id="provenance"' in page and "Full machine_info" in page


def test_comparison_shows_a_case_several_suites_published_once(page: str):
    """dp w2 is published by the throughput and the dp_phases suite (one case_key): one row."""
    rows = parse(page).rows["comparison-1"]
    dp = [r for r in rows if r[:2] == ["mlp", "dp w2"]]
    assert len(dp) == 1 and dp[0][2] == "throughput, dp_phases"
    assert len(rows) == 16 - 1  # the gate judged 16 benchmarks, two of them one configuration


def test_a_suite_without_single_is_compared_with_the_runs_single_at_the_same_batch(page: str):
    claims = parse(page).claims
    assert any(c.startswith("ddp(bucket_cap_mb=5) w2 (") and "× single (CI " in c for c in claims)


def test_the_decision_view_is_first_and_the_sections_follow(page: str):
    ids = re.findall(r'<section id="([^"]+)"', page)
    assert ids == [
        "decision",
        "comparison",
        "throughput",
        "step-times",
        "resources",
        "communication",
        "numbers",
        "provenance",
    ]
    parts = parse(page).rows
    assert "throughput-scaling" in parts and "communication-busbw" in parts


def _grids(page: str) -> dict[str, dict[str, dict[str, tuple[str, str, str]]]]:
    """The decision view's heatmaps: {title: {row: {column: (text, class, tooltip)}}}."""
    view = page.split('<section id="decision"', 1)[1].split("</section>", 1)[0]
    out = {}
    for title, body in re.findall(r"<figcaption><strong>(.*?)</strong></figcaption>(.*?)</figure>", view, re.S):
        head = re.findall(r"<th>(.*?)</th>", body.split("</thead>")[0])
        table = {}
        for label, cells in re.findall(r'<tr><th><span class="swatch"[^>]*></span>(.*?)</th>(.*?)</tr>', body, re.S):
            found = re.findall(r'<td class="([^"]*)"(?: style="[^"]*" title="([^"]*)")?>(.*?)</td>', cells)
            table[html.unescape(label)] = {
                col: (text, cls, html.unescape(tip)) for col, (cls, tip, text) in zip(head[1:], found) if text
            }
        out.setdefault(html.unescape(title), []).append(table)
    return out


def test_decision_heatmap_is_the_paired_ratio_and_the_gates_verdicts(page: str, two_runs):
    frame = load_runs(list(two_runs))
    cand = frame[frame["run"] == "0002_cand"]
    grids = _grids(page)
    ratio_grid = grids["× single"][0]
    single = cand[cand["name"] == "test_throughput[single-mlp-w1]"].iloc[0]
    ddp = cand[cand["name"] == "test_throughput[ddp-mlp-w2]"].iloc[0]
    # The claim at the question's level split over every pair of its configurations (one look).
    question = configurations(frame)
    question = question[(question["run"] == "0002_cand") & (question["workload"] == "mlp") & (question["batch"] == 64)]
    each = comparison_level(CLAIM_LEVEL, family_size(len(question)))
    expected = paired_ratio([64 / t for t in ddp["trial_times"]], [64 / t for t in single["trial_times"]], each)
    text, cls, tip = ratio_grid["ddp"]["w2"]
    claim = "faster" if expected.lo > 1 else "slower" if expected.hi < 1 else "unsettled"
    assert (
        text == f"{expected.ratio:.2f}×"
        and tip == f"ddp w2: {expected.ratio:.2f}× single (CI {expected.lo:.2f}–{expected.hi:.2f}, 6 pairs): {claim}"
    )
    assert ("strong" in cls.split()) == expected.excludes_one
    # the 40% slowdown is the gate's regression, coloured as such; the others are unchanged
    change = grids["Change 0001_base → 0002_cand"][0]
    assert change["ddp"]["w2"][1].split() == ["v-regressed"] and change["ddp"]["w2"][0].startswith("+")
    assert {cell[1].strip() for row in change.values() for cell in row.values()} == {"v-regressed", "v-unchanged"}
    # scaling efficiency is its own heatmap, never called "× single"
    efficiency = grids["Scaling efficiency (weak scaling)"][0]
    scaling = cand[cand["name"] == "test_scaling[ddp-mlp-w4]"].iloc[0]
    assert efficiency["ddp"]["w4"][0] == f"{scaling['scaling_efficiency']:.0%}"
    assert "× single" not in efficiency["ddp"]["w4"][2]


def test_the_decision_sentence_names_the_fastest_and_what_it_beats(page: str):
    view = html.unescape(page.split('<section id="decision"', 1)[1].split("</section>", 1)[0])
    mlp = next(b for b in view.split('<div class="workload ')[1:] if "<h3>mlp (" in b)  # the heading names it
    sentence = re.findall(r'<p class="verdict-line">(.*?)</p>', mlp)[0]
    assert sentence.startswith("The fastest is ddp w4 at ") and "slower: all " in sentence


# ---------------------------------------------------------------- no case dropped
@pytest.fixture(scope="module")
def many_html(many_runs, tmp_path_factory) -> str:
    return write_report(list(many_runs), tmp_path_factory.mktemp("many") / "r.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def many(many_runs, many_html) -> tuple[Parts, object]:
    return parse(many_html), load_runs(list(many_runs))


APPLIES = {  # part → which configurations it must list (by run, workload, configuration)
    "step-times-step-times": lambda r: True,
    "resources-phases": lambda r: r["kind"] == "training",
    "resources-memory": lambda r: r["kind"] == "training",
}


@pytest.mark.slow  # renders 2 runs × 73 benchmarks (module fixture)
def test_every_benchmark_of_every_run_is_shown_once_per_configuration(many):
    parsed, frame = many
    assert frame.groupby("run").size().min() >= 70 and frame["suite"].nunique() >= 5
    configs = configurations(frame)
    # the headline table: one row per configuration and run, every benchmark named in it
    rows = parsed.rows["numbers-headline"]
    assert len(rows) == len(configs) < len(frame)
    assert sorted((r[0], name) for r in rows for name in r[4].split()) == sorted(zip(frame["run"], frame["name"]))
    assert len({(r[0], r[1], r[2]) for r in rows}) == len(rows)  # no configuration twice
    for part, applies in APPLIES.items():
        expected = sorted(
            (r["run"], r["workload"] if isinstance(r["workload"], str) else "–", r["config"])
            for _, r in configs.iterrows()
            if applies(r)
        )
        shown = sorted((cells[0], cells[1], cells[2]) for cells in parsed.rows[part])
        assert shown == expected, part
    collectives = frame[frame["kind"] == "collective"]
    assert sorted((c[0], c[1]) for c in parsed.rows["communication-busbw"]) == sorted(
        zip(collectives["run"], collectives["name"])
    )
    # the newest run's configurations with a timeline (dp_phases; the throughput suite published the
    # same cases), each once: the figure draws the newest run, its table lists what it drew
    timelines = [(c[0], c[2]) for c in parsed.rows["resources-timelines"]]
    with_timeline = frame[frame["sampler.timeline"].map(lambda v: isinstance(v, str)) & (frame["run"] == "0002_many2")]
    assert len(timelines) == len(set(timelines)) == len(with_timeline)
    assert {(run, name) for run, names in timelines for name in names.split()} >= set(
        zip(with_timeline["run"], with_timeline["name"])
    )


@pytest.mark.slow  # renders 2 runs × 73 benchmarks (module fixture)
def test_the_summary_has_one_line_per_configuration(many, many_html: str):
    """Two runs: one block per question (not per run and suite), each configuration once."""
    parsed, frame = many
    view = many_html.split('<section id="decision"', 1)[1].split("</section>", 1)[0]
    configs = configurations(frame)
    newest = configs[(configs["run"] == "0002_many2") & (configs["kind"] == "training")]
    questions = newest.groupby(["workload", "batch"]).ngroups
    assert view.count('<details class="claims">') == questions
    claims = [c for c in parsed.claims if " trials): " in c]
    assert len(claims) == len(newest)


@pytest.mark.slow  # renders 2 runs × 73 benchmarks (module fixture)
def test_images_are_small_and_named(many_html: str):
    """Each image decodes (SVG or PNG), and the whole page of 2 × 73 benchmarks stays small."""
    images = re.findall(r'<img src="data:(image/[a-z+]+);base64,([^"]+)" alt="([^"]+)"', many_html)
    assert 6 <= len(images) <= 8
    for mime, data, alt in images:
        raw = base64.b64decode(data)
        assert raw.startswith(b"\x89PNG") if mime == "image/png" else b"<svg" in raw[:2000], alt
    assert len(many_html.encode()) < 1_500_000


# ---------------------------------------------------------------- the summary in words
def _expected_ci(numerator, denominator, comparisons: int) -> tuple[float, float, float]:
    """The median pair and scipy's t-interval of the mean log ratio (widened to hold the median) at
    90% per question split over its ``comparisons``."""
    logs = np.log(np.array(numerator) / np.array(denominator))
    lo, hi = sps.t.interval(1 - 0.1 / comparisons, len(logs) - 1, loc=logs.mean(), scale=sps.sem(logs))
    centre = float(np.median(logs))
    return math.exp(centre), math.exp(min(lo, centre)), math.exp(max(hi, centre))


def test_summary_sentences_come_from_paired_trials(tmp_path: Path):
    cases = synthetic_runs.TRAINING_CASES[:3]  # mlp: single, dp, ddp
    doc = synthetic_runs.make_doc(cases=cases, comm=False)
    single = [0.020, 0.024, 0.019, 0.022, 0.021]  # the machine's speed changed between passes ...
    ddp = [s / 1.31 * f for s, f in zip(single, (1.0, 1.01, 0.99, 1.005, 0.998))]  # ... ddp kept its lead in each
    dp = [s * f for s, f in zip(single, (0.97, 1.04, 1.02, 0.98, 1.01))]  # dp: no real difference
    for bench, times in zip(doc["benchmarks"], (single, dp, ddp)):
        bench["extra_info"]["trials"].update(count=5, step_time_s=times, control_s=[0.004] * 5)
        bench["extra_info"]["step_time_s"] = float(np.median(times))
        bench["extra_info"].pop("step_time_ci95")
        bench["extra_info"].pop("samples_per_s_ci95")
    path = synthetic_runs.write_json(tmp_path / "m" / "0001_x.json", doc)
    claims = parse(write_report([path], tmp_path / "r.html").read_text()).claims
    # throughput ratio = (64 / case time) / (64 / single time), trial by trial
    ratio, lo, hi = _expected_ci(single, ddp, comparisons=3)  # 3 configurations: 3 pairs
    (leader,) = [c for c in claims if c.startswith("ddp w2 (")]
    assert leader.endswith(f"the leader; {ratio:.2f}× single (CI {lo:.2f}–{hi:.2f}, 5 pairs): faster")
    assert f"{ratio:.2f}" == "1.31"
    ratio, lo, hi = _expected_ci(single, dp, comparisons=3)
    assert lo < 1 < hi
    level = "level" if lo >= 1 / 1.05 and hi <= 1.05 else "unsettled"
    (line,) = [c for c in claims if c.startswith("dp w2 (")]
    assert line.endswith(f"; {ratio:.2f}× single (CI {lo:.2f}–{hi:.2f}, 5 pairs): {level}")


def test_with_one_trial_the_spread_is_said_to_be_unknown(tmp_path: Path):
    run = synthetic_runs.make_run(
        tmp_path / "results", schema=1, comm=False, timelines=False, cases=synthetic_runs.TRAINING_CASES[:3]
    )
    claims = parse(write_report([run], tmp_path / "r.html").read_text()).claims
    (ddp,) = [c for c in claims if c.startswith("ddp w2 (")]
    assert "× single (1 pair: no interval): unsettled" in ddp and "CI" not in ddp


@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
def test_drifting_controls_and_clock_warnings_are_shown(tmp_path: Path):
    name = synthetic_runs.bench_id(synthetic_runs.TRAINING_CASES[1])
    run = synthetic_runs.make_run(
        tmp_path / "results",
        comm=False,
        timelines=False,
        cases=synthetic_runs.TRAINING_CASES[:3],
        control_passes=[1.0, 1.0, 1.0, 1.25, 1.3, 1.3],
        clock_warnings={name: ["sm clock 1410 MHz, below its 1980 MHz maximum (thermal)"]},
    )
    warnings = parse(write_report([run], tmp_path / "r.html").read_text()).warnings
    drift = [w for w in warnings if "the controls drifted" in w]
    assert len(drift) == 1 and "the machine's speed changed during the run" in drift[0]
    assert any(name in w and "trial 6: sm clock 1410 MHz, below its 1980 MHz maximum (thermal)" in w for w in warnings)
    steady = synthetic_runs.make_run(
        tmp_path / "results2", comm=False, timelines=False, cases=synthetic_runs.TRAINING_CASES[:3]
    )
    assert not parse(write_report([steady], tmp_path / "s.html").read_text()).warnings


@pytest.mark.slow  # renders 2 runs × 73 benchmarks (module fixture)
def test_headline_table_shows_trials_cv_and_control(many):
    parsed, frame = many
    row = frame[(frame["suite"] == "throughput") & (frame["run"] == "0001_many1")].iloc[3]
    cells = next(c for c in parsed.rows["numbers-headline"] if c[0] == "0001_many1" and row["name"] in c[4].split())
    assert cells[5] == "4"  # trials
    assert cells[10] == f"{row['trial_cv'] * 100:.1f}%" and cells[11].endswith("ms")


# ---------------------------------------------------------------- files and errors
def test_single_run_has_no_comparison(tmp_path: Path):
    run = synthetic_runs.make_run(
        tmp_path / "results", comm=False, timelines=False, cases=synthetic_runs.TRAINING_CASES[:2]
    )
    text = write_report([run], tmp_path / "r.html").read_text()
    assert 'id="comparison"' not in text and "Decision view" in text


def test_disjoint_runs_render_with_a_note(tmp_path: Path):
    a = synthetic_runs.make_run(tmp_path, number=1, cases=synthetic_runs.TRAINING_CASES[:1], comm=False)
    b = synthetic_runs.make_run(tmp_path, number=2, cases=synthetic_runs.TRAINING_CASES[1:2], comm=False)
    text = html.unescape(write_report([a, b], tmp_path / "r.html").read_text())
    assert "have no benchmark in common" in text


def test_output_that_is_a_directory_is_refused(tmp_path: Path):
    run = synthetic_runs.make_run(
        tmp_path / "results", comm=False, timelines=False, cases=synthetic_runs.TRAINING_CASES[:1]
    )
    with pytest.raises(
        UsageError, match="-o/--output: expected the path of the HTML file to write, found a directory"
    ) as info:
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


def test_provenance_names_the_runtime_settings_the_workers_inherited():
    from dpbench.report.html import _runtime_env
    from dpbench.results.load import SavedRun

    def run(*envs):
        benches = [{"extra_info": {"harness_settings": {"user_runtime_env": env}}} for env in envs]
        benches.append({"extra_info": {"kind": "collective"}})  # records none: not counted
        return SavedRun(
            path=Path("/nowhere/m/0001_x.json"),
            machine_info={},
            commit_info={},
            datetime="",
            version="",
            benchmarks=benches,
        )

    assert (
        _runtime_env(
            run(
                {"MALLOC_TRIM_THRESHOLD_": "9", "OMP_NUM_THREADS": "2"},
                {"OMP_NUM_THREADS": "2"},
                {"OMP_NUM_THREADS": "2"},
            )
        )
        == '{"MALLOC_TRIM_THRESHOLD_": "9", "OMP_NUM_THREADS": "2"} | {"OMP_NUM_THREADS": "2"}'
    )
    assert _runtime_env(run({}, {})) == "none set"
    assert _runtime_env(run()) is None


# ---------------------------------------------------------------- a long workload spec
@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
def test_a_long_workload_spec_is_named_once_in_its_decision_block_and_wraps(tmp_path: Path):
    page = write_report([str(long_spec_run(tmp_path))], tmp_path / "r.html").read_text(encoding="utf-8")
    view = html.unescape(page.split('<section id="decision"', 1)[1].split("</section>", 1)[0])
    block = next(b for b in view.split('<div class="workload ')[1:] if LONG_SPEC in b)
    heading = re.search(r"<h3>(.*?) <span", block)[1]
    assert heading == f"{LONG_SPEC} (sgd · fp32 · global batch 64)" and block.count(LONG_SPEC) == 1
    sentence = re.findall(r'<p class="verdict-line">(.*?)</p>', block)[0]
    assert sentence.startswith("Not settled: single w1 leads at "), sentence
    assert "h3 { font-size: 1.05rem; margin-bottom: .3rem; overflow-wrap: anywhere; }" in page
