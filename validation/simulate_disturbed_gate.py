#!/usr/bin/env python
"""Simulate A/A gate jobs in which the machine disturbs some trials (1 in 50 by default), with the
disturbances drawn from a real run's disturbed trials: false alarms per job with every trial as
measured, with disturbed trials left out, and with them measured again (validation.noise).
Seeded: the same arguments print the same numbers.

    python -m validation.simulate_disturbed_gate [--run RUN] [--scenario clean|jumpy] [--jobs 1000] [--rate 0.02]

RUN: a saved run with disturbed trials (default: tests/data/quick-run-disturbed-trial.json.gz).
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
import time
from pathlib import Path

from dpbench.gate.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD
from dpbench.results.frame import runs_frame
from dpbench.results.load import read_run
from validation.noise import ARMS, MODELS, aa_false_alarms, measured_disturbances

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_RUN = ROOT / "tests" / "data" / "quick-run-disturbed-trial.json.gz"


def _frame(path: Path):
    if path.suffix != ".gz":
        return runs_frame([read_run(path)])
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "m" / "0001_run.json"
        plain.parent.mkdir()
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        return runs_frame([read_run(plain)])


def _interval(hits: int, n: int) -> tuple[float, float]:
    from scipy.stats import beta

    lo = float(beta.ppf(0.025, hits, n - hits + 1)) if hits else 0.0
    hi = float(beta.ppf(0.975, hits + 1, n - hits)) if hits < n else 1.0
    return lo, hi


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, default=DEFAULT_RUN)
    p.add_argument("--scenario", choices=("clean", "jumpy"), default="clean")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--benchmarks", type=int, default=70)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--rate", type=float, default=1 / 50, help="share of trials disturbed (default 1 in 50)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    found = measured_disturbances(_frame(args.run))
    if not found:
        print(f"--run: expected a run with disturbed trials, found none in {args.run}", file=sys.stderr)
        return 2
    shown = ", ".join(f"{d.control:.2g}/{d.step:.2g}" for d in found)
    print(f"{len(found)} measured disturbances (control/step factors): {shown}")
    started = time.monotonic()
    got = aa_false_alarms(
        MODELS[args.scenario],
        found,
        jobs=args.jobs,
        benchmarks=args.benchmarks,
        trials=args.trials,
        rate=args.rate,
        threshold=DEFAULT_THRESHOLD,
        alpha=DEFAULT_ALPHA,
        seed=args.seed,
    )
    planned = 2 * args.jobs * args.benchmarks * args.trials
    print(
        f"{args.jobs} A/A jobs ({args.scenario}), {args.benchmarks} benchmarks x {args.trials} trials a side, "
        f"{got['disturbed']} of {planned} trials disturbed ({got['disturbed'] / planned:.2%}), "
        f"alpha {DEFAULT_ALPHA}, threshold {DEFAULT_THRESHOLD:.0%}, seed {args.seed}, "
        f"{time.monotonic() - started:.0f} s"
    )
    for arm in ARMS:
        lo, hi = _interval(got[arm], args.jobs)
        rate = f"{got[arm]}/{args.jobs} = {got[arm] / args.jobs:.1%} [{lo:.1%}, {hi:.1%}]"
        print(f"  {arm:<11} false alarms per job: {rate}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
