#!/usr/bin/env python
"""The per-job candidates on stored real runs: every pair of configurations of every question,
judged on its paired trials by each rule of :mod:`validation.simulate_job_level` at 10% split over
the question's pairs (Bonferroni), and how often the hull (the t-interval widened to hold the
median log paired ratio) had to widen at all. Where it never does, the hull claims what the
t-interval claims, and only the printed interval could differ.

    python -m validation.interval_rules [RUN.json[.gz] ...]   (default: the stored real runs in tests/)

Without the decision's guards (busy trials, spread past the noise), which come before any rule:
this counts what each interval says of the trials, not what the decision would claim.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import math
import tempfile
from pathlib import Path

from validation.simulate_job_level import INTERVALS, excludes_zero

ROOT = Path(__file__).resolve().parents[1]
STORED = (
    ROOT / "tests" / "gate" / "data" / "quick-throughput.json.gz",
    ROOT / "tests" / "data" / "quick-run-disturbed-trial.json.gz",
    ROOT / "tests" / "gate" / "data" / "aa-contended-base.json.gz",
    ROOT / "tests" / "gate" / "data" / "aa-contended-same.json.gz",
)
LEVEL = 0.9


def _questions(path: Path) -> list[list[tuple[float, ...]]]:
    """Each question's configurations' throughputs per trial, as the decision reads them."""
    from dpbench.report.data import report_data
    from dpbench.results.frame import load_runs

    with tempfile.TemporaryDirectory() as work:
        if path.suffix == ".gz":  # the stored runs are compressed; dpbench reads plain JSON
            plain = Path(work) / path.stem
            plain.write_bytes(gzip.decompress(path.read_bytes()))
            path = plain
        decision = report_data(load_runs([str(path)])).decided()
    return [[tuple(s.entry.throughputs) for s in answer.standings] for answer in decision.answers]


def judge(path: Path) -> dict[str, int]:
    """Counts for one run: questions, pairs judged, claims per rule, pairs the hull widened."""
    counts = {"questions": 0, "pairs": 0, "widened": 0, **{rule: 0 for rule in INTERVALS}}
    for question in _questions(path):
        counts["questions"] += 1
        alpha = (1 - LEVEL) / max(1, len(question) * (len(question) - 1) // 2)
        for a, b in itertools.combinations(question, 2):
            kept = [(x, y) for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y) and x > 0 and y > 0]
            if len(kept) < 2:
                continue
            xs, ys = zip(*kept)
            counts["pairs"] += 1
            bounds = {rule: interval(xs, ys, alpha) for rule, interval in INTERVALS.items()}
            counts["widened"] += bounds["hull"] != bounds["t"]
            for rule, b in bounds.items():
                counts[rule] += excludes_zero(b)
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m validation.interval_rules", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", type=Path, help="saved runs (.json or .json.gz); default: the stored real runs")
    args = p.parse_args(argv)
    runs = args.runs or list(STORED)
    missing = [str(r) for r in runs if not r.is_file()]
    if missing:
        p.error(f"no such run: {', '.join(missing)}")
    claims = f"claims at {1 - LEVEL:.0%} / pairs: t / hull / median"
    print(f"| run | questions | pairs | {claims} | pairs the hull widened |")
    print("|---|---|---|---|---|")
    for run in runs:
        c = judge(run)
        rules = f"{c['t']} / {c['hull']} / {c['median']}"
        print(f"| {run.name} | {c['questions']} | {c['pairs']} | {rules} | {c['widened']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
