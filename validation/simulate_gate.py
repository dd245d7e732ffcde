#!/usr/bin/env python
"""Simulate the regression gate from a noise model: false alarms of A/A jobs, power of A/B jobs.

Every simulated job goes through the real ``dpbench.gate.family.judge_family`` (what
``dpbench compare`` and ``dpbench ab`` call), with sides drawn by ``validation.noise``.
Seeded: the same arguments print the same numbers.

    python -m validation.simulate_gate --fit RUN [RUN ...] [--save-model model.json]   # fit the model from saved runs
    python -m validation.simulate_gate [--model model.json | --scenario clean|uniform|jumpy|quick-runs|history-runs]
                                       [--jobs 1000]
                             [--power] [--broad [--broad-jobs N]]
                             [--alpha 0.01] [--aa-runs N]   # N --aa runs of the baseline for compare

A RUN is what ``dpbench compare`` accepts (a file, a directory, an id under --results). Fit from
two or more clean runs of one commit on one machine (``python -m validation.aa_check`` makes four).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from dpbench.ab.job import DEFAULT_TRIALS as AB_PAIRS
from dpbench.gate.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD
from dpbench.gate.family import Item, judge_family
from dpbench.gate.verdicts import Verdict
from validation.noise import (
    MODELS,
    TrialNoiseModel,
    draw_case_params,
    draw_side,
    draw_sides,
    fit_noise_model,
    level_for,
)

THRESHOLD, ALPHA = DEFAULT_THRESHOLD, DEFAULT_ALPHA  # what `dpbench compare` does by default


def interval(hits: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson 95% interval of a rate."""
    from scipy.stats import beta

    lo = float(beta.ppf(0.025, hits, n - hits + 1)) if hits else 0.0
    hi = float(beta.ppf(0.975, hits + 1, n - hits)) if hits < n else 1.0
    return lo, hi


def one_job(
    model: TrialNoiseModel,
    rng: random.Random,
    *,
    benchmarks: int,
    trials: int,
    paired: bool,
    target_effect: float = 1.0,
    target_sd: float | None = None,
    machine: float = 1.0,
    aa_runs: int = 0,
    alpha: float = ALPHA,
    null: str | None = None,
) -> tuple[bool, Verdict]:
    """One simulated gate run; → (did the job fail, the verdict on case 0, the one that may have changed).

    Unpaired: one run of ``trials`` trials a side (``dpbench compare BASE CAND``). Paired: ``trials``
    one-trial runs a side, run i of each side sharing the machine's offset (``dpbench ab``). ``null``:
    test against "no change" or "threshold" instead of the gate's own rule (None)."""
    cases = draw_case_params(model, rng, benchmarks)
    if target_sd is not None:
        cases[0] = type(cases[0])(
            trial_sd=target_sd, case_run_sd=cases[0].case_run_sd, level=level_for(model, target_sd)
        )
    effects = [target_effect / machine] + [1.0] * (benchmarks - 1)
    base, cand = draw_sides(model, cases, rng, trials=trials, paired=paired, effects=effects, machine=machine)
    aa = [
        dict((f"b{i}", p) for i, p in enumerate(draw_side(model, cases, rng, runs=1, trials=trials)))
        for _ in range(aa_runs)
    ]
    items = [Item(name=f"b{i}", base=b, cand=c) for i, (b, c) in enumerate(zip(base, cand))]
    judged, family = judge_family(
        items,
        threshold=THRESHOLD,
        alpha=alpha,
        paired=paired,
        aa=aa,
        aa_base={f"b{i}": b for i, b in enumerate(base)},
        null=null,
    )
    failed = family.broad == "regression" or any(b.verdict == Verdict.REGRESSED for b in judged)
    return failed, next(b.verdict for b in judged if b.name == "b0")


def rate(model: TrialNoiseModel, *, jobs: int, seed: int, **kwargs) -> tuple[int, int, int]:
    """(jobs that failed, jobs where case 0 was REGRESSED, jobs) over ``jobs`` seeded jobs."""
    rng = random.Random(seed)
    failed = caught = 0
    for _ in range(jobs):
        f, verdict = one_job(model, rng, **kwargs)
        failed += f
        caught += verdict == Verdict.REGRESSED
    return failed, caught, jobs


def _pct(hits: int, n: int) -> str:
    lo, hi = interval(hits, n)
    return f"{hits}/{n} = {hits / n:.1%} [{lo:.1%}, {hi:.1%}]"


def targets(
    model: TrialNoiseModel,
    *,
    jobs: int,
    seed: int,
    benchmarks: int,
    trials: int,
    paired_too: bool = True,
    pairs: int = AB_PAIRS,
    **kwargs,
) -> None:
    """``kwargs`` (``alpha``, ``aa_runs``) go to every job; ``--aa`` runs apply to compare only; paired ab
    has ``pairs`` pairs of one-trial runs (``dpbench ab``'s default)."""
    side_trials = trials
    print(f"model: {json.dumps(model.to_dict())}")
    print(
        f"{benchmarks} benchmarks, {trials} trials a side for compare, {pairs} pairs for paired ab, threshold "
        f"{THRESHOLD:.0%}, "
        f"alpha {kwargs.get('alpha', ALPHA)} (Holm), {kwargs.get('aa_runs', 0)} --aa runs for compare; "
        f"null: {kwargs.get('null') or 'the gate rule'}; 95% Clopper-Pearson intervals"
    )
    for paired in (False, True) if paired_too else (False,):
        kw = {**kwargs, "aa_runs": 0} if paired else kwargs
        what = "paired ab" if paired else "compare"
        trials = pairs if paired else side_trials
        sys.stdout.flush()
        f, _, n = rate(model, jobs=jobs, seed=seed, benchmarks=benchmarks, trials=trials, paired=paired, **kw)
        print(f"  {what:10} A/A jobs failing:                         {_pct(f, n)}")
        for k, cv in enumerate((0.05, 0.02)):  # seed + 1 for CV 5% (as before CV 2% was added)
            _, c, n = rate(
                model,
                jobs=jobs,
                seed=seed + 1 + 3 * k,
                benchmarks=benchmarks,
                trials=trials,
                paired=paired,
                target_effect=1.25,
                target_sd=cv,
                **kw,
            )
            print(f"  {what:10} +25% on one case of CV {cv:.0%} caught:          {_pct(c, n)}")
        _, c, n = rate(
            model,
            jobs=jobs,
            seed=seed + 2,
            benchmarks=benchmarks,
            trials=trials,
            paired=paired,
            target_effect=1.5,
            machine=1.12,
            **kw,
        )
        print(
            f"  {what:10} +50% with the control +12% caught:        {_pct(c, n)}  (the case's CV drawn from the model)"
        )
        _, c, n = rate(
            model,
            jobs=jobs,
            seed=seed + 4,
            benchmarks=benchmarks,
            trials=trials,
            paired=paired,
            target_effect=1.5,
            machine=1.12,
            target_sd=0.05,
            **kw,
        )
        print(f"  {what:10} +50% with the control +12%, CV 5%, caught: {_pct(c, n)}")
        f, _, n = rate(
            model, jobs=jobs, seed=seed + 3, benchmarks=benchmarks, trials=trials, paired=paired, machine=1.12, **kw
        )
        print(f"  {what:10} machine +12%, code unchanged, jobs failing: {_pct(f, n)}")


def power_table(
    model: TrialNoiseModel,
    *,
    jobs: int,
    seed: int,
    benchmarks: int,
    alpha: float = ALPHA,
    aa_runs: int = 0,
    paired_too: bool = True,
    null: str | None = None,
) -> None:
    cvs, trial_counts, effects = (0.02, 0.05, 0.10, 0.20), (3, 5, 10), (1.15, 1.25, 1.5, 2.0)
    for paired in (False, True) if paired_too else (False,):
        aa = 0 if paired else aa_runs
        print(
            f"\npower ({'paired ab: trials = pairs of one-trial runs' if paired else 'compare: one run a side'}, "
            f"{aa} --aa runs; null: {null or 'the gate rule'}; "
            f"share of {jobs} jobs in which one case of the given CV, among {benchmarks}, is flagged)"
        )
        print("| CV | trials | " + " | ".join(f"+{e - 1:.0%}" for e in effects) + " |")
        print("|---|---|" + "---|" * len(effects))
        for cv in cvs:
            for n in trial_counts:
                cells = []
                for k, e in enumerate(effects):
                    _, c, total = rate(
                        model,
                        jobs=jobs,
                        seed=seed + 100 * k + n,
                        benchmarks=benchmarks,
                        trials=n,
                        paired=paired,
                        target_effect=e,
                        target_sd=cv,
                        alpha=alpha,
                        aa_runs=aa,
                        null=null,
                    )
                    cells.append(f"{c / total:.0%}")
                print(f"| {cv:.0%} | {n} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fit", nargs="+", metavar="RUN", help="fit the noise model from these saved runs and print it")
    p.add_argument("--results", default="results", help="where run ids resolve (default results/)")
    p.add_argument("--save-model", metavar="FILE", help="with --fit: also write the model as JSON")
    p.add_argument("--model", metavar="FILE", help="simulate from this fitted model (JSON from --save-model)")
    p.add_argument(
        "--scenario",
        choices=tuple(MODELS),
        default="clean",
        help="built-in model when no --model: clean (provisional), uniform (clean with every case's "
        "between-run offset alike), jumpy (a few cases jumping between sessions), quick-runs or history-runs "
        "(the two models fitted on the development VM after the fresh-helper fix)",
    )
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--benchmarks", type=int, default=70)
    p.add_argument("--trials", type=int, default=5, help="compare: trials a side (the quick profile's 5)")
    p.add_argument(
        "--pairs",
        type=int,
        default=AB_PAIRS,
        help=f"paired ab: pairs of one-trial runs (dpbench ab's default {AB_PAIRS})",
    )
    p.add_argument(
        "--broad",
        action="store_true",
        help="also print the broad-change table (10/50/100%% of the cases slowed 25/50%%, with and "
        "without the machine moving too; --broad-jobs jobs a cell)",
    )
    p.add_argument("--broad-jobs", type=int, default=300)
    p.add_argument(
        "--broad-targets", action="store_true", help="--broad: only A/A, the machine +12%%, half +50%%, all +25%%"
    )
    p.add_argument("--power", action="store_true", help="also print the power table (CV × trials × effect)")
    p.add_argument("--power-jobs", type=int, default=200)
    p.add_argument(
        "--power-compare-only",
        "--compare-only",
        action="store_true",
        help="compare only: no paired-ab lines (the targets and the power table)",
    )
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--alpha", type=float, default=ALPHA, help=f"the gate's --alpha (default {ALPHA})")
    p.add_argument(
        "--aa-runs",
        type=int,
        default=0,
        help="compare targets: also give the gate this many --aa runs of the baseline's commit",
    )
    p.add_argument(
        "--null",
        choices=("gate", "no-change", "threshold"),
        default="gate",
        help="what the one-sided tests are against: the gate's own rule (default), or, to weigh the "
        "rule it does not use, always no change / always the threshold",
    )
    args = p.parse_args(argv)
    null = None if args.null == "gate" else args.null.replace("-", " ")
    if args.fit:
        from dpbench.results.frame import runs_frame
        from dpbench.results.load import read_run, resolve_run

        frames = [runs_frame([read_run(resolve_run(spec, results_dir=args.results))]) for spec in args.fit]
        model = fit_noise_model(frames, source=f"fitted from {', '.join(args.fit)}")
        print(
            json.dumps(
                {
                    **model.to_dict(),
                    **model.percentiles(),
                    "fitted": {k: v for k, v in model.fitted.items() if not isinstance(v, dict)},
                },
                indent=1,
            )
        )
        if args.save_model:
            Path(args.save_model).write_text(json.dumps(model.to_dict(), indent=1) + "\n")
        return 0
    if args.model:
        model = TrialNoiseModel(**json.loads(Path(args.model).read_text()))
    else:
        model = MODELS[args.scenario]
    started = time.perf_counter()
    if args.jobs > 0:
        targets(
            model,
            jobs=args.jobs,
            seed=args.seed,
            benchmarks=args.benchmarks,
            trials=args.trials,
            alpha=args.alpha,
            aa_runs=args.aa_runs,
            paired_too=not args.power_compare_only,
            null=null,
            pairs=args.pairs,
        )
    if args.broad:
        from validation.gate_broad import broad_table

        broad_table(
            model,
            jobs=args.broad_jobs,
            seed=args.seed,
            benchmarks=args.benchmarks,
            trials=args.trials,
            pairs=args.pairs,
            threshold=THRESHOLD,
            alpha=args.alpha,
            paired_too=not args.power_compare_only,
            targets_only=args.broad_targets,
            pct=_pct,
        )
    if args.power:
        power_table(
            model,
            jobs=args.power_jobs,
            seed=args.seed,
            benchmarks=args.benchmarks,
            alpha=args.alpha,
            aa_runs=args.aa_runs,
            paired_too=not args.power_compare_only,
            null=null,
        )
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
