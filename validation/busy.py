"""A busy machine during one configuration's trials, on a real run: does the decision refuse to
rank on them?

Runs ``dpbench run`` on a small workload (single and ddp) and, while the progress line names the
chosen configuration, keeps the machine's cores busy from other processes (one spinning process per
core); the other configuration's trials run on a quiet machine. The run's decision must leave the
question ``unsettled`` with the busy-machine reason, at any trial count. Prints the decision and
the other processes' CPU share per case from the saved run.

    .venv/bin/python -m validation.busy [--trials 2] [--busy single]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _spin(stop) -> None:  # another process's busy loop
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--busy", default="single", help="the strategy whose trials run beside a busy loop")
    parser.add_argument("--workload", default="mlp")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="dpbench-busy-"))
    cmd = [sys.executable, "-m", "dpbench.cli", "run", "--workload", args.workload, "--strategies", "single,ddp"]
    cmd += ["--world-sizes", "1,2", "--trials", str(args.trials), "--results", str(work / "results")]
    cmd += ["--report", str(work / "report.html"), "--json", str(work / "decision.json"), "--device", "cpu"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    stop, spinners, busy_s = multiprocessing.Event(), [], 0.0
    started = None
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        if " · " in line and "trial " in line:  # a progress line: which case starts now
            mine = f"{args.busy}-{args.workload}-" in line
            if mine and not spinners:
                stop.clear()
                spinners = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(os.cpu_count() or 2)]
                for p in spinners:
                    p.start()
                started = time.monotonic()
            elif not mine and spinners:
                stop.set()
                for p in spinners:
                    p.join()
                spinners, busy_s = [], busy_s + time.monotonic() - (started or time.monotonic())
        elif spinners and ("measuring again" in line or line.startswith("run saved")):
            stop.set()
            for p in spinners:
                p.join()
            spinners = []
    stop.set()
    for p in spinners:
        p.join()
    code = proc.wait()
    decision = json.loads((work / "decision.json").read_text())
    print(f"\nexit {code}; busy loop beside {args.busy}'s trials for {busy_s:.0f} s; files in {work}")
    for q in decision["questions"]:
        print(f"  {q['workload']}: outcome {q['outcome']}, leader {q['leader']}, reasons {q['reasons']}")
        for c in q["configurations"]:
            share = c["busy_share"]
            print(f"    {c['configuration']}: other processes' CPU share {share:.0%}" if share is not None else "")
    return code


if __name__ == "__main__":
    sys.exit(main())
