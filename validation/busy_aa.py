"""Real A/A of the decision beside a busy neighbour: pairs of ``dpbench run`` of one commit, back to
back, while another process shares the machine. Nothing changed between a pair's runs, so a
configuration claimed faster than another in one and slower in the other is a contradiction; a
claim must hold beside the neighbour or not be made (the question unsettled, saying what contended
its trials). Counted as :mod:`validation.decision_aa` counts them, within each pair and over every
pair of runs (goal: 0).

    .venv/bin/python -m validation.busy_aa [--pairs 3] [--workloads mlp,lenet] [-- RUN_ARGS]

The neighbours: every pair but the last beside a ``yes`` loop pinned to core 0 (on 2 cores, half the
machine); the last beside another ``dpbench run`` of the same workloads (its own results, restarted
whenever it ends before the pair does). Run it on a machine nobody else uses: the neighbour it starts
is meant to be the only one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from validation.decision_aa import count_contradictions, run_cmd

NEIGHBOURS = ("yes", "dpbench")


def _pin_to_core_0() -> None:  # in the neighbour's child, before exec: one core of the machine
    os.sched_setaffinity(0, {0})


def neighbour_cmd(kind: str, work: Path, workloads: str) -> list[str]:
    """The command of a neighbour of ``kind`` (:data:`NEIGHBOURS`) whose files go under ``work``."""
    if kind == "yes":
        return ["yes"]
    cmd = [sys.executable, "-m", "dpbench.cli", "run", "--device", "cpu", "--results", str(work / "neighbour")]
    for w in workloads.split(","):
        cmd += ["--workload", w]
    return cmd + ["--save", "neighbour", "--report", str(work / "neighbour.html")]


def start_neighbour(kind: str, work: Path, workloads: str) -> subprocess.Popen:
    quiet = subprocess.DEVNULL
    pin = _pin_to_core_0 if kind == "yes" else None
    return subprocess.Popen(neighbour_cmd(kind, work, workloads), stdout=quiet, stderr=quiet, preexec_fn=pin)


def stop(proc: subprocess.Popen) -> None:
    """End the neighbour (SIGTERM, then SIGKILL after 10 s) and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def plan(pairs: int) -> list[str]:
    """The neighbour of each pair: ``yes`` for all but the last, another ``dpbench run`` for the last."""
    return ["yes"] * (pairs - 1) + ["dpbench"]


def run_pairs(pairs: int, workloads: str, rest: list[str]) -> tuple[list[Path], list[str]] | int:
    """Every pair's two runs beside its neighbour: the decision files in run order and each pair's
    neighbour, or the exit code of the first run that failed."""
    work = Path(tempfile.mkdtemp(prefix="dpbench-busy-aa-"))
    paths, times, neighbours = [], [], plan(pairs)
    for p, kind in enumerate(neighbours, 1):
        neighbour = start_neighbour(kind, work, workloads)
        try:
            for side in (1, 2):
                i = 2 * (p - 1) + side
                if neighbour.poll() is not None:  # the other dpbench run ended first: start it again
                    neighbour = start_neighbour(kind, work, workloads)
                started = time.monotonic()
                code = subprocess.run(run_cmd(i, work, workloads, rest)).returncode
                times.append(time.monotonic() - started)
                if code != 0:
                    print(f"run {i} (pair {p}, beside {kind}) exited {code}", file=sys.stderr)
                    return code
                paths.append(work / f"decision{i}.json")
        finally:
            stop(neighbour)
    print(f"\n{2 * pairs} runs in {work}: " + ", ".join(f"{t / 60:.1f} min" for t in times))
    return paths, neighbours


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="A/A pairs (the last beside another dpbench run)")
    parser.add_argument("--workloads", default="mlp,lenet")
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(f"--pairs: expected at least 1, found {args.pairs}")
    done = run_pairs(args.pairs, args.workloads, args.rest)
    if isinstance(done, int):
        return done
    paths, neighbours = done
    decisions = [json.loads(p.read_text()) for p in paths]
    for p, kind in enumerate(neighbours, 1):
        print(f"pair {p} (runs {2 * p - 1} and {2 * p}): beside {'a yes loop on core 0' if kind == 'yes' else kind}")
    within = count_contradictions(decisions, [(2 * p - 1, 2 * p) for p in range(1, len(neighbours) + 1)])
    print(f"contradictions within the {len(neighbours)} A/A pairs: {within} (goal 0)")
    print("and over every pair of runs:")
    count_contradictions(decisions, show_runs=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
