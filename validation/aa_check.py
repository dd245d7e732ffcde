#!/usr/bin/env python
"""A/A check of the gate on this machine: N clean runs of this checkout, every pair compared.

Runs the suites N times (default 4) back to back into a storage directory of their own (never
results/), then ``dpbench compare`` with defaults on all N·(N−1)/2 pairs, and prints one line per
pair (exit code, verdict counts, what regressed), each case's between-run jump (largest ÷
smallest run median), and the noise model fitted from the N runs (``python -m validation.simulate_gate
--model`` simulates from it). Needs an idle machine for numbers that mean anything.

    python -m validation.aa_check [--runs 4] [--storage DIR] [-- PYTEST ARGS ...]
    # a tiny check:
    DPBENCH_TRIALS=2 python -m validation.aa_check --runs 2 -- -k "test_collective and 4KiB and all_reduce"

Exit 0 when every pair exits 0; 1 when one does not; 2 on a failed suite run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_suites(storage: Path, runs: int, pytest_args: list[str]) -> list[Path]:
    saved = []
    for i in range(1, runs + 1):
        name = f"aa{i}"
        started = time.monotonic()
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "suites/",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--benchmark-save={name}",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save-data",
            *pytest_args,
        ]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            print(
                f"aa_check: run {i} failed (pytest exit {proc.returncode}):\n"
                f"{proc.stdout[-3000:]}{proc.stderr[-2000:]}",
                file=sys.stderr,
            )
            raise SystemExit(2)
        (path,) = storage.glob(f"*/[0-9][0-9][0-9][0-9]_{name}.json")
        saved.append(path)
        print(f"run {i}: {time.monotonic() - started:.0f} s → {path}", flush=True)
    return saved


JUMP_DRAWS = 2000


def expected_jumps(frames: list, threshold: float, *, draws: int = JUMP_DRAWS, seed: int = 0) -> float:
    """How many cases would pass ``threshold`` (largest ÷ smallest run median) with no run-to-run offset
    at all, only their own trials' spread: each case's within-run sd of log trial times (pooled over
    the runs), its runs' trial counts, the median of each simulated run's trials. Simulated rather
    than a formula: the largest ÷ smallest of N medians of small samples has no tidy closed form.
    A count near the observed one says the jumps are the trials' noise; far below it, the runs moved."""
    import numpy as np

    rng = np.random.default_rng(seed)
    per_case: dict[str, list] = {}
    for frame in frames:
        for name, times in zip(frame["fullname"], frame["trial_times"]):
            if times:
                per_case.setdefault(name, []).append(np.log(np.asarray(times, dtype=float)))
    total = 0.0
    for runs in per_case.values():
        if len(runs) != len(frames) or len(runs) < 2:
            continue
        variances = [r.var(ddof=1) for r in runs if len(r) >= 2]
        sd = float(np.sqrt(np.mean(variances))) if variances else 0.0
        medians = np.stack([np.median(rng.normal(0.0, sd, (draws, len(r))), axis=1) for r in runs])
        total += float(np.mean(np.exp(medians.max(axis=0) - medians.min(axis=0)) > threshold))
    return total


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    tail = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--storage", help="where the runs go (default: a new directory under the temp dir)")
    p.add_argument("--reuse", action="store_true", help="compare the runs already in --storage, run nothing")
    args = p.parse_args(argv)
    storage = Path(args.storage or tempfile.mkdtemp(prefix="dpbench-aa-")).resolve()
    storage.mkdir(parents=True, exist_ok=True)
    print(
        f"A/A check: {args.runs} runs into {storage}; DPBENCH_TRIALS={os.environ.get('DPBENCH_TRIALS', '(profile)')}; "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    paths = (
        sorted(storage.glob("*/[0-9][0-9][0-9][0-9]_aa*.json")) if args.reuse else run_suites(storage, args.runs, tail)
    )
    from dpbench.gate.compare import compare_runs
    from dpbench.gate.formats import display_names
    from dpbench.results.frame import runs_frame
    from dpbench.results.load import read_run
    from validation.noise import fit_noise_model

    worst = 0
    print(f"\n{'pair':<8}{'exit':>5}  counts / regressed")
    for a, b in itertools.combinations(range(len(paths)), 2):
        cmp = compare_runs(paths[a], paths[b])
        worst = max(worst, cmp.exit_code)
        short = display_names([x.name for x in cmp.benchmarks])
        counts = ", ".join(f"{k} {v}" for k, v in cmp.counts.items() if v)
        flagged = ", ".join(f"{short[x.name]} {(x.ratio - 1) * 100:+.0f}%" for x in cmp.regressions)
        print(f"{a + 1}-{b + 1:<6}{cmp.exit_code:>5}  {counts}{'; REGRESSED: ' + flagged if flagged else ''}")
    frames = [runs_frame([read_run(path)]) for path in paths]
    jumps = {}
    for frame in frames:
        for name, step in zip(frame["fullname"], frame["step_time_s"]):
            if step > 0:
                jumps.setdefault(name, []).append(step)
    ratios = sorted(((max(v) / min(v), n) for n, v in jumps.items() if len(v) == len(paths)), reverse=True)
    short = display_names([n for _, n in ratios])
    print("\nbetween-run jump of each case's level (largest / smallest run median; target ≤ 1.10), worst first:")
    for ratio, name in ratios[:15]:
        print(f"  {ratio:6.3f}  {short[name]}")
    expected = expected_jumps(frames, 1.10)
    print(
        f"  ... {sum(r > 1.10 for r, _ in ratios)} of {len(ratios)} cases above 1.10; from each case's own "
        f"trial spread alone (no run-to-run offset; {JUMP_DRAWS:,} simulated sets of {len(paths)} runs, seed 0) "
        f"expect {expected:.1f}"
    )
    model = None
    if len(paths) >= 2:
        try:
            model = fit_noise_model(frames, source=f"aa_check, {len(paths)} runs in {storage}")
        except ValueError as exc:  # a selection of one or two cases is too few to fit spreads across cases
            print(f"\nno noise model fitted from these runs: {exc}")
    if model is not None:
        print("\nnoise model fitted from these runs (log-scale sds):")
        print(json.dumps({**model.to_dict(), **{k: v for k, v in model.percentiles().items()}}, indent=1))
        (storage / "noise_model.json").write_text(json.dumps(model.to_dict(), indent=1) + "\n")
        print(f"(saved to {storage / 'noise_model.json'}: python -m validation.simulate_gate --model that file)")
    print(f"\n{'all pairs exit 0' if worst == 0 else 'a pair failed'}")
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
