#!/usr/bin/env python
"""Simulate ``dpbench ab`` measuring until settled against its fixed design: false alarms, pairs, named cases.

Every simulated job runs the real loop (``dpbench.ab.settle.until_settled``: the looks, where the next
one falls, the alpha each judges at) with the real gate (``dpbench.gate.family.judge_family``, the
paired test) and the gate's next-step estimate (``dpbench.gate.next_step.plan``); only the suites are
drawn, pair by pair, from the gate's noise model (``validation.noise``: each round one machine
offset shared by its base and head trial). Seeded: the same arguments print the same numbers.

    python -m validation.simulate_ab_settle [--jobs 1000] [--benchmarks 20] [--trials 6] [--max-trials 18]
                                  [--regressed 3] [--scenario clean|jumpy|quick-runs|history-runs] [--seed 51]

Cells: A/A (nothing changed) and a few cases slowed 10% and 20%, each measured until settled
(``--trials`` first rounds, at most ``--max-trials`` pairs, every look at alpha / looks) and fixed
(``--trials`` pairs at the whole alpha: ``--no-until-settled``).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass

from dpbench.ab.job import DEFAULT_TRIALS
from dpbench.ab.settle import MAX_TRIALS_FACTOR, LookResult, OpenCase, SettlePlan, until_settled
from dpbench.gate.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD
from dpbench.gate.family import Item, judge_family
from dpbench.gate.judge import Pooled
from dpbench.gate.next_step import plan as next_plan
from dpbench.gate.verdicts import Verdict
from validation.noise import MODELS, draw_case_params, draw_side


@dataclass(frozen=True, kw_only=True)
class Job:
    """One simulated job's result."""

    failed: bool
    """any case ``regressed`` or the broad regression: the job's exit 1"""
    named: int
    """planted cases called ``regressed``"""
    false_named: int
    """unchanged cases called ``regressed``"""
    rounds: int
    """ABBA rounds (the most pairs a case got)"""
    case_pairs: int
    """pairs summed over the cases: what the suites' time is spent on"""
    open_left: int
    """cases still inconclusive at the verdict"""


def one_job(
    model, rng: random.Random, *, benchmarks: int, slowed: int, effect: float, settle: SettlePlan | None, trials: int
) -> Job:
    """Cases ``0 .. slowed-1`` are ``effect`` slower on the head side; ``settle`` None: the fixed design."""
    cases = draw_case_params(model, rng, benchmarks)
    effects = [effect if i < slowed else 1.0 for i in range(benchmarks)]
    base = [Pooled(unit="s/step", runs=[], control_runs=[], case_key=f"case{i}") for i in range(benchmarks)]
    head = [Pooled(unit="s/step", runs=[], control_runs=[], case_key=f"case{i}") for i in range(benchmarks)]
    last: dict = {}

    def run_round(_trial: int, selection) -> None:
        chosen = [int(name[1:]) for name in selection]
        shared = [rng.gauss(0, model.run_sd)]
        sub = [cases[i] for i in chosen]
        b = draw_side(model, sub, rng, runs=1, trials=1, shared_offsets=shared)
        h = draw_side(model, sub, rng, runs=1, trials=1, shared_offsets=shared, effects=[effects[i] for i in chosen])
        for i, bb, hh in zip(chosen, b, h):
            base[i].runs += bb.runs
            base[i].control_runs += bb.control_runs
            head[i].runs += hh.runs
            head[i].control_runs += hh.control_runs

    def look(_base, _head, alpha: float) -> LookResult:
        items = [Item(name=f"b{i}", base=base[i], cand=head[i]) for i in range(benchmarks)]
        judged, family = judge_family(items, threshold=DEFAULT_THRESHOLD, alpha=alpha, paired=True)
        last.update(judged=judged, family=family)
        open_cases = []
        for b in judged:
            if b.verdict == Verdict.INCONCLUSIVE:
                step = next_plan(b, alpha=alpha, family_size=family.size, method="paired")
                open_cases.append(OpenCase(name=b.name, pairs=step.count if step else None))
        return LookResult(cases=family.size, open=tuple(open_cases))

    everyone = [f"b{i}" for i in range(benchmarks)]
    for trial in range(1, trials + 1):
        run_round(trial, everyone)
    if settle is None:
        look((), (), DEFAULT_ALPHA)
    else:
        ticks = iter(range(10**9))
        until_settled(
            settle,
            look=look,
            run_round=run_round,
            runs=lambda: ((), ()),
            started=0.0,
            first_rounds_s=float(trials),
            say=lambda _line: None,
            clock=lambda: float(next(ticks)),
        )
    judged, family = last["judged"], last["family"]
    regressed = {int(b.name[1:]) for b in judged if b.verdict == Verdict.REGRESSED}
    return Job(
        failed=bool(regressed) or family.broad == "regression",
        named=sum(1 for i in regressed if i < slowed),
        false_named=sum(1 for i in regressed if i >= slowed),
        rounds=max(len(p.runs) for p in base),
        case_pairs=sum(len(p.runs) for p in base),
        open_left=sum(1 for b in judged if b.verdict == Verdict.INCONCLUSIVE),
    )


def cell(model, *, jobs: int, seed: int, **kwargs) -> list[Job]:
    rng = random.Random(seed)
    return [one_job(model, rng, **kwargs) for _ in range(jobs)]


def _rate(hits: int, n: int) -> str:
    from scipy.stats import beta

    lo = float(beta.ppf(0.025, hits, n - hits + 1)) if hits else 0.0
    hi = float(beta.ppf(0.975, hits + 1, n - hits)) if hits < n else 1.0
    return f"{hits / n:.1%} [{lo:.1%}, {hi:.1%}]"


def row(name: str, design: str, found: list[Job], *, slowed: int) -> str:
    n = len(found)
    named = f"{sum(j.named for j in found) / (n * slowed):.0%}" if slowed else "–"
    all_named = f"{sum(j.named == slowed for j in found) / n:.0%}" if slowed else "–"
    false = sum(j.false_named > 0 or (not slowed and j.failed) for j in found)
    return (
        f"| {name} | {design} | {_rate(sum(j.failed for j in found), n)} | {_rate(false, n)} | {named} | "
        f"{all_named} | {sum(j.rounds for j in found) / n:.1f} | {sum(j.case_pairs for j in found) / n:.0f} | "
        f"{sum(j.open_left > 0 for j in found) / n:.0%} |"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000, help="simulated jobs a cell (default 1000)")
    p.add_argument("--benchmarks", type=int, default=20, help="cases a job (default 20)")
    p.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help=f"first rounds (default {DEFAULT_TRIALS})")
    p.add_argument("--max-trials", type=int, help=f"most pairs a case (default {MAX_TRIALS_FACTOR} × --trials)")
    p.add_argument("--regressed", type=int, default=3, help="cases slowed in the A/B cells (default 3)")
    p.add_argument("--effects", default="1.1,1.2", help="their slowdowns, comma-separated (default 1.1,1.2)")
    p.add_argument("--scenario", choices=tuple(MODELS), default="clean", help="the gate's noise model")
    p.add_argument("--seed", type=int, default=51)
    args = p.parse_args(argv)
    model = MODELS[args.scenario]
    max_trials = args.max_trials or MAX_TRIALS_FACTOR * args.trials
    settle = SettlePlan(trials=args.trials, max_trials=max_trials, budget_s=None, alpha=DEFAULT_ALPHA)
    print(
        f"{args.scenario} model, {args.benchmarks} cases, {args.jobs} jobs a cell, threshold {DEFAULT_THRESHOLD:.0%}; "
        f"until settled: {args.trials} first rounds, at most {max_trials} pairs, {settle.looks} looks at alpha "
        f"{DEFAULT_ALPHA:g}/{settle.looks}; fixed: {args.trials} pairs at alpha {DEFAULT_ALPHA:g}; 95% Clopper-Pearson"
    )
    print(
        "\n| cell | design | jobs failing | jobs with an unchanged case regressed | planted cases named | "
        "jobs naming all | rounds | case-pairs | jobs left inconclusive |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    started = time.perf_counter()
    cells = [("A/A", 0, 1.0)] + [
        (f"{args.regressed} cases +{float(e) - 1:.0%}", args.regressed, float(e)) for e in args.effects.split(",")
    ]
    for k, (name, slowed, effect) in enumerate(cells):
        for design, plan in (("until settled", settle), ("fixed", None)):
            found = cell(
                model,
                jobs=args.jobs,
                seed=args.seed + k,
                benchmarks=args.benchmarks,
                slowed=slowed,
                effect=effect,
                settle=plan,
                trials=args.trials,
            )
            print(row(name, design, found, slowed=slowed), flush=True)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
