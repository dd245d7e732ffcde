"""Real A/A of the decision: ``dpbench run`` of one commit, N times back to back, on the quick
decision set. Nothing changed between the runs, so a configuration claimed faster than another in
one run and slower in another is a contradiction: count them over every pair of runs, and say how
often each comparison settled.

    .venv/bin/python -m validation.decision_aa [--runs 3] [--workloads mlp,lenet,transformer] [-- RUN_ARGS]
    .venv/bin/python -m validation.decision_aa --decisions D1.json D2.json ...   # count, run nothing

Each run's decision is read from its ``--json`` (``--decisions``: decisions already written, by
``dpbench run --json`` or ``dpbench report RUN --json``, counted again without a run); relations
are taken from every claim: ``faster`` / ``slower`` against single and ``slower`` against the
question's leader.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _recipe(recipe) -> str:
    """A question's recipe as one short phrase (the JSON holds a mapping)."""
    if not isinstance(recipe, dict):
        return str(recipe)
    return ", ".join(f"{k}={int(v) if isinstance(v, float) and v.is_integer() else v}" for k, v in recipe.items())


def relations(decision: dict) -> tuple[set[tuple[str, str, str]], int, int]:
    """``(question, faster, slower)`` claimed, and (settled, all) comparisons."""
    found: set[tuple[str, str, str]] = set()
    settled = total = 0
    for q in decision["questions"]:
        key = f"{q['workload']} {_recipe(q['recipe'])}"
        for c in q["configurations"]:
            for side, other in (("vs_single", q["single"]), ("vs_leader", q["leader"])):
                claim = c[side]
                if claim is None:
                    continue
                total += 1
                settled += claim["claim"] != "unsettled"
                if claim["claim"] == "faster":
                    found.add((key, c["configuration"], other))
                elif claim["claim"] == "slower":
                    found.add((key, other, c["configuration"]))
    return found, settled, total


def run_cmd(i: int, work: Path, workloads: str, rest: list[str]) -> list[str]:
    """The ``dpbench run`` of run ``i`` (from 1): its results, report and decision under ``work``."""
    cmd = [sys.executable, "-m", "dpbench.cli", "run", "--device", "cpu", "--results", str(work / "results")]
    for w in workloads.split(","):
        cmd += ["--workload", w]
    cmd += ["--save", f"aa{i}", "--report", str(work / f"report{i}.html")]
    return cmd + ["--json", str(work / f"decision{i}.json"), *[a for a in rest if a != "--"]]


def run_decisions(runs: int, workloads: str, rest: list[str]) -> list[Path] | int:
    """Run ``dpbench run`` ``runs`` times back to back: their decision files, or the exit code of
    the first run that failed."""
    work = Path(tempfile.mkdtemp(prefix="dpbench-aa-"))
    paths, times = [], []
    for i in range(1, runs + 1):
        started = time.monotonic()
        code = subprocess.run(run_cmd(i, work, workloads, rest)).returncode
        times.append(time.monotonic() - started)
        if code != 0:
            print(f"run {i} exited {code}", file=sys.stderr)
            return code
        paths.append(work / f"decision{i}.json")
    print(f"\n{runs} runs in {work}: " + ", ".join(f"{t / 60:.1f} min" for t in times))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workloads", default="mlp,lenet,transformer")
    parser.add_argument(
        "--decisions", nargs="+", metavar="FILE", help="decisions already written (--json): count them, run nothing"
    )
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.decisions:
        if len(args.decisions) < 2:
            parser.error(f"--decisions: expected at least 2 files to compare, found {len(args.decisions)}")
        paths = [Path(p) for p in args.decisions]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            parser.error(f"--decisions: expected decision JSON files, found no file at {', '.join(missing)}")
    else:
        paths = run_decisions(args.runs, args.workloads, args.rest)
        if isinstance(paths, int):
            return paths
    count_contradictions([json.loads(p.read_text()) for p in paths])
    return 0


def count_contradictions(
    decisions: list[dict], pairs: list[tuple[int, int]] | None = None, *, show_runs: bool = True
) -> int:
    """Print each decision's claims (``show_runs``) and the contradictions between runs i and j
    (from 1) of ``pairs`` (default: every pair of runs); return their number."""
    found = [relations(d) for d in decisions]
    for i, (rel, settled, total) in enumerate(found if show_runs else [], 1):
        print(f"run {i}: {settled} of {total} comparisons settled ({settled / max(total, 1):.0%}); {len(rel)} claims")
    pairs = pairs if pairs is not None else list(itertools.combinations(range(1, len(found) + 1), 2))
    contradictions = 0
    for i, j in pairs:
        a, b = found[i - 1][0], found[j - 1][0]
        clash = sorted((q, x, y) for q, x, y in a if (q, y, x) in b)
        contradictions += len(clash)
        print(
            f"runs {i} and {j}: {len(clash)} contradictions"
            + "".join(f"\n  {q}: {x} > {y}, then <" for q, x, y in clash)
        )
    print(f"contradictions over {len(pairs)} pairs of runs: {contradictions}")
    return contradictions


if __name__ == "__main__":
    sys.exit(main())
