#!/usr/bin/env python
"""The gate's own job on a real broad regression, repeated: ``dpbench compare`` with one run a side.

Each job runs the throughput suite (quick profile) twice from this checkout — the base as it is, then
the candidate with a ``sitecustomize`` on ``PYTHONPATH`` that makes every ``F.relu`` 3 ms slower in
the candidate's processes only (mlp and lenet call ReLU; the transformer uses GELU and must not
move) — then ``dpbench compare BASE CANDIDATE --json``. Every run, log and comparison is kept.

Target (issue 65): every job exits 1, names at least 12 of the 14 mlp/lenet cases ``regressed`` and no
transformer case. A job that misses is listed with what the comparison said (its first line, the
broad judgement, the machine's move, the contention) so its cause can be read from the kept files.

The slowdown is checked, not assumed: the ``sitecustomize`` appends the process id to a marker file the
first time the slow ``F.relu`` runs in a process, and a job whose candidate left no marker is reported
as a broken job (the regression never ran), never as a gate that passed.

    .venv/bin/python -m validation.compare_relu [--jobs 10] [--out DIR] [--select EXPR]
    .venv/bin/python -m validation.compare_relu --rejudge DIR

Needs a quiet machine: about 4–5 minutes a job on the 2-core VM. ``--rejudge DIR`` runs no suite: it
compares every job's kept runs in DIR again with this checkout's gate (seconds a job), writing nothing
into DIR — how a change of the gate is checked against jobs already measured.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE = "suites/test_throughput.py"
SUITE_ENV = {"DPBENCH_PROFILE": "quick"}
NEED = 12  # of the suite's 14 mlp/lenet cases
MARKER = "relu-ran.pids"

SITECUSTOMIZE = '''"""validation.compare_relu: every F.relu 3 ms slower in this process (the candidate side only)."""


def _slow_relu():
    import functools
    import os
    import time
    from pathlib import Path

    import torch.nn.functional as F

    relu = F.relu
    marker = Path(__file__).with_name({marker!r})
    ran = []

    @functools.wraps(relu)
    def slow(*args, **kwargs):
        if not ran:  # proof that the slowdown ran in this process, once
            ran.append(True)
            with open(marker, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
        time.sleep(0.003)
        return relu(*args, **kwargs)

    F.relu = slow


_slow_relu()
'''


@dataclass
class Job:
    """One job's outcome, as the summary table and ``summary.json`` hold it."""

    job: int
    exit: int
    named: int  # mlp/lenet cases regressed
    small: int  # mlp/lenet cases compared
    transformer_named: int  # transformer cases regressed (must be 0)
    inconclusive: list[str]
    broad: str
    controls: float  # the controls' median move (candidate ÷ base)
    warnings: list[str]
    first_line: str
    relu_processes: int  # candidate processes in which the slow relu ran
    seconds: float

    @property
    def broken(self) -> bool:
        return self.relu_processes == 0

    @property
    def need(self) -> int:
        """12 of the suite's 14; a narrowed run (``--select``) the same share of the cases it ran."""
        return NEED if self.small >= 14 else max(1, math.ceil(self.small * NEED / 14))

    @property
    def met(self) -> bool:
        return not self.broken and self.exit == 1 and self.named >= self.need and self.transformer_named == 0


def write_sitecustomize(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / "sitecustomize.py").write_text(SITECUSTOMIZE.format(marker=MARKER))
    return where / MARKER


def _clean_env() -> dict[str, str]:
    # A user's own environment: nothing of dpbench's or an outer PYTHONPATH leaks into the sides.
    return {k: v for k, v in os.environ.items() if not k.startswith("DPBENCH_") and k != "PYTHONPATH"}


def run_side(name: str, storage: Path, log: Path, *, select: str | None, pythonpath: Path | None) -> Path:
    """One session of the throughput suite saved as ``name`` in ``storage`` → the saved run's file."""
    cmd = [sys.executable, "-m", "pytest", SUITE, f"--benchmark-save={name}", f"--benchmark-storage=file://{storage}"]
    cmd += ["-k", select] if select else []
    env = {**_clean_env(), **SUITE_ENV} | ({"PYTHONPATH": str(pythonpath)} if pythonpath else {})
    print("$ " + " ".join(([f"PYTHONPATH={pythonpath}"] if pythonpath else []) + ["python"] + cmd[1:]), flush=True)
    with log.open("w") as out:
        code = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    saved = sorted(storage.rglob(f"*_{name}.json"))
    if code != 0 or not saved:
        raise RuntimeError(f"the {name} session exited {code} and saved {len(saved)} runs; see {log}")
    return saved[-1]


def run_compare(base: Path, candidate: Path, out: Path) -> tuple[int, dict, str]:
    """``dpbench compare BASE CANDIDATE --json`` → (exit code, its JSON, its first line)."""
    cmd = [sys.executable, "-m", "dpbench.cli", "compare", str(base), str(candidate), "--json", str(out), "--no-color"]
    proc = subprocess.run(cmd, cwd=REPO, env=_clean_env(), capture_output=True, text=True)
    out.with_suffix(".txt").write_text(proc.stdout + proc.stderr)
    found = json.loads(out.read_text()) if out.exists() else {}
    first = next((line for line in proc.stdout.splitlines() if line.strip()), "")
    return proc.returncode, found, first


def judge(job: int, code: int, found: dict, first: str, pids: int, seconds: float) -> Job:
    verdicts = {b["name"]: b["verdict"] for b in found.get("benchmarks", [])}
    small = {n: v for n, v in verdicts.items() if "mlp" in n or "lenet" in n}
    big = {n: v for n, v in verdicts.items() if "transformer" in n}
    return Job(
        job=job,
        exit=code,
        named=sum(v == "regressed" for v in small.values()),
        small=len(small),
        transformer_named=sum(v == "regressed" for v in big.values()),
        inconclusive=sorted(n for n, v in small.items() if v == "inconclusive"),
        broad=str(found.get("family", {}).get("broad", "")),
        controls=found.get("family", {}).get("control_shift") or float("nan"),
        warnings=list(found.get("warnings", [])),
        first_line=first,
        relu_processes=pids,
        seconds=round(seconds, 1),
    )


def table(jobs: list[Job]) -> str:
    rows = ["| job | exit | mlp/lenet named `regressed` | transformer named | broad | controls | first line |"]
    rows.append("|---|---|---|---|---|---|---|")
    for j in jobs:
        named = f"{j.named} of {j.small}" + (" (slowdown never ran: broken job)" if j.broken else "")
        controls = f"×{j.controls:.3f}" if j.controls == j.controls else "–"
        cells = (j.job, j.exit, named, j.transformer_named, j.broad, controls, j.first_line)
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows)


def rejudge(where: Path) -> int:
    """Every job of an earlier series in ``where`` compared again by this checkout's gate."""
    dirs = sorted(d for d in where.glob("job[0-9]*") if d.is_dir()) if where.is_dir() else []
    if not dirs:
        print(f"validation.compare_relu: error: --rejudge {where} holds no jobNN directories", file=sys.stderr)
        return 2
    jobs: list[Job] = []
    with tempfile.TemporaryDirectory(prefix="dpbench-rejudge-") as tmp:
        for d in dirs:
            base, cand = sorted(d.rglob("*_base.json")), sorted(d.rglob("*_relu.json"))
            if not (base and cand):
                print(f"validation.compare_relu: {d.name}: no base and relu runs kept, left out", file=sys.stderr)
                continue
            marker = d / "slow" / MARKER
            pids = len(marker.read_text().split()) if marker.exists() else 0
            code, found, first = run_compare(base[-1], cand[-1], Path(tmp) / f"{d.name}.json")
            jobs.append(judge(int(d.name[3:]), code, found, first, pids, 0.0))
    if not jobs:
        return 2
    met = sum(j.met for j in jobs)
    print(table(jobs))
    print(f"\n{met} of {len(jobs)} jobs met the target (exit 1, ≥ {NEED} of 14 named, no transformer case), re-judged")
    return 0 if met == len(jobs) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=10, help="how many jobs (default 10)")
    p.add_argument("--out", type=Path, help="where to keep the runs and comparisons (default: a new temp dir)")
    p.add_argument("--select", help="only the throughput cases pytest's -k EXPR selects (a smoke run)")
    p.add_argument("--rejudge", type=Path, metavar="DIR", help="compare the kept runs of an earlier --out DIR again")
    args = p.parse_args(argv)
    if args.rejudge is not None:
        return rejudge(args.rejudge)
    if args.jobs < 1:
        print(f"validation.compare_relu: error: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    if args.out is not None and args.out.exists() and any(args.out.iterdir()):
        print(f"validation.compare_relu: error: --out {args.out} is not empty", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="dpbench-compare-relu-"))
    out.mkdir(parents=True, exist_ok=True)
    jobs: list[Job] = []
    for n in range(1, args.jobs + 1):
        where = out / f"job{n:02d}"
        marker = write_sitecustomize(where / "slow")
        storage = where / "results"
        started = time.monotonic()
        base = run_side("base", storage, where / "base.log", select=args.select, pythonpath=None)
        cand = run_side("relu", storage, where / "relu.log", select=args.select, pythonpath=where / "slow")
        code, found, first = run_compare(base, cand, where / "compare.json")
        pids = len(marker.read_text().split()) if marker.exists() else 0
        jobs.append(judge(n, code, found, first, pids, time.monotonic() - started))
        print(table(jobs[-1:]).splitlines()[-1], flush=True)
        # after every job: an interrupted series keeps the jobs it finished
        (out / "summary.json").write_text(json.dumps([asdict(j) for j in jobs], indent=1))
    met = sum(j.met for j in jobs)
    print("\n" + table(jobs))
    target = f"exit 1, ≥ {NEED} of 14 named, no transformer case"
    print(f"\n{met} of {len(jobs)} jobs met the target ({target}); files in {out}")
    return 0 if met == len(jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
