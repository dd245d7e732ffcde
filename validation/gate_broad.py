"""Broad changes for ``python -m validation.simulate_gate --broad``: a share of the cases slowed together.

A change of the code that touches most of a suite (a slower optimizer step, convolution, allreduce or
library) moves many cases at once; a slower machine moves every case *and* the controls. Each simulated
job draws both sides from a noise model (:mod:`validation.noise`), slows the first
``share`` of the cases by ``effect`` (their controls untouched) and moves everything, controls
included, by ``machine``; it goes through the real :func:`dpbench.gate.family.judge_family`. Case 0 is
one of the slowed cases with a trial spread of CV 5% (a steady case), so the table can say how often a
steady slowed case is flagged; and how often a job names at least :data:`NAMED_SHARE` of its slowed
cases ``regressed`` (what a user reads the job for: which cases slowed).
"""

from __future__ import annotations

import random
from dataclasses import replace

from dpbench.gate.family import Item, judge_family
from dpbench.gate.verdicts import Verdict
from validation.noise import TrialNoiseModel, draw_case_params, draw_sides, level_for

__all__ = ["broad_job", "broad_table"]

STEADY_CV = 0.05
SHARES = (0.1, 0.5, 1.0)
EFFECTS = (1.25, 1.5)
MACHINES = (1.0, 1.12)
NAMED_SHARE = 0.8  # a job "names" its slowed cases when at least this share of them is regressed


def broad_job(
    model: TrialNoiseModel,
    rng: random.Random,
    *,
    benchmarks: int,
    trials: int,
    paired: bool,
    share: float,
    effect: float,
    machine: float,
    threshold: float,
    alpha: float,
) -> tuple[bool, bool, str, float]:
    """One job → (did it fail, was case 0 — slowed, CV 5% — regressed, the job's broad verdict, the
    share of the slowed cases regressed: NaN with none slowed)."""
    cases = draw_case_params(model, rng, benchmarks)
    slowed = round(share * benchmarks)
    if slowed:
        cases[0] = replace(cases[0], trial_sd=STEADY_CV, level=level_for(model, STEADY_CV))
    effects = [effect if i < slowed else 1.0 for i in range(benchmarks)]
    base, cand = draw_sides(model, cases, rng, trials=trials, paired=paired, effects=effects, machine=machine)
    items = [Item(name=f"b{i}", base=b, cand=c) for i, (b, c) in enumerate(zip(base, cand))]
    judged, family = judge_family(items, threshold=threshold, alpha=alpha, paired=paired)
    failed = family.broad == "regression" or any(b.verdict == Verdict.REGRESSED for b in judged)
    named = sum(b.verdict == Verdict.REGRESSED for b in judged[:slowed]) / slowed if slowed else float("nan")
    return failed, bool(slowed) and judged[0].verdict == Verdict.REGRESSED, family.broad, named


def broad_table(
    model: TrialNoiseModel,
    *,
    jobs: int,
    seed: int,
    benchmarks: int,
    trials: int,
    pairs: int,
    threshold: float,
    alpha: float,
    paired_too: bool = True,
    targets_only: bool = False,
    pct,
) -> None:
    """Print, per design, the share of failing jobs and of steady slowed cases flagged for every scenario."""
    print(
        f"\nbroad changes ({jobs} jobs a cell, {benchmarks} cases; compare: one run of {trials} trials a side; "
        f"paired ab: {pairs} pairs; threshold {threshold:.0%}, alpha {alpha}; the slowed CV-{STEADY_CV:.0%} case "
        "is one of the slowed cases)"
    )
    print(
        "| design | cases slowed | by | machine (controls too) | jobs failing | passing jobs inconclusive "
        f"(`unsettled`) | slowed CV-5% case flagged | jobs naming ≥ {NAMED_SHARE:.0%} of the slowed |"
    )
    print("|---|---|---|---|---|---|---|---|")
    scenarios = [(0.0, 1.0, 1.0), (0.0, 1.0, 1.12)] + [(s, e, m) for s in SHARES for e in EFFECTS for m in MACHINES]
    if targets_only:  # the targets: A/A, the machine alone, half the cases +50%, every case +25%
        scenarios = [(0.0, 1.0, 1.0), (0.0, 1.0, 1.12), (0.5, 1.5, 1.0), (1.0, 1.25, 1.0)]
    for paired in (False, True) if paired_too else (False,):
        design = f"paired ab, {pairs} pairs" if paired else "compare"
        for share, effect, machine in scenarios:
            rng = random.Random(hash((seed, share, effect, machine, paired)) & 0xFFFFFFFF)
            failed = flagged = unsettled = named = 0
            for _ in range(jobs):
                f, c, broad, share_named = broad_job(
                    model,
                    rng,
                    benchmarks=benchmarks,
                    trials=pairs if paired else trials,
                    paired=paired,
                    share=share,
                    effect=effect,
                    machine=machine,
                    threshold=threshold,
                    alpha=alpha,
                )
                failed += f
                flagged += c
                unsettled += not f and broad == "unsettled"
                named += share_named >= NAMED_SHARE
            # Paired sides ran interleaved on one machine: a move of everything, the controls too, is
            # theirs (another environment), a change the paired gate must catch, not the machine's.
            moved = f"{machine - 1:+.0%}" + (" (the sides')" if paired and machine != 1 else "")
            print(
                f"| {design} | {share:.0%} | {'–' if not share else f'+{effect - 1:.0%}'} | {moved} | "
                f"{pct(failed, jobs)} | {unsettled} | {pct(flagged, jobs) if share else '–'} | "
                f"{pct(named, jobs) if share else '–'} |",
                flush=True,
            )
