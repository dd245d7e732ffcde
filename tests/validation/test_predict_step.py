"""``validation.predict_step`` on configured cases, with the "unchanged" baseline, over several runs,
and its refusals. The runs are the stored ``tests/predict/data/step_run.json`` and copies of it with
its ddp cases at 1 and 2 ranks saved again as ``ddp@accumulation_steps=2`` the way a real run saves a
configured case (``requested_options`` and the resolved ``options``); the expected values are
computed here from each run's own numbers. Its plain-strategy table is checked end to end in
``tests/validation/test_validation_run.py``.
"""

from __future__ import annotations

import copy
import importlib
import json
import statistics
from pathlib import Path

import pytest

STEP_RUN = Path(__file__).resolve().parents[1] / "predict" / "data" / "step_run.json"
LABEL = "ddp@accumulation_steps=2"


def _main(argv: list[str]) -> int:
    return importlib.import_module("validation.predict_step").main(argv)


def _accumulation_run(path: Path, *, slower: float, twin: float = 1.1) -> Path:
    """The stored run with its ddp cases copied as ``ddp@accumulation_steps=2``: the step ``slower``
    times ddp's, and the 2-rank compute-only twin ``twin`` times ddp's (so the ratio the row reads is
    its own, not ddp's)."""
    doc = json.loads(STEP_RUN.read_text())
    extra = []
    for bench in doc["benchmarks"]:
        info = bench["extra_info"]
        if info["kind"] != "training" or info["strategy"] != "ddp":
            continue
        copied = copy.deepcopy(bench)
        copied["name"] = copied["name"].replace("]", "-accumulation_steps=2]")
        out = copied["extra_info"]
        out["requested_options"] = {"accumulation_steps": 2}
        out["options"]["accumulation_steps"] = 2
        out["step_time_s"] *= slower
        out["step_time_ci95"] = [v * slower for v in out["step_time_ci95"]]
        if out["world_size"] == 2:
            out["compute_only_step_s"] *= twin
        extra.append(copied)
    doc["benchmarks"] += extra
    path.write_text(json.dumps(doc))
    return path


def _step(path: Path, label: str, world: int, key: str = "step_time_s") -> float:
    for bench in json.loads(path.read_text())["benchmarks"]:
        info = bench["extra_info"]
        if info["kind"] == "training" and info["world_size"] == world:
            if (LABEL if info.get("requested_options") else info["strategy"]) == label:
                return info[key]
    raise AssertionError(f"no {label} at w{world} in {path}")


def test_a_configured_case_is_predicted_beside_the_unchanged_baseline(tmp_path, capsys):
    run = _accumulation_run(tmp_path / "accum.json", slower=1.5)
    out_file = tmp_path / "out.json"
    assert _main([str(run), "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    found = json.loads(out_file.read_text())
    rows = {r["label"]: r for r in found["rows"]}
    assert sorted(rows) == ["allreduce", "ddp", LABEL, "fsdp", "zero"]
    row = rows[LABEL]
    assert row["strategy"] == "ddp"
    assert row["one_rank_s"] == _step(run, LABEL, 1) and row["measured_s"] == _step(run, LABEL, 2)
    # the configured case's own compute-only twins, not plain ddp's
    assert row["contention"] == pytest.approx(
        _step(run, LABEL, 2, "compute_only_step_s") / _step(run, LABEL, 1, "compute_only_step_s")
    )
    assert row["contention"] != pytest.approx(rows["ddp"]["contention"])
    for label, r in rows.items():
        assert r["unchanged_error"] == pytest.approx(_step(run, label, 1) / _step(run, label, 2) - 1)
    summary = found["summary"]
    model = statistics.median(abs(r["error"]) for r in rows.values())
    unchanged = statistics.median(abs(r["unchanged_error"]) for r in rows.values())
    assert summary["median_abs_pct_error"] == pytest.approx(model)
    assert summary["median_abs_pct_error_unchanged"] == pytest.approx(unchanged)
    assert summary["beats_unchanged"] is (model < unchanged)
    assert f"| mlp | {LABEL} | {row['one_rank_s'] * 1e3:.2f} ms | " in out
    assert f"| {row['error']:+.1%} | {row['unchanged_error']:+.1%} | " in out
    verdict = "beats unchanged" if model < unchanged else "does not beat unchanged"
    assert f"on this run the model {verdict}: median {model:.1%} against {unchanged:.1%}" in out
    # one run: the aggregate is that run's, and its record stays at the top of the document
    assert found["runs"][0]["rows"] == found["rows"] and found["aggregate"]["runs"] == [str(run)]


def test_a_model_worse_than_unchanged_says_so(tmp_path, capsys):
    # the 2-rank steps as the 1-rank ones: "unchanged" is exact, the model cannot beat it
    doc = json.loads(STEP_RUN.read_text())
    one = {
        i["strategy"]: i["step_time_s"]
        for i in (b["extra_info"] for b in doc["benchmarks"])
        if i.get("world_size") == 1
    }
    for bench in doc["benchmarks"]:
        info = bench["extra_info"]
        if info["kind"] == "training" and info["world_size"] == 2:
            info["step_time_s"] = one[info["strategy"]]
    run = tmp_path / "flat.json"
    run.write_text(json.dumps(doc))
    out_file = tmp_path / "out.json"
    assert _main([str(run), "--json", str(out_file)]) == 0
    summary = json.loads(out_file.read_text())["summary"]
    assert summary["median_abs_pct_error_unchanged"] == 0 and summary["beats_unchanged"] is False
    assert "on this run the model does not beat unchanged: median " in capsys.readouterr().out


def test_several_runs_are_aggregated_per_configuration_and_over_all(tmp_path, capsys):
    runs = [_accumulation_run(tmp_path / "a.json", slower=1.5), _accumulation_run(tmp_path / "b.json", slower=1.2)]
    out_file = tmp_path / "out.json"
    assert _main([*map(str, runs), "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    found = json.loads(out_file.read_text())
    assert [r["run"] for r in found["runs"]] == [str(p) for p in runs] and "rows" not in found
    per_run = [{(r["workload"], r["label"]): r for r in run["rows"]} for run in found["runs"]]
    aggregate = found["aggregate"]
    assert aggregate["runs"] == [str(p) for p in runs]
    cases = {(c["workload"], c["label"]): c for c in aggregate["cases"]}
    assert set(cases) == set(per_run[0]) == set(per_run[1])
    for key, case in cases.items():
        errors = [rows[key]["error"] for rows in per_run]
        unchanged = [rows[key]["unchanged_error"] for rows in per_run]
        assert case["errors"] == errors and case["unchanged_errors"] == unchanged
        assert case["median_abs_error"] == pytest.approx(statistics.median(abs(e) for e in errors))
        assert case["worst_abs_error"] == pytest.approx(max(abs(e) for e in errors))
        assert case["worst_abs_error_unchanged"] == pytest.approx(max(abs(u) for u in unchanged))
        assert case["configured"] is (key[1] == LABEL)
    # the two runs differ only in the configured case
    assert cases["mlp", LABEL]["errors"][0] != pytest.approx(cases["mlp", LABEL]["errors"][1])
    every = [abs(rows[key]["error"]) for rows in per_run for key in rows]
    base = [abs(rows[key]["unchanged_error"]) for rows in per_run for key in rows]
    configured = [abs(rows["mlp", LABEL]["error"]) for rows in per_run]
    all_rows, mine = aggregate["all"], aggregate["configured"]
    assert all_rows["checked"] == 10 and all_rows["cases"] == 5
    assert all_rows["median_abs_error"] == pytest.approx(statistics.median(every))
    assert all_rows["worst_abs_error"] == pytest.approx(max(every))
    assert all_rows["median_abs_error_unchanged"] == pytest.approx(statistics.median(base))
    assert all_rows["worst_abs_error_unchanged"] == pytest.approx(max(base))
    assert all_rows["beats_unchanged"] is (statistics.median(every) < statistics.median(base))
    assert mine["checked"] == 2 and mine["cases"] == 1
    assert mine["median_abs_error"] == pytest.approx(statistics.median(configured))
    assert mine["worst_abs_error"] == pytest.approx(max(configured))
    e1, e2 = cases["mlp", LABEL]["errors"]
    assert (
        f"| mlp | {LABEL} | {e1:+.1%} | {e2:+.1%} | {statistics.median([abs(e1), abs(e2)]):.1%} "
        f"| {max(abs(e1), abs(e2)):.1%} | "
    ) in out
    assert (
        sum(line.startswith("run: ") for line in out.splitlines()) == 2 and f"over 2 runs: {runs[0]}, {runs[1]}" in out
    )
    verdict = "beats unchanged" if mine["beats_unchanged"] else "does not beat unchanged"
    assert (
        f"configured cases (a label with options): 2 errors (1 case over 2 runs): median absolute error "
        f"{statistics.median(configured):.1%}, worst {max(configured):.1%}; unchanged: median "
    ) in out
    assert out.splitlines()[-2].endswith(f"the model {verdict}")
    assert out.splitlines()[-1].startswith("every case: 10 errors (5 cases over 2 runs): median absolute error ")


def _no_two_ranks(where: Path) -> Path:
    path = where / "one_rank.json"
    doc = json.loads(STEP_RUN.read_text())
    doc["benchmarks"] = [
        b for b in doc["benchmarks"] if b["extra_info"]["kind"] != "training" or b["extra_info"]["world_size"] == 1
    ]
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda d: d / "missing.json", "cannot read"),
        (lambda d: (d / "notes.json").write_text('{"a": 1}') and d / "notes.json", "not a pytest-benchmark results"),
        (
            _no_two_ranks,
            "expected ddp, fsdp, zero or allreduce training cases at world sizes 1 and 2, found them at 1",
        ),
    ],
    ids=["missing", "not-a-run", "no-world-size-2"],
)
def test_a_path_it_cannot_use_is_refused_in_one_line(tmp_path, capsys, make, says):
    bad = make(tmp_path)
    assert _main([str(bad)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"validation.predict_step: error: {bad}: ") and says in lines[0]
    assert captured.out == ""


def test_a_bad_run_after_a_good_one_is_refused_before_anything_is_printed(tmp_path, capsys):
    bad = tmp_path / "missing.json"
    assert _main([str(STEP_RUN), str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"validation.predict_step: error: {bad}: cannot read")
    assert len(captured.err.splitlines()) == 1
