"""Real A/A of the decision: ``dpbench run`` of one commit, N times back to back, on the quick
decision set. Nothing changed between the runs, so a configuration claimed faster than another in
one run and slower in another is a contradiction: count them over every pair of runs, and say how
often each comparison settled.

    .venv/bin/python -m validation.decision_aa [--runs 3] [--workloads mlp,lenet,transformer] [-- RUN_ARGS]

Each run's decision is read from its ``--json``; relations are taken from every claim: ``faster``
/ ``slower`` against single and ``slower`` against the question's leader.
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


def relations(decision: dict) -> tuple[set[tuple[str, str, str]], int, int]:
    """``(question, faster, slower)`` claimed, and (settled, all) comparisons."""
    found: set[tuple[str, str, str]] = set()
    settled = total = 0
    for q in decision["questions"]:
        key = f"{q['workload']} {q['recipe']}"
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workloads", default="mlp,lenet,transformer")
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="dpbench-aa-"))
    decisions, times = [], []
    for i in range(args.runs):
        cmd = [sys.executable, "-m", "dpbench.cli", "run", "--device", "cpu", "--results", str(work / "results")]
        for w in args.workloads.split(","):
            cmd += ["--workload", w]
        cmd += ["--save", f"aa{i + 1}", "--report", str(work / f"report{i + 1}.html")]
        cmd += ["--json", str(work / f"decision{i + 1}.json"), *[a for a in args.rest if a != "--"]]
        started = time.monotonic()
        code = subprocess.run(cmd).returncode
        times.append(time.monotonic() - started)
        if code != 0:
            print(f"run {i + 1} exited {code}", file=sys.stderr)
            return code
        decisions.append(json.loads((work / f"decision{i + 1}.json").read_text()))
    print(f"\n{args.runs} runs in {work}: " + ", ".join(f"{t / 60:.1f} min" for t in times))
    found = [relations(d) for d in decisions]
    for i, (rel, settled, total) in enumerate(found, 1):
        print(f"run {i}: {settled} of {total} comparisons settled ({settled / max(total, 1):.0%}); {len(rel)} claims")
    contradictions = 0
    for (i, (a, _, _)), (j, (b, _, _)) in itertools.combinations(enumerate(found, 1), 2):
        clash = sorted((q, x, y) for q, x, y in a if (q, y, x) in b)
        contradictions += len(clash)
        print(
            f"runs {i} and {j}: {len(clash)} contradictions"
            + "".join(f"\n  {q}: {x} > {y}, then <" for q, x, y in clash)
        )
    print(f"contradictions over {len(found) * (len(found) - 1) // 2} pairs of runs: {contradictions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
