"""The regression gate: injected slowdowns, same-distribution runs, thresholds and outputs."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import report_synth
from dpbench.cli import main
from dpbench.report import ResultsError
from dpbench.report.compare import (IMPROVED, ONLY_BASELINE, ONLY_CANDIDATE, REGRESSED, compare_frames,
                                    parse_threshold)
from dpbench.report.load import Run, runs_frame

SLOW = "test_throughput[ddp-mlp-w2]"
FALSE_ALARM_SEEDS = 200


def frame(**kwargs) -> pd.DataFrame:
    """A one-run frame built in memory (no files): fast enough for hundreds of seeds."""
    doc = report_synth.make_doc(**kwargs)
    run = Run(path=Path("/nowhere/m/0001_x.json"), machine_info=doc["machine_info"], commit_info=doc["commit_info"],
              datetime=doc["datetime"], version=doc["version"], benchmarks=doc["benchmarks"])
    return runs_frame([run])


def by_name(cmp) -> dict:
    return {b.name.rsplit("::", 1)[-1]: b for b in cmp.benchmarks}


def test_injected_20_percent_slowdown_exits_1_naming_it(tmp_path: Path, capsys):
    base = report_synth.make_run(tmp_path, number=1, seed=1)
    cand = report_synth.make_run(tmp_path, number=2, seed=2, slowdown={SLOW: 1.2})
    assert main(["compare", str(base), str(cand)]) == 1
    out = capsys.readouterr().out
    assert f"1 regression (slower by > 5.0% with p < 0.05): {SLOW}" in out
    regressed = [line for line in out.splitlines() if "REGRESSED" in line]
    assert len(regressed) == 1 and SLOW in regressed[0]


def test_same_distribution_false_alarm_rate():
    """Two runs from one distribution (15 benchmarks, 10 rounds, 3% noise) across many seeds."""
    alarms = sum(compare_frames(frame(seed=2 * s), frame(seed=2 * s + 1)).exit_code
                 for s in range(FALSE_ALARM_SEEDS))
    print(f"false alarms: {alarms}/{FALSE_ALARM_SEEDS} seeds")
    assert alarms / FALSE_ALARM_SEEDS <= 0.01


def test_slowdown_is_caught_on_every_seed():
    for s in range(30):
        cmp = compare_frames(frame(seed=2 * s), frame(seed=2 * s + 1, slowdown={SLOW: 1.2}))
        assert [b.name.rsplit("::", 1)[-1] for b in cmp.regressions] == [SLOW], s


def test_two_percent_change_under_a_five_percent_threshold_passes():
    # Low noise, 30 rounds: the 2% slowdown is real and plainly significant, but below threshold.
    base, cand = frame(seed=1, noise=0.005, rounds=30), frame(seed=2, noise=0.005, rounds=30, slowdown={SLOW: 1.02})
    cmp = compare_frames(base, cand, threshold=0.05)
    assert cmp.exit_code == 0
    assert by_name(cmp)[SLOW].ratio == pytest.approx(1.02, abs=0.005)
    # ... and the same change fails a 1% threshold: the threshold, not the noise, decided.
    assert [b.name.rsplit("::", 1)[-1] for b in compare_frames(base, cand, threshold=0.01).regressions] == [SLOW]


def test_big_noisy_difference_without_significance_is_not_a_regression():
    base, cand = frame(seed=1, rounds=3, noise=0.2), frame(seed=2, rounds=3, noise=0.2, slowdown={SLOW: 1.3})
    b = by_name(compare_frames(base, cand))[SLOW]
    assert b.status != REGRESSED
    if b.ratio > 1.05:
        assert "too few rounds" in b.note  # 3 vs 3 rounds can never reach p < 0.05


def test_improvement_is_reported_not_failed():
    cmp = compare_frames(frame(seed=1), frame(seed=2, slowdown={SLOW: 0.7}))
    assert by_name(cmp)[SLOW].status == IMPROVED and cmp.exit_code == 0


def test_ci_fallback_without_raw_samples():
    base, cand = frame(seed=1, save_data=False), frame(seed=2, save_data=False, slowdown={SLOW: 1.2})
    cmp = compare_frames(base, cand)
    assert [b.name.rsplit("::", 1)[-1] for b in cmp.regressions] == [SLOW]
    assert by_name(cmp)[SLOW].test == "ci-overlap"
    assert compare_frames(frame(seed=1, save_data=False), frame(seed=2, save_data=False)).exit_code == 0


def test_benchmarks_in_one_run_only_are_listed_not_failed():
    cases = report_synth.TRAINING_CASES
    cmp = compare_frames(frame(seed=1, cases=cases[:3], comm=False), frame(seed=2, cases=cases[1:4], comm=False))
    statuses = {k: b.status for k, b in by_name(cmp).items()}
    assert statuses[report_synth.bench_id(cases[0])] == ONLY_BASELINE
    assert statuses[report_synth.bench_id(cases[3])] == ONLY_CANDIDATE
    assert cmp.exit_code == 0


def test_disjoint_runs_are_unusable_input():
    cases = report_synth.TRAINING_CASES
    with pytest.raises(ResultsError, match="no benchmark in common"):
        compare_frames(frame(cases=cases[:1], comm=False), frame(cases=cases[1:2], comm=False))


def test_machine_mismatch_is_printed_first(tmp_path: Path, capsys):
    base = report_synth.make_run(tmp_path, number=1, seed=1)
    machine = report_synth.default_machine(driver="560.1", gpus=[{"name": "NVIDIA A100-SXM4-40GB"}] * 4)
    cand = report_synth.make_run(tmp_path, number=2, seed=2, machine=machine)
    md = tmp_path / "summary.md"
    assert main(["compare", str(base), str(cand), "--markdown", str(md)]) == 0
    captured = capsys.readouterr()
    warnings = captured.err.splitlines()
    assert warnings[0] == "warning: machines differ: gpu: baseline NVIDIA H100 80GB HBM3, candidate NVIDIA A100-SXM4-40GB"
    assert warnings[1] == "warning: machines differ: driver: baseline 550.54, candidate 560.1"
    text = md.read_text()
    assert text.index("machines differ") < text.index("| benchmark |")


def test_output_files(tmp_path: Path, capsys):
    base = report_synth.make_run(tmp_path / "results", number=1, seed=1)
    report_synth.make_run(tmp_path / "results", number=2, seed=2, slowdown={SLOW: 1.2})
    md, js, gab = tmp_path / "s.md", tmp_path / "s.json", tmp_path / "gab.json"
    # ids resolve against --results; BASELINE given as a file
    rc = main(["compare", str(base), "0002", "--results", str(tmp_path / "results"), "--threshold", "10%",
               "--markdown", str(md), "--json", str(js), "--github-action-benchmark", str(gab)])
    assert rc == 1
    data = json.loads(js.read_text())
    assert data["exit_code"] == 1 and data["threshold"] == 0.1
    assert [n.rsplit("::", 1)[-1] for n in data["regressions"]] == [SLOW]
    summary = md.read_text()
    assert "❌" in summary and r"test\_throughput\[ddp-mlp-w2\]" in summary  # Markdown-escaped
    entries = json.loads(gab.read_text())
    assert len(entries) == 15
    for e in entries:  # github-action-benchmark's customSmallerIsBetter: name, unit, value
        assert isinstance(e["name"], str) and e["unit"] == "s/step" and isinstance(e["value"], float)
    slow = next(e for e in entries if e["name"].endswith(SLOW))
    assert slow["value"] == pytest.approx(data["benchmarks"][0]["candidate_median_s"])


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.05", 0.05), ("12.5%", 0.125), ("0", 0.0)])
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "fast", "-3%", "nan"])
def test_parse_threshold_rejects(text):
    with pytest.raises(ResultsError, match="--threshold: expected a percentage like 5%"):
        parse_threshold(text)


def test_compare_frames_takes_one_run_per_side():
    two = pd.concat([frame(seed=1), frame(seed=2).assign(run_id="other/0002_x")])
    with pytest.raises(ResultsError, match="baseline: expected the benchmarks of one run, found 2 runs"):
        compare_frames(two, frame(seed=3))


OTHER = "test_throughput[dp-mlp-w2]"


def test_an_aa_run_raises_the_threshold_of_benchmarks_that_move_between_runs(tmp_path: Path, capsys):
    """SLOW moved 30% between two runs of the same code, so a 25% slowdown there is within its
    own A/A spread; OTHER held still, so its 20% slowdown is still a regression."""
    base = frame(seed=1)
    aa = frame(seed=2, slowdown={SLOW: 1.30})
    cand = frame(seed=3, slowdown={SLOW: 1.25, OTHER: 1.20})
    without = by_name(compare_frames(base, cand))
    assert without[SLOW].status == REGRESSED and without[OTHER].status == REGRESSED
    with_aa = by_name(compare_frames(base, cand, aa=[aa]))
    assert with_aa[SLOW].status != REGRESSED and "from the A/A run" in with_aa[SLOW].note
    assert with_aa[OTHER].status == REGRESSED
    # The same through the CLI, with --aa repeatable.
    paths = [report_synth.make_run(tmp_path, number=n, seed=n, slowdown=s)
             for n, s in ((1, None), (2, {SLOW: 1.30}), (3, {SLOW: 1.25, OTHER: 1.20}), (4, None))]
    assert main(["compare", str(paths[0]), str(paths[2]), "--aa", str(paths[1]), "--aa", str(paths[3])]) == 1
    out = capsys.readouterr().out
    regressed = [line for line in out.splitlines() if "REGRESSED" in line]
    assert len(regressed) == 1 and OTHER in regressed[0]
