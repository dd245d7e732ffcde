#!/usr/bin/env python
"""A real regression for ``dpbench ab`` to find: every ``F.relu`` 3 ms slower on the head side.

Makes a scratch clone of this checkout's HEAD with one commit on top that wraps
``torch.nn.functional.relu`` to sleep 3 ms per call (in the clone's ``dpbench/workloads/__init__.py``,
which every worker imports to build its model: ``nn.ReLU`` calls ``F.relu``; the transformer uses
GELU), then runs ``dpbench ab`` on the throughput suite, quick profile, both sides with this
interpreter (no environments are made), measuring until settled; then the A/A (base against itself).

Target: the A/B exits 1 with at least 12 of the 14 mlp/lenet cases ``regressed`` and no transformer
case, its last line stating the trials and the time; the A/A exits 0. Needs a quiet machine for
about 30 minutes (two jobs of a few minutes to tens of minutes each).

    .venv/bin/python -m validation.ab_relu [--trials 6] [--max-trials 18] [--budget 20m] [--keep]
                                           [--select EXPR] [--jobs both|ab|aa]

``--select`` narrows the throughput suite to pytest's ``-k EXPR`` (a smoke run of this program; the
target above is the whole suite's, so a narrowed run reports what it found and judges the target
only on the cases it ran).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dpbench.ab.job import parse_trials
from dpbench.ab.revisions import ABError
from dpbench.ab.settle import parse_budget, parse_max_trials

REPO = Path(__file__).resolve().parents[1]

SLOW_RELU = """

# validation.ab_relu: every F.relu 3 ms slower (this scratch clone's head commit only).
def _slow_relu():
    import functools
    import time

    import torch.nn.functional as F

    relu = F.relu

    @functools.wraps(relu)
    def slow(*args, **kwargs):
        time.sleep(0.003)
        return relu(*args, **kwargs)

    F.relu = slow


_slow_relu()
"""
SUITE_ENV = {"DPBENCH_PROFILE": "quick"}
SELECTION = "test_throughput"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=validate", "-c", "user.email=v@example.invalid", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout.strip()


def scratch_clone(root: Path) -> Path:
    """Clone of this checkout's HEAD, tagged ``relu-base``, and ``relu-head`` = it + the slow relu."""
    clone = root / "repo"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(clone)], check=True, timeout=300)
    _git(clone, "tag", "relu-base")
    init = clone / "dpbench" / "workloads" / "__init__.py"
    init.write_text(init.read_text() + SLOW_RELU)
    _git(clone, "commit", "-q", "-am", "every F.relu 3 ms slower")
    _git(clone, "tag", "relu-head")
    return clone


def run_ab(clone: Path, base: str, head: str, args: argparse.Namespace, out: Path) -> tuple[int, dict, str, float]:
    """``dpbench ab`` (this checkout's) in the clone → (exit code, compare's JSON, its last line, seconds)."""
    # -P: the working directory (the clone) stays off the path, so this checkout's dpbench, which
    # the interpreter's editable install finds, runs ab.
    boot = "import sys; from dpbench.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-P", "-c", boot, "ab", base, head, "--python", sys.executable, "--trials", str(args.trials)]
    cmd += ["--workdir", str(out / "work"), "--json", str(out / "compare.json")]
    cmd += ["--max-trials", str(args.max_trials)] + (["--budget", args.budget] if args.budget else [])
    cmd += ["--", "-k", SELECTION if not args.select else f"{SELECTION} and ({args.select})"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPBENCH_") and k != "PYTHONPATH"}
    print("$ " + " ".join(cmd[:2] + ["-c", "…"] + cmd[4:]), flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=clone, env={**env, **SUITE_ENV}, stdout=subprocess.PIPE, text=True)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line.rstrip("\n"))
    code = proc.wait()
    found = json.loads((out / "compare.json").read_text()) if (out / "compare.json").exists() else {}
    last = next((line for line in reversed(lines) if line.startswith("until settled:")), "")
    return code, found, last, time.monotonic() - started


def verdicts(found: dict) -> dict[str, str]:
    return {b["name"]: b["verdict"] for b in found.get("benchmarks", [])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", default="6", help="dpbench ab --trials: the first rounds (default 6)")
    p.add_argument("--max-trials", help="dpbench ab --max-trials (default: ab's, 3 × --trials)")
    p.add_argument("--budget", help="dpbench ab --budget for each job, e.g. 20m (default: none)")
    p.add_argument("--keep", action="store_true", help="keep the scratch clone and the runs")
    p.add_argument("--select", help="only the throughput cases pytest's -k EXPR selects (a smoke run)")
    p.add_argument("--jobs", choices=("both", "ab", "aa"), default="both", help="the jobs to run (default both)")
    args = p.parse_args(argv)
    try:  # bad input: one line, nothing made
        args.trials = parse_trials(args.trials)  # ab's own rules, so the jobs cannot refuse them later
        args.max_trials = parse_max_trials(args.max_trials, trials=args.trials, min_pairs=2)
        parse_budget(args.budget)
    except ABError as e:
        print(f"validation.ab_relu: error: {e}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="dpbench-ab-relu-"))
    try:
        clone = scratch_clone(root)
        results = {}
        jobs = {"A/B": ("relu-base", "relu-head"), "A/A": ("relu-base", "relu-base")}
        for name, (base, head) in jobs.items():
            if args.jobs != "both" and name.replace("/", "").lower() != args.jobs:
                continue
            out = root / name.replace("/", "")
            out.mkdir()
            results[name] = run_ab(clone, base, head, args, out)
        met = True
        if "A/B" in results:
            code, found, last, seconds = results["A/B"]
            named = verdicts(found)
            small = {n: v for n, v in named.items() if "mlp" in n or "lenet" in n}
            big = {n: v for n, v in named.items() if "transformer" in n}
            regressed = sorted(n for n, v in small.items() if v == "regressed")
            # 12 of the suite's 14; a narrowed run needs the same share of the cases it ran.
            need = 12 if not args.select else max(1, math.ceil(len(small) * 12 / 14))
            print("\n== A/B: every F.relu 3 ms slower on the head side")
            print(f"exit {code} (target 1); {len(regressed)} of {len(small)} mlp/lenet cases regressed", end="")
            print(f" (target ≥ {need} of {len(small)})")
            print(f"transformer cases regressed: {sorted(n for n, v in big.items() if v == 'regressed') or 'none'}")
            print(f"{last or '(no until-settled line)'}; {seconds / 60:.1f} min in all")
            met = code == 1 and len(regressed) >= need and not any(v == "regressed" for v in big.values())
        if "A/A" in results:
            aa_code, aa_found, aa_last, aa_seconds = results["A/A"]
            print("\n== A/A: base against itself")
            print(f"exit {aa_code} (target 0); verdicts {sorted(set(verdicts(aa_found).values()))}")
            print(f"{aa_last or '(no until-settled line)'}; {aa_seconds / 60:.1f} min in all")
            met = met and aa_code == 0
        print(
            f"\ntarget {'met' if met else 'NOT met'}; files in {root}"
            if args.keep
            else f"\ntarget {'met' if met else 'NOT met'}"
        )
        return 0 if met else 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
