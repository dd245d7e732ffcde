#!/usr/bin/env python
"""What does the fingerprint add to a case's time? First trials with and without it, interleaved.

A case records its fingerprint in its first trial (``TrainingCase.measure_trial(first=True)``):
one untimed ``Run.fingerprint()`` after the probe. Each pair here measures that first trial of
one case twice in fresh workers — once as the suites run it, once with ``Run.fingerprint`` hidden
for the duration of the call (the trial then records none: it asks ``hasattr(run, "fingerprint")``)
— the order alternating between pairs (ABBA) so neither always runs first. Printed per case:

* the wall time of each trial (launch to close: probe, fingerprint, warm-up, timed rounds, control,
  case metrics) and with ÷ without per pair, with the median and range over pairs, their geometric
  mean (over an even number of pairs it cancels the order effect) and the order effect itself;
* the fingerprint call's own wall time and its share of the trial it ran in (the direct reading:
  on a shared machine the pair's ratio carries the machine's noise, the share does not), and of the
  case: that first trial plus the profile's other trials, each as long as one later trial measured
  in the same pair (no case metrics, no fingerprint);
* each trial's step time (its median timed step): the fingerprint runs outside every timed step,
  so with ÷ without should differ only by the machine's noise;
* the load average before and after each pair, and the cores.

    .venv/bin/python -m benchmarks.fingerprint_overhead [--pairs 5] [--json out.json] \\
        [--cases ddp:mlp:2,fsdp:transformer:2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from dpbench.launcher.run import Run
from dpbench.measure import TrainingCase, resolve_profile

_FINGERPRINT = Run.fingerprint
_CALLS: list[float] = []


def _timed_fingerprint(self: Run) -> dict:
    start = time.perf_counter()
    try:
        return _FINGERPRINT(self)
    finally:
        _CALLS.append(time.perf_counter() - start)


def _later_trial(case: TrainingCase, profile) -> float:
    """Wall seconds of a later trial of ``case`` (no case metrics, no fingerprint)."""
    start = time.perf_counter()
    case.measure_trial(profile, trial=1, steps_per_round=None, timeline=None, first=False)
    return time.perf_counter() - start


def _trial(case: TrainingCase, profile, *, fingerprint: bool) -> dict:
    """One first trial of ``case``; with ``fingerprint=False`` Run has no fingerprint method meanwhile."""
    _CALLS.clear()
    if fingerprint:
        Run.fingerprint = _timed_fingerprint
    else:
        del Run.fingerprint
    try:
        start = time.perf_counter()
        trial = case.measure_trial(profile, trial=0, steps_per_round=None, timeline=None, first=True)
        wall = time.perf_counter() - start
    finally:
        Run.fingerprint = _FINGERPRINT
    recorded = "fingerprint" in (trial.case_metrics or {})
    if recorded != fingerprint:
        sys.exit(f"{case.id}: fingerprint recorded={recorded}, expected {fingerprint}")
    return {"wall_s": wall, "step_s": trial.value, "fingerprint_s": sum(_CALLS) if fingerprint else None}


def _case(spec: str) -> TrainingCase:
    strategy, workload, world = spec.split(":")
    return TrainingCase(strategy=strategy, workload=workload, world_size=int(world), global_batch=64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--cases", default="ddp:mlp:2,fsdp:transformer:2", help="strategy:workload:world_size,…")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    import torch

    profile = resolve_profile(cuda_count=torch.cuda.device_count(), cpu_count=os.cpu_count(), environ=dict(os.environ))
    cases = [_case(spec) for spec in args.cases.split(",")]
    print(f"profile {profile.name.value}, device {profile.device}, {os.cpu_count()} cores, batch 64")
    out: dict = {"profile": profile.name.value, "cores": os.cpu_count(), "cases": {}}
    for case in cases:
        _trial(case, profile, fingerprint=True)  # untimed: imports, the forkserver helper, caches
        pairs = []
        for i in range(args.pairs):
            load_before = os.getloadavg()
            order = (True, False) if i % 2 == 0 else (False, True)
            got = {mode: _trial(case, profile, fingerprint=mode) for mode in order}
            later = _later_trial(case, profile)
            load_after = os.getloadavg()
            with_fp, without = got[True], got[False]
            # The case's time: its first trial (the one with the fingerprint) and the profile's other trials.
            case_s = with_fp["wall_s"] + (profile.trials - 1) * later
            pair = {
                "with": with_fp,
                "without": without,
                "wall_ratio": with_fp["wall_s"] / without["wall_s"],
                "step_ratio": with_fp["step_s"] / without["step_s"],
                "fingerprint_share": with_fp["fingerprint_s"] / with_fp["wall_s"],
                "later_trial_s": later,
                "case_share": with_fp["fingerprint_s"] / case_s,
                "load_1min": [load_before[0], load_after[0]],
            }
            pairs.append(pair)
            print(
                f"{case.id} pair {i + 1}: with {with_fp['wall_s']:.2f} s, without {without['wall_s']:.2f} s "
                f"({pair['wall_ratio']:.3f}×); fingerprint {with_fp['fingerprint_s'] * 1e3:.1f} ms "
                f"= {pair['fingerprint_share']:.2%} of its trial, {pair['case_share']:.2%} of the case "
                f"({profile.trials} trials); step time with ÷ without {pair['step_ratio']:.3f}; "
                f"load {load_before[0]:.2f} → {load_after[0]:.2f}"
            )
        walls = [p["wall_ratio"] for p in pairs]
        # ABBA: half the pairs run the trial with the fingerprint first. The geometric mean over an even
        # number of pairs cancels an order effect (the first trial of a pair slower or faster); the
        # order effect itself is the square root of with-first ÷ without-first.
        logs = [math.log(r) for r in walls]
        first_with = [x for i, x in enumerate(logs) if i % 2 == 0]
        first_without = [x for i, x in enumerate(logs) if i % 2 == 1]
        order_effect = (
            math.exp((statistics.fmean(first_with) - statistics.fmean(first_without)) / 2) if first_without else None
        )
        shares = [p["fingerprint_share"] for p in pairs]
        case_shares = [p["case_share"] for p in pairs]
        steps = [p["step_ratio"] for p in pairs]
        summary = {
            "wall_ratio_median": statistics.median(walls),
            "wall_ratio_range": [min(walls), max(walls)],
            "wall_ratio_geometric_mean": math.exp(statistics.fmean(logs)),
            "order_effect": order_effect,
            "fingerprint_share_median": statistics.median(shares),
            "fingerprint_share_max": max(shares),
            "case_share_median": statistics.median(case_shares),
            "case_share_max": max(case_shares),
            "fingerprint_ms_median": statistics.median(p["with"]["fingerprint_s"] for p in pairs) * 1e3,
            "step_ratio_median": statistics.median(steps),
            "pairs": pairs,
        }
        out["cases"][case.id] = summary
        print(
            f"{case.id}: trial with ÷ without, median {summary['wall_ratio_median']:.3f} "
            f"(range {min(walls):.3f}–{max(walls):.3f}), geometric mean {summary['wall_ratio_geometric_mean']:.3f} "
            f"(order effect, first of a pair ÷ second: {order_effect or math.nan:.3f}); "
            "the fingerprint's share of its trial: median "
            f"{summary['fingerprint_share_median']:.2%}, max {summary['fingerprint_share_max']:.2%}; "
            f"of the case: median {summary['case_share_median']:.2%}, max {summary['case_share_max']:.2%}; "
            f"step time with ÷ without, median {summary['step_ratio_median']:.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
