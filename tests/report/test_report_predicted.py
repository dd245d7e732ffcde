"""The report's "Predicted at other world sizes" section (``dpbench report --predict-world-sizes``):
it shows the numbers of :func:`dpbench.predict.step_predictions` for the same inputs, after the
decision; bad input is one line and exit 2, with no file written."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from dpbench.cli import main
from dpbench.predict import run_collective_model, step_predictions
from dpbench.report.html import render_report_and_decision
from dpbench.results.load import read_run
from dpbench.results.units import fmt_bytes, fmt_pct, fmt_seconds

DATA = Path(__file__).parents[1] / "predict" / "data"
RUN = str(DATA / "step_run.json")
LINK = "intra=10GB/s"
PICK_LINE = "pick (the fastest predicted; sure when no other interval overlaps it):"


def _section(page: str) -> str:
    start = page.index('<section id="predicted">')
    return page[start : page.index("</section>", start)]


def _tables(section: str) -> list[list[list[str]]]:
    """Every table of the section, as rows of cell texts (the header left out)."""
    out = []
    for body in re.findall(r"<tbody>(.*?)</tbody>", section, flags=re.S):
        rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body, flags=re.S)
        out.append([[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", r, flags=re.S)] for r in rows])
    return out


def _items(section: str) -> list[str]:
    return [html.unescape(i) for i in re.findall(r"<li>(.*?)</li>", section, flags=re.S)]


def _expected_rows(forecast) -> list[list[str]]:
    """The forecast's predictions as ``dpbench predict`` prints them, by world size then fastest first."""
    return [
        [
            p.label,
            str(p.world_size),
            fmt_seconds(p.step_time_s),
            f"[{fmt_seconds(p.lo_s)}, {fmt_seconds(p.hi_s)}]",
            f"{p.samples_per_s:,.0f}",
            fmt_pct(p.scaling_efficiency),
            fmt_seconds(p.exposed_comm_s),
            fmt_bytes(p.memory_per_rank_bytes) if p.memory_per_rank_bytes is not None else "–",
            fmt_seconds(p.measured_step_time_s),
            "–" if p.error is None else f"{p.error:+.1%}",
        ]
        for p in sorted(forecast.predictions, key=lambda p: (p.world_size, p.step_time_s))
    ]


def _forecast(run, *, memory=None, memory_kind="not estimated"):
    model = run_collective_model(run, link=LINK, gpus_per_node=8)
    return step_predictions(run, model, [2, 4], memory=memory, memory_kind=memory_kind)


def _without(path: Path, keep) -> str:
    doc = json.loads(Path(RUN).read_text())
    doc["benchmarks"] = [b for b in doc["benchmarks"] if keep(b["extra_info"])]
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_section_shows_the_forecasts_numbers_after_the_decision():
    run = read_run(RUN)
    forecast = _forecast(run, memory=lambda profile, world, batch: 1000 * world + batch, memory_kind="counted")
    page, _ = render_report_and_decision([run], forecasts=[forecast])
    section = _section(page)
    assert _tables(section) == [_expected_rows(forecast)]
    # the pick at each world size, then what the predictions rest on: the overlap's origin, the model's notes
    items = _items(section)
    assert [i for i in items if i.startswith("w")] == [k.sentence() for k in forecast.picks]
    assert f"overlap slowdown {forecast.overlap.value:.2f}: {forecast.overlap.origin}" in items
    assert "memory/rank: counted" in items
    assert all(f"note: {n}" in items for n in forecast.notes) and forecast.notes
    assert PICK_LINE in html.unescape(section)
    # the decision stays the first section; the forecast comes right after it, in the page and its links
    ids = re.findall(r'<section id="([\w-]+)"', page)
    assert ids[:2] == ["decision", "predicted"]
    nav = re.search(r"<nav>(.*?)</nav>", page, flags=re.S).group(1)
    assert re.findall(r'href="#([\w-]+)"', nav)[:2] == ["decision", "predicted"]


def test_without_forecasts_there_is_no_section():
    page, _ = render_report_and_decision([read_run(RUN)])
    assert 'id="predicted"' not in page and "Predicted at other world sizes" not in page


def test_a_run_with_nothing_to_predict_says_so_beside_one_that_has(tmp_path):
    single = read_run(_without(tmp_path / "single_only.json", lambda info: info.get("strategy") == "single"))
    run = read_run(RUN)
    forecast = _forecast(run)
    page, _ = render_report_and_decision([run, single], forecasts=[forecast, None])
    section = _section(page)
    assert _tables(section) == [_expected_rows(forecast)]
    assert "single_only <span" in section
    assert "nothing to predict from: no ddp, fsdp, zero or allreduce training case" in section


@pytest.mark.slow
def test_the_command_line_writes_the_section_with_predicts_numbers(tmp_path, capsys):
    from dpbench.commands.predict import MEMORY_KINDS, memory_estimator

    out = tmp_path / "report.html"
    argv = ["report", RUN, "--predict-world-sizes", "2,4", "--link", LINK, "--gpus-per-node", "8", "-o", str(out)]
    assert main(argv) == 0
    expected = _forecast(read_run(RUN), memory=memory_estimator("state"), memory_kind=MEMORY_KINDS["state"])
    section = _section(out.read_text())
    assert _tables(section) == [_expected_rows(expected)]
    assert f"memory/rank: {MEMORY_KINDS['state']}" in _items(section)
    # without the options, the same run's report has no such section
    assert main(["report", RUN, "-o", str(tmp_path / "plain.html")]) == 0
    assert 'id="predicted"' not in (tmp_path / "plain.html").read_text()


def _refused(capsys, tmp_path: Path, *argv: str) -> str:
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    assert main(["report", *argv, "-o", str(out)]) == 2
    assert list(out.parent.iterdir()) == []  # nothing written, not even a temporary file
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--link", LINK], "--link: expected --predict-world-sizes LIST beside it (the world sizes to predict)"),
        (["--collectives", RUN], "--collectives: expected --predict-world-sizes LIST beside it"),
        (["--gpus-per-node", "8"], "--gpus-per-node: expected --predict-world-sizes LIST beside it"),
        (["--scaling", "strong"], "--scaling: expected --predict-world-sizes LIST beside it"),
        (["--collective", "all_reduce"], "--collective: expected --predict-world-sizes LIST beside it"),
        (["--predict-world-sizes", "0"], "--predict-world-sizes: expected comma-separated integers >= 1, found '0'"),
        (["--predict-world-sizes", "16"], "world size 16: spans 8 nodes of 2 GPUs"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(capsys, tmp_path, argv, message):
    assert message in _refused(capsys, tmp_path, RUN, *argv)


def test_a_run_the_model_cannot_predict_is_refused_as_predict_refuses_it(capsys, tmp_path):
    training = _without(tmp_path / "training.json", lambda info: info.get("kind") == "training")
    err = _refused(capsys, tmp_path, training, "--predict-world-sizes", "2")
    assert "has no comm-suite benchmarks: expected nccl-tests logs or a comm-suite run in --collectives" in err
    assert main(["predict", training, "--world-sizes", "2", "--memory", "off"]) == 2
    assert capsys.readouterr().err.split(": error: ")[1] == err.split(": error: ")[1]


def test_runs_with_nothing_to_predict_are_refused_as_predict_refuses_them(capsys, tmp_path):
    single = _without(tmp_path / "single.json", lambda info: info.get("strategy") == "single")
    err = _refused(capsys, tmp_path, single, "--predict-world-sizes", "2", "--link", LINK)
    assert "no ddp, fsdp, zero or allreduce training case: expected a run of" in err
