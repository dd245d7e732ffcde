"""The regression gate: every verdict from a constructed case, pooling and exit codes.

Its warnings, output files and arguments are tested in ``test_compare_format.py``.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from _compare_helpers import OTHER, SLOW, by_name, frame, frames, set_trials

from dpbench.cli import main
from dpbench.errors import UsageError
from dpbench.gate import Verdict
from dpbench.gate.compare import compare_frames
from dpbench.results import ResultsError
from validation import synthetic_runs
from validation.synthetic_runs import comm_id


# ---------------------------------------------------------------- regressed, unchanged, improved
def test_injected_40_percent_slowdown_exits_1_naming_it(tmp_path: Path, capsys):
    base = synthetic_runs.make_run(tmp_path, number=1, seed=1, timelines=False)
    cand = synthetic_runs.make_run(tmp_path, number=2, seed=2, slowdown={SLOW: 1.4}, timelines=False)
    assert main(["compare", str(base), str(cand), "--json", str(tmp_path / "c.json")]) == 1  # two-positional form
    out = capsys.readouterr().out
    family = json.loads((tmp_path / "c.json").read_text())["family"]
    assert family["prior_slope"] != 0.0  # 15 cases: the prior's centre follows their level
    assert f"sd of logs {family['prior_spread']:.2f}, {family['prior_slope']:+.2f} per log of the step time)" in out
    lines = out.splitlines()
    assert lines[0] == (
        "FAIL: 1 regressed, 0 improved, 0 inconclusive, 14 unchanged; false-alarm rate ≤ 1% per job "
        "(Holm over 15 cases and the broad tests); exit 1: a regression"
    )
    assert "regressed = slower than the machine's move by > 10.0% with p < 0.01 after Holm" in out
    regressed = [line for line in lines if "REGRESSED" in line]
    # The test function once, in the header; the row names the case.
    assert len(regressed) == 1 and regressed[0].startswith("ddp-mlp-w2 ") and lines.index(regressed[0]) == 4
    assert lines[3].startswith("test_throughput[…] ")
    # The test is named once, on the last line, not on every row.
    assert out.count("moderated test on log trials + between-run") == 1
    assert lines[-1].startswith("test: moderated test on log trials + between-run;")
    assert "15 distinct cases tested (trials; Holm: family-wise false-alarm rate ≤ 0.01)" in out
    assert "6 vs 6" in regressed[0]
    assert "not shown: 14 unchanged (--all lists them)" in lines


def test_a_real_change_below_the_threshold_is_unchanged():
    # Low noise, many trials: the 5% slowdown is real and plainly significant, but below 10%.
    kwargs = dict(trials=10, trial_cv=0.005, noise=0.005)
    base, cand = frame(seed=1, **kwargs), frame(seed=2, slowdown={SLOW: 1.05}, **kwargs)
    b = by_name(compare_frames(base, cand))[SLOW]
    assert b.verdict == Verdict.UNCHANGED and b.ratio == pytest.approx(1.05, abs=0.01)
    # ... and the same change fails a 2% threshold: the threshold, not the noise, decided.
    assert by_name(compare_frames(base, cand, threshold=0.02))[SLOW].verdict == Verdict.REGRESSED


def test_improvement_is_reported_not_failed():
    cmp = compare_frames(frame(seed=1), frame(seed=2, slowdown={SLOW: 0.6}))
    assert by_name(cmp)[SLOW].verdict == Verdict.IMPROVED and cmp.exit_code == 0


# ---------------------------------------------------------------- inconclusive
def test_slower_but_too_few_trials_is_inconclusive_with_the_counts():
    base = set_trials(synthetic_runs.make_doc(seed=1), SLOW, [0.010, 0.013])
    cand = set_trials(synthetic_runs.make_doc(seed=2), SLOW, [0.0125, 0.016])
    cmp = compare_frames(frames(base), frames(cand))
    b = by_name(cmp)[SLOW]
    assert b.ratio == pytest.approx(0.01425 / 0.0115)  # +24%: beyond the threshold by the medians
    assert b.verdict == Verdict.INCONCLUSIVE and b.p_adjusted >= 0.05
    assert b.excess == pytest.approx(b.ratio / cmp.family.median_shift, rel=0.05)  # the others' median, ~the median
    assert b.note.startswith(f"slower by {(b.excess - 1) * 100:+.1f}% beyond the machine (the other benchmarks moved ")
    assert "controls +0.0%) but not significant: p = " in b.note
    assert "after Holm over 15 cases and the broad tests, with 2 vs 2 trials" in b.note
    assert cmp.exit_code == 0  # inconclusive is reported, not failed


def test_a_slowdown_the_control_explains_is_inconclusive_and_says_what_the_control_did():
    base = frame(seed=1)
    cand = frame(seed=2, slowdown={SLOW: 1.4}, control_shift=1.3)  # the whole machine got 30% slower
    cmp = compare_frames(base, cand)
    b = by_name(cmp)[SLOW]
    assert b.verdict == Verdict.INCONCLUSIVE and b.control_ratio == pytest.approx(1.3, abs=0.02)
    assert "but controls moved +30.0%" in b.note and "the machine changed, not (only) the code" in b.note
    assert cmp.family.shift_basis == "controls"
    assert any(w.startswith("the controls of all benchmarks moved +3") for w in cmp.warnings)
    assert cmp.exit_code == 0
    # The same slowdown with a steady control is a regression, and no warning is raised.
    steady = compare_frames(base, frame(seed=2, slowdown={SLOW: 1.4}))
    assert by_name(steady)[SLOW].verdict == Verdict.REGRESSED
    assert not any("controls of all benchmarks" in w for w in steady.warnings)


def test_the_control_informs_it_does_not_veto():
    """+50% on top of a machine that made everything, controls included, 12% slower: +50% beyond the
    machine (the other benchmarks' median), regressed, and the note says what the machine did."""
    machine = {synthetic_runs.bench_id(c): 1.12 for c in synthetic_runs.TRAINING_CASES}
    machine.update({comm_id(size): 1.12 for size in synthetic_runs.COMM_SIZES})
    cand = frame(seed=2, slowdown={**machine, SLOW: 1.5 * 1.12}, control_shift=1.12)
    cmp = compare_frames(frame(seed=1), cand)
    b = by_name(cmp)[SLOW]
    assert b.verdict == Verdict.REGRESSED and cmp.exit_code == 1
    assert cmp.family.shift_basis == "benchmarks" and cmp.family.control_shift == pytest.approx(1.12, abs=0.01)
    assert b.excess == pytest.approx(1.5, rel=0.05) and b.ratio == pytest.approx(1.68, rel=0.05)
    assert b.note.startswith(
        f"slower by {(b.excess - 1) * 100:+.1f}% beyond the machine (the other benchmarks moved +1"
    )
    assert (
        f"p = {b.p_value:.2g} against no change, {b.p_adjusted:.2g} after Holm over 15 cases and the broad tests"
        in b.note
    )
    assert [x.name for x in cmp.regressions] == [b.name]  # the machine's +12% flags nothing else
    # Only the controls moved +12% (the benchmarks did not): within the threshold of each other, the
    # benchmarks' median is the machine, and the slowdown is judged beyond it (+50%), not beyond the controls.
    cmp = compare_frames(frame(seed=1), frame(seed=2, slowdown={SLOW: 1.5}, control_shift=1.12))
    b = by_name(cmp)[SLOW]
    assert cmp.family.shift_basis == "benchmarks" and b.verdict == Verdict.REGRESSED
    assert b.excess == pytest.approx(1.5, rel=0.05)


def test_everything_slower_with_a_steady_control_is_a_regression_of_everything():
    slow_all = {synthetic_runs.bench_id(c): 1.3 for c in synthetic_runs.TRAINING_CASES}
    cmp = compare_frames(frame(seed=1), frame(seed=2, slowdown=slow_all))
    assert cmp.family.median_shift == pytest.approx(1.3, abs=0.05)
    assert cmp.family.control_shift == pytest.approx(1.0, abs=0.01)
    assert {b.name.rsplit("::", 1)[-1] for b in cmp.regressions} == set(slow_all)
    assert cmp.family.shift_basis == "controls" and cmp.family.broad_change == pytest.approx(1.3, abs=0.05)


# ---------------------------------------------------------------- incomparable, missing, new
def test_schema_1_without_steps_per_round_is_incomparable_never_compared():
    base = synthetic_runs.make_doc(seed=1, schema=1)
    for bench in base["benchmarks"]:
        if bench["name"] == SLOW:
            del bench["extra_info"]["steps_per_round"]
    cmp = compare_frames(frames(base), frame(seed=2, slowdown={SLOW: 3.0}))
    b = by_name(cmp)[SLOW]
    assert b.verdict == Verdict.INCOMPARABLE and math.isnan(b.ratio)
    assert b.note.startswith("baseline: schema-1 training benchmark without steps_per_round")
    assert cmp.exit_code == 0 and cmp.counts["incomparable"] == 1
    assert any(w.startswith("schemas differ: baseline 1, candidate 2") for w in cmp.warnings)


def test_missing_fails_unless_allowed_and_new_is_listed(tmp_path: Path, capsys):
    cases = synthetic_runs.TRAINING_CASES
    base = synthetic_runs.make_run(tmp_path, number=1, seed=1, cases=cases[:3], comm=False)
    cand = synthetic_runs.make_run(tmp_path, number=2, seed=2, cases=cases[1:4], comm=False)
    assert main(["compare", str(base), str(cand)]) == 1
    out = capsys.readouterr().out
    assert "1 missing, 1 new" in out and "exit 1: benchmarks missing from the candidate (--allow-missing" in out
    assert main(["compare", str(base), str(cand), "--allow-missing"]) == 0
    out = capsys.readouterr().out
    assert "exit 0: no regression" in out.splitlines()[0]
    lines = out.splitlines()
    function = synthetic_runs.bench_id(cases[0]).split("[")[0]
    table = lines[lines.index(next(line for line in lines if line.startswith(f"{function}[…] "))) + 1 :]
    rows = {f"{function}[{line.split()[0]}]": line.split()[-1] for line in table[:2]}
    assert rows[synthetic_runs.bench_id(cases[0])] == "missing"
    assert rows[synthetic_runs.bench_id(cases[3])] == "new"


def test_disjoint_sides_are_unusable_input():
    cases = synthetic_runs.TRAINING_CASES
    with pytest.raises(ResultsError, match="no benchmark in common"):
        compare_frames(frame(cases=cases[:1], comm=False), frame(cases=cases[1:2], comm=False))


# ---------------------------------------------------------------- several runs per side
def test_a_side_pools_the_trials_of_its_runs():
    docs = [synthetic_runs.make_doc(seed=s, trials=2) for s in (1, 2, 3)]
    pooled_times = [
        t for d in docs for b in d["benchmarks"] if b["name"] == SLOW for t in b["extra_info"]["trials"]["step_time_s"]
    ]
    cmp = compare_frames(frames(*docs), frames(synthetic_runs.make_doc(seed=4, trials=3, slowdown={SLOW: 1.4})))
    b = by_name(cmp)[SLOW]
    assert (b.baseline_trials, b.candidate_trials) == (6, 3)
    assert b.baseline_s == pytest.approx(statistics.median(pooled_times))
    assert b.verdict == Verdict.REGRESSED


def test_runs_of_one_trial_each_are_tested_across_runs_not_rounds():
    base = frames(*(synthetic_runs.make_doc(seed=s, trials=1) for s in range(4)))
    cand = frames(*(synthetic_runs.make_doc(seed=10 + s, trials=1, slowdown={SLOW: 1.4}) for s in range(4)))
    b = by_name(compare_frames(base, cand))[SLOW]
    assert (b.baseline_trials, b.candidate_trials, b.test) == (4, 4, "moderated test on log trials")
    assert b.verdict == Verdict.REGRESSED


def test_one_trial_a_side_is_inconclusive_never_a_test_on_rounds():
    cmp = compare_frames(frame(seed=1, trials=1, rounds=10), frame(seed=2, trials=1, rounds=10, slowdown={SLOW: 1.4}))
    b = by_name(cmp)[SLOW]
    assert b.verdict == Verdict.INCONCLUSIVE and b.test == "" and math.isnan(b.p_value)
    assert b.note == "needs ≥ 2 trials a side (found 1 vs 1); the rounds of one process are no sample"
    assert cmp.exit_code == 0 and cmp.counts["inconclusive"] == 15


def test_collectives_are_gated_on_the_workers_time_per_call():
    # Schema 2: the trials say +40%; the rounds of stats.data say nothing changed.
    base, cand = synthetic_runs.make_doc(seed=1), synthetic_runs.make_doc(seed=1)
    name = comm_id(65536)
    bench = next(b for b in cand["benchmarks"] if b["name"] == name)
    times = [t * 1.4 for t in bench["extra_info"]["trials"]["step_time_s"]]
    set_trials(cand, name, times, bench["extra_info"]["trials"]["control_s"])
    bench["extra_info"]["time_s"] = statistics.median(times)
    b = by_name(compare_frames(frames(base), frames(cand)))[name]
    assert b.unit == "s/call" and b.ratio == pytest.approx(1.4) and b.verdict == Verdict.REGRESSED
    # Schema 1: time_s, never round time / iters_per_round (the rounds were timed in the caller).
    base1, cand1 = synthetic_runs.make_doc(seed=1, schema=1), synthetic_runs.make_doc(seed=1, schema=1)
    bench1 = next(b for b in cand1["benchmarks"] if b["name"] == name)
    bench1["extra_info"]["time_s"] *= 1.4
    b1 = by_name(compare_frames(frames(base1), frames(cand1)))[name]
    assert b1.ratio == pytest.approx(1.4)
    assert b1.baseline_s == next(x for x in base1["benchmarks"] if x["name"] == name)["extra_info"]["time_s"]
    # ... and with one trial and no worker-timed rounds there is nothing to test: no claim.
    assert b1.test == "" and b1.verdict == Verdict.INCONCLUSIVE and b1.note.startswith("needs ≥ 2 trials a side")


@pytest.mark.parametrize("what", ["schema", "machine"])
def test_a_side_of_mixed_runs_is_unusable_input(tmp_path: Path, capsys, what):
    a = synthetic_runs.make_run(tmp_path, number=1, seed=1, timelines=False)
    other = dict(schema=1) if what == "schema" else dict(machine=synthetic_runs.default_machine(torch="2.14.0"))
    b = synthetic_runs.make_run(tmp_path, number=2, seed=2, timelines=False, **other)
    c = synthetic_runs.make_run(tmp_path, number=3, seed=3, timelines=False)
    assert main(["compare", "--baseline", str(a), str(b), "--candidate", str(c)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    if what == "schema":
        assert "baseline: runs of different schema versions" in err and "schema 1" in err and "schema 2" in err
    else:
        assert "baseline: runs from different machines (torch:" in err and "2.14.0" in err
    # Another host of the same kind (machine fields equal) pools fine.
    d = synthetic_runs.make_run(
        tmp_path, number=4, seed=4, timelines=False, machine=synthetic_runs.default_machine(node="gpu-runner-2")
    )
    assert main(["compare", "--baseline", str(a), str(d), "--candidate", str(c)]) == 0


def test_the_same_run_twice_in_a_side_is_refused(tmp_path: Path, capsys):
    a = synthetic_runs.make_run(tmp_path, number=1, seed=1, timelines=False)
    assert main(["compare", "--baseline", str(a), str(a), "--candidate", str(a)]) == 2
    assert "given twice" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "A"],
        ["compare", "A", "B", "C"],
        ["compare", "--baseline", "A"],
        ["compare", "A", "--candidate", "B"],
    ],
)
def test_the_two_forms_of_compare_do_not_mix(tmp_path: Path, capsys, argv):
    for spec in ("A", "B", "C"):
        synthetic_runs.make_run(tmp_path, number=1, name=spec, timelines=False, machine_id=f"m{spec}")
    files = {spec: str(next(tmp_path.glob(f"m{spec}/*.json"))) for spec in ("A", "B", "C")}
    assert main([files.get(a, a) for a in argv]) == 2
    assert (
        "expected BASELINE CANDIDATE, or --baseline RUN [RUN ...] --candidate RUN [RUN ...]" in capsys.readouterr().err
    )


def test_an_unknown_run_id_lists_the_runs_that_exist(tmp_path: Path, capsys):
    results = tmp_path / "results"
    synthetic_runs.make_run(results, number=1, name="base", timelines=False)
    synthetic_runs.make_run(results, number=2, name="head", timelines=False)
    for argv in (
        ["compare", "0009", "--results", str(results)],
        ["compare", "0001", "0009", "--results", str(results)],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert (
            "run '0009'" in err
            and f"{synthetic_runs.MACHINE_ID}/0001_base, {synthetic_runs.MACHINE_ID}/0002_head" in err
        )
        assert err.count("\n") == 1


# ---------------------------------------------------------------- A/A runs, pairing
def test_an_aa_run_widens_the_between_run_spread_of_benchmarks_that_move_between_runs(tmp_path: Path, capsys):
    """SLOW moved 45% between two runs of the same code, so a 40% slowdown there is within its
    own A/A spread; OTHER held still, so its 40% slowdown is still a regression."""
    base = frame(seed=1)
    aa = frame(seed=2, slowdown={SLOW: 1.45})
    cand = frame(seed=3, slowdown={SLOW: 1.4, OTHER: 1.4})
    without = by_name(compare_frames(base, cand))
    assert without[SLOW].verdict == Verdict.REGRESSED and without[OTHER].verdict == Verdict.REGRESSED
    with_aa = compare_frames(base, cand, aa=[aa])
    assert by_name(with_aa)[SLOW].verdict == Verdict.INCONCLUSIVE
    assert by_name(with_aa)[OTHER].verdict == Verdict.REGRESSED
    assert not math.isnan(with_aa.family.between_run_sd_aa)
    # The same through the CLI, with --aa repeatable.
    paths = [
        synthetic_runs.make_run(tmp_path, number=n, seed=n, slowdown=s, timelines=False)
        for n, s in ((1, None), (2, {SLOW: 1.45}), (3, {SLOW: 1.4, OTHER: 1.4}), (4, None))
    ]
    assert main(["compare", str(paths[0]), str(paths[2]), "--aa", str(paths[1]), "--aa", str(paths[3])]) == 1
    out = capsys.readouterr().out
    regressed = [line for line in out.splitlines() if "REGRESSED" in line]
    assert len(regressed) == 1 and regressed[0].startswith(OTHER.split("[")[1].rstrip("]") + " ")
    assert "measured by the --aa runs" in out and "used per case" in out


def test_an_aa_run_from_another_machine_is_unusable_input(tmp_path: Path, capsys):
    a = synthetic_runs.make_run(tmp_path, number=1, seed=1, timelines=False)
    b = synthetic_runs.make_run(tmp_path, number=2, seed=2, timelines=False)
    other = synthetic_runs.make_run(
        tmp_path, number=3, seed=3, timelines=False, machine=synthetic_runs.default_machine(torch="2.14.0")
    )
    assert main(["compare", str(a), str(b), "--aa", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--aa run from another machine than the baseline (torch: baseline 2.13.0" in err


def test_paired_needs_as_many_runs_a_side():
    with pytest.raises(UsageError, match="--paired: expected as many baseline runs as candidate runs, found 2 and 1"):
        compare_frames(
            frames(synthetic_runs.make_doc(seed=1, trials=1), synthetic_runs.make_doc(seed=2, trials=1)),
            frame(seed=3, trials=1),
            paired=True,
        )
