"""``dpbench ab`` measures until its verdicts are settled: the loop with a fake look and fake rounds,
the job with a fake suite runner and judge (no pytest session, no worktree), the options' bad input,
and the simulation's small version."""

from __future__ import annotations

import importlib.util

import pytest

import dpbench.ab.job as job
from dpbench.ab.revisions import ABError, Revision
from dpbench.ab.settle import (
    LOOKS,
    LookResult,
    OpenCase,
    SettleOutcome,
    SettlePlan,
    end_line,
    next_target,
    parse_budget,
    parse_max_trials,
    until_settled,
)
from dpbench.cli import main
from validation.noise import CLEAN

PLAN = SettlePlan(trials=6, max_trials=18, budget_s=None, alpha=0.01)


class FakeLook:
    """Answers each look from a script: a list of open-case lists, the last one repeated."""

    def __init__(self, *answers: list[OpenCase], cases: int = 4) -> None:
        self.answers, self.cases, self.calls = list(answers), cases, []

    def __call__(self, base, head, alpha):
        self.calls.append((list(base), list(head), alpha))
        answer = self.answers[min(len(self.calls) - 1, len(self.answers) - 1)]
        return LookResult(cases=self.cases, open=tuple(answer))


class Clock:
    """A clock each round moves by ``round_s`` seconds."""

    def __init__(self, round_s: float = 10.0) -> None:
        self.now, self.round_s = 0.0, round_s

    def __call__(self) -> float:
        return self.now


def _settle(plan: SettlePlan, look: FakeLook, clock: Clock | None = None, first_rounds_s: float = 60.0):
    rounds, said = [], []
    clock = clock or Clock()

    def run_round(trial, selection):
        rounds.append((trial, list(selection)))
        clock.now += clock.round_s

    outcome = until_settled(
        plan,
        look=look,
        run_round=run_round,
        runs=lambda: (["b"] * (plan.trials + len(rounds)), ["h"] * (plan.trials + len(rounds))),
        started=0.0,
        first_rounds_s=first_rounds_s,
        say=said.append,
        clock=clock,
    )
    return outcome, rounds, said


def test_a_settled_job_stops_after_the_first_rounds():
    look = FakeLook([])
    outcome, rounds, said = _settle(PLAN, look)
    assert outcome == SettleOutcome(stopped="settled", open=(), rounds=6, looks=1)
    assert rounds == [] and said == []
    assert [alpha for *_, alpha in look.calls] == [0.01 / LOOKS]


def test_an_inconclusive_case_gets_more_rounds_and_only_it_runs():
    x = OpenCase(name="suites/test_throughput.py::test_throughput[mlp-ddp-w2]", pairs=9)
    look = FakeLook([x], [])
    outcome, rounds, said = _settle(PLAN, look)
    assert rounds == [(7, [x.name]), (8, [x.name]), (9, [x.name])]
    assert outcome == SettleOutcome(stopped="settled", open=(), rounds=9, looks=2)
    # The second look saw the 9 runs a side; every look judged at alpha / looks.
    assert [len(base) for base, _, _ in look.calls] == [6, 9]
    assert {alpha for *_, alpha in look.calls} == {0.01 / 3}
    assert said == [
        "1 of 4 cases inconclusive after 6 pairs: test_throughput[mlp-ddp-w2] (9 pairs); measuring only them "
        "to 9 pairs (look 2 of 3), about 8 s (10 s a round of all 4 cases)"
    ]


def test_the_maximum_stops_it_and_the_last_look_is_at_the_maximum():
    x = OpenCase(name="x", pairs=8)
    outcome, rounds, _ = _settle(PLAN, FakeLook([x]))
    assert [trial for trial, _ in rounds] == list(range(7, 19))
    assert outcome == SettleOutcome(stopped="max", open=(x,), rounds=18, looks=3)


def test_the_budget_stops_it():
    x = OpenCase(name="x", pairs=12)
    # 60 s gone before the first look; a round of x: 10 s; the budget leaves room for two.
    clock = Clock()
    clock.now = 60.0
    plan = SettlePlan(trials=6, max_trials=18, budget_s=85.0, alpha=0.01)
    outcome, rounds, _ = _settle(plan, FakeLook([x]), clock)
    assert [trial for trial, _ in rounds] == [7, 8]
    assert outcome == SettleOutcome(stopped="budget", open=(x,), rounds=8, looks=2)
    # No room for even one round: no more rounds, no more looks.
    clock.now = 84.0
    outcome, rounds, _ = _settle(plan, FakeLook([x]), clock)
    assert rounds == [] and outcome == SettleOutcome(stopped="budget", open=(x,), rounds=6, looks=1)


def test_next_target_follows_the_estimate_within_the_maximum():
    open_cases = [OpenCase(name="a", pairs=9), OpenCase(name="b", pairs=None), OpenCase(name="c", pairs=40)]
    assert next_target(6, open_cases[:2], max_trials=18, last=False) == 9
    assert next_target(6, open_cases, max_trials=18, last=False) == 18
    assert next_target(6, open_cases[1:2], max_trials=18, last=False) == 12  # no estimate: half what is left
    assert next_target(6, [OpenCase(name="a", pairs=4)], max_trials=18, last=False) == 7  # at least one more
    assert next_target(7, open_cases[:1], max_trials=18, last=True) == 18


def test_looks_and_their_alpha():
    assert PLAN.looks == 3 and PLAN.look_alpha == pytest.approx(0.01 / 3)
    assert SettlePlan(trials=6, max_trials=7, budget_s=None, alpha=0.01).looks == 2
    # No room for a second look: the whole alpha, as the fixed design.
    assert SettlePlan(trials=6, max_trials=6, budget_s=None, alpha=0.01).look_alpha == 0.01


def test_end_lines():
    x = OpenCase(name="x", pairs=None)
    settled = SettleOutcome(stopped="settled", open=(), rounds=9, looks=2)
    assert end_line(settled, PLAN, budget=None, trials=26, seconds=421) == (
        "until settled: every case settled; 9 pairs at most, 2 of 3 looks at alpha 0.01/3; 26 trials in 7 min 1 s"
    )
    stopped = SettleOutcome(stopped="max", open=(x,), rounds=18, looks=3)
    assert end_line(stopped, PLAN, budget=None, trials=36, seconds=59).startswith(
        "until settled: stopped at --max-trials 18 with 1 still inconclusive: x; 18 pairs at most"
    )
    spent = SettleOutcome(stopped="budget", open=(x,), rounds=8, looks=2)
    assert "stopped by --budget 10m with 1 still inconclusive: x;" in end_line(
        spent, PLAN, budget="10m", trials=16, seconds=600
    )


@pytest.mark.parametrize("raw, seconds", [("90s", 90), ("10m", 600), ("1h", 3600), ("1.5m", 90), (None, None)])
def test_budget_forms(raw, seconds):
    assert parse_budget(raw) == seconds


@pytest.mark.parametrize("raw", ["x", "10", "0s", "-5m", "10 min", ""])
def test_budget_that_does_not_parse(raw):
    with pytest.raises(ABError) as e:
        parse_budget(raw)
    assert str(e.value) == f"--budget: expected a duration such as 90s, 10m or 1h, found {raw!r}"


def test_max_trials():
    assert parse_max_trials(None, trials=6, min_pairs=2) == 18
    assert parse_max_trials(None, trials=1, min_pairs=2) == 3
    assert parse_max_trials("6", trials=6, min_pairs=2) == 6


@pytest.mark.parametrize(
    "args, error",
    [
        (["--budget", "soon"], "--budget: expected a duration such as 90s, 10m or 1h, found 'soon'"),
        (["--max-trials", "4"], "--max-trials: expected at least --trials (6), found '4'"),
        (
            ["--trials", "1", "--max-trials", "1"],
            "--max-trials: expected at least the gate's minimum of 2 pairs, found '1'",
        ),
        (["--max-trials", "many"], "--max-trials: expected an int >= --trials (6), found 'many'"),
        (
            ["--no-until-settled", "--budget", "10m"],
            "--budget: expected with --until-settled (the default), found --no-until-settled",
        ),
        (
            ["--no-compare", "--max-trials", "9"],
            "--max-trials: expected with --until-settled (the default), found --no-compare",
        ),
        (["--alpha", "2"], "--alpha: expected a probability in (0, 0.5], found '2'"),
    ],
)
def test_bad_input_is_one_line_and_nothing_starts(args, error, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # not even a checkout: the options are checked first
    assert main(["ab", "base", "head", *args]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"dpbench ab: error: {error}"]
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the job, with a fake suite runner and judge
CASES = [f"suites/test_throughput.py::test_throughput[{c}]" for c in ("mlp-ddp-w2", "lenet-ddp-w2", "tiny-ddp-w2")]


@pytest.fixture
def fake_job(tmp_path, monkeypatch):
    """``run_ab`` with the sides, the provenance and every invocation faked: each "trial" records its
    side, trial and selection and saves an empty run file where the real one would be."""
    invocations: list[tuple[str, int, list[str]]] = []

    def prepare(*, repo, revs, run_dir, envs, python=None, revisions):
        for side, rev in revs.items():
            storage = run_dir / side
            storage.mkdir(parents=True, exist_ok=True)
            revisions.append(Revision(side=side, rev=rev, commit="c" * 40, worktree=tmp_path, storage=storage))

    def run_trial(rev, trial, *, trials, pytest_args, logs, select=()):
        invocations.append((rev.side, trial, list(select)))
        path = rev.storage / f"{len(rev.runs):04d}_ab-{rev.side}-t{trial:02d}.json"
        path.write_text("{}")
        rev.runs.append(path)
        return path

    monkeypatch.setattr(job, "find_checkout", lambda directory: tmp_path)
    monkeypatch.setattr(job, "resolve_commit", lambda repo, rev: "c" * 40)
    monkeypatch.setattr(job, "prepare", prepare)
    monkeypatch.setattr(job, "cleanup", lambda repo, revisions: None)
    monkeypatch.setattr(job, "_collect_provenance", lambda revisions, aa, run_dir: {"lines": [], "warnings": []})
    monkeypatch.setattr(job, "_run_trial", run_trial)
    return invocations


def test_the_job_measures_only_the_open_case_then_judges_at_the_looks_alpha(fake_job, tmp_path, capsys):
    judged: list[list[str]] = []
    look = FakeLook([OpenCase(name=CASES[1], pairs=4)], [], cases=len(CASES))
    plan = SettlePlan(trials=2, max_trials=6, budget_s=None, alpha=0.01)
    code = job.run_ab(
        base="a",
        head="b",
        trials=2,
        workdir=tmp_path / "work",
        judge=lambda argv: judged.append(list(argv)) or 1,
        settle=plan,
        look=look,
    )
    assert code == 1
    # Two full rounds in ABBA order, then rounds 3 and 4 of the open case only, the order going on.
    assert fake_job == [
        ("base", 1, []),
        ("head", 1, []),
        ("head", 2, []),
        ("base", 2, []),
        ("base", 3, [CASES[1]]),
        ("head", 3, [CASES[1]]),
        ("head", 4, [CASES[1]]),
        ("base", 4, [CASES[1]]),
    ]
    assert [len(base) for base, _, _ in look.calls] == [2, 4]
    (argv,) = judged
    assert argv[-1] == f"--alpha={0.01 / 3!r}" and argv.count("--paired") == 1
    out = capsys.readouterr()
    assert (
        out.out.strip()
        .splitlines()[-1]
        .startswith("until settled: every case settled; 4 pairs at most, 2 of 3 looks at alpha 0.01/3; 8 trials in ")
    )
    assert (
        "1 of 3 cases inconclusive after 2 pairs: test_throughput[lenet-ddp-w2] (4 pairs); measuring only them"
        in out.err
    )


def test_without_settling_the_job_is_the_fixed_one(fake_job, tmp_path, capsys):
    judged: list[list[str]] = []
    code = job.run_ab(base="a", head="b", trials=2, workdir=tmp_path / "work", judge=lambda a: judged.append(a) or 0)
    assert code == 0 and len(fake_job) == 4
    assert not any(a.startswith("--alpha") for a in judged[0])
    assert "until settled" not in capsys.readouterr().out


# ---------------------------------------------------------------- the simulation, small
def _simulation():
    return importlib.import_module("validation.simulate_ab_settle")


def test_simulation_small():
    """python -m validation.simulate_ab_settle at 15 jobs of 8 cases: no false alarm in A/A, a +50% on two cases
    named in every job, and until settled spends its extra pairs only where the fixed design left cases open."""
    sim = _simulation()
    common = {"jobs": 15, "seed": 3, "benchmarks": 8, "trials": 4}
    settle = SettlePlan(trials=4, max_trials=12, budget_s=None, alpha=0.01)
    aa = sim.cell(CLEAN, slowed=0, effect=1.0, settle=settle, **common)
    assert not any(j.failed for j in aa)
    slowed = sim.cell(CLEAN, slowed=2, effect=1.5, settle=settle, **common)
    assert [j.named for j in slowed] == [2] * 15 and not any(j.false_named for j in slowed)
    fixed = sim.cell(CLEAN, slowed=2, effect=1.5, settle=None, **common)
    assert all(j.case_pairs == 8 * 4 for j in fixed)
    # Beyond the first rounds only the open cases are measured: fewer pairs than every case at the rounds run.
    assert all(f.case_pairs <= s.case_pairs < 8 * s.rounds or s.rounds == 4 for s, f in zip(slowed, fixed))


def test_simulation_main_prints_both_designs_per_cell(capsys):
    """The program itself, at 20 jobs of 4 cases: a row per cell and design; the fixed design
    measures every case the first rounds' pairs and no more."""
    argv = ["--jobs", "20", "--benchmarks", "4", "--trials", "4"]
    assert importlib.import_module("validation.simulate_ab_settle").main(argv) == 0
    out = capsys.readouterr().out
    rows = [
        line.split(" | ") for line in out.splitlines() if line.startswith("| A/A |") or line.startswith("| 3 cases")
    ]
    assert [(row[0], row[1]) for row in rows] == [
        (cell, design)
        for cell in ("| A/A", "| 3 cases +10%", "| 3 cases +20%")
        for design in ("until settled", "fixed")
    ]
    fixed = [row for row in rows if row[1] == "fixed"]
    assert all(row[6] == "4.0" and row[7] == "16" for row in fixed)  # 4 rounds, 4 cases x 4 pairs
    assert all(float(row[6]) >= 4.0 for row in rows)  # until settled starts with the same 4 rounds
