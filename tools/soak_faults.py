#!/usr/bin/env python
"""Fault soak (issue 18): N runs of a small real suite, one fault each at a random moment.

    .venv/bin/python -m tools.soak_faults --runs 100 --seed 1 [--kinds sigint,sigkill,...]
    .venv/bin/python -m tools.soak_faults --runs 20 --kinds node-kill      # two torchrun "nodes"

The suite is ``tests/faults/soak_suite.py``, run with ``--dpbench`` (the measuring plugin; three cases:
ddp ×2, single, allreduce ×2; ``--trials`` fresh-process trials, quick profile). Faults (``--kinds``):

  sigint, sigterm, sigkill   the signal to the pytest process
  sigint-group               SIGINT to pytest's process group (a terminal's Ctrl-C, a CI cancel)
  kill-worker                SIGKILL of one random worker process
  kill-helper                SIGKILL of the forkserver helper
  enospc                     a full disk at the save (``tests/faults/enospc_plugin.py``: the run
                             file or the timelines' write raises OSError(ENOSPC) half-way)
  node-kill                  under torchrun, two nodes on loopback: SIGKILL of one node's whole
                             process tree (its torchrun, agent and workers)
  agent-kill                 the same, SIGKILL of one node's torchrun alone (an OOM kill of the
                             agent): its rank must stop too, every process of that node gone
                             within 10 s, and the other node out within 10 s

Each run gets its own ``DPBENCH_RUN_ID`` and ``TMPDIR``. After each: processes still carrying the
run id 5 s after the run ended (psutil), anything left in its TMPDIR (rendezvous dirs, staged
timelines, multiprocessing's dirs), new run files that do not parse (partial) or that a failed
run saved (half-measured), earlier run files whose bytes changed, and the exit status with the
last line. Prints a table: fault × count × outcomes, and the totals of every violation; exits
1 if there was any. Runs take a few seconds each on an idle machine (tens on a loaded one).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

from tools.soak_nodes import HANG_S, RUN_ID_ENV, NodeRuns

ROOT = Path(__file__).resolve().parents[1]
LOCAL_KINDS = ("sigint", "sigterm", "sigkill", "sigint-group", "kill-worker", "kill-helper", "enospc")
NODE_KINDS = ("node-kill", "agent-kill")
KINDS = LOCAL_KINDS + NODE_KINDS
LEFT_AFTER_S = 5.0


def marked(run_id: str) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(RUN_ID_ENV) == run_id and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def hashes(storage: Path) -> dict[str, str]:
    return {
        str(p.relative_to(storage)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(storage.rglob("*"))
        if p.is_file()
    }


def last_line(text: str, limit: int | None = 160) -> str:
    """The output's last non-empty line, cut to ``limit`` characters for the table (whole to classify it)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines[-1][:limit] if limit else lines[-1]) if lines else ""


class Soak(NodeRuns):
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = Path(tempfile.mkdtemp(prefix="dpbench-soak-", dir=args.dir))
        self.suite = self.work / "suite"
        self.suite.mkdir()
        shutil.copy(ROOT / "tests" / "faults" / "soak_suite.py", self.suite / "test_soak.py")
        self.storage = self.work / "results"
        self.tmp = self.work / "tmp"
        self.tmp.mkdir()
        self.rows: list[dict] = []
        self.window = args.window
        self.baseline_shape: dict[str, int] | None = None  # the clean run's benchmarks and trials

    # -- one run ------------------------------------------------------------------
    def env(self, run_id: str, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DPBENCH_")}
        env.update(
            {
                "DPBENCH_PROFILE": "quick",
                "DPBENCH_TRIALS": str(self.args.trials),
                RUN_ID_ENV: run_id,
                "TMPDIR": str(self.tmp),
                "PYTHONPATH": str(ROOT / "tests" / "faults"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(extra)
        return env

    def pytest_cmd(self, name: str, *extra: str) -> list[str]:
        # -p no:hypothesispytest: the test extra's hypothesis plugin imports all of hypothesis in
        # every session's summary (seconds on a loaded machine); the suites never use it.
        return [
            sys.executable,
            "-m",
            "pytest",
            str(self.suite),
            "-q",
            "--dpbench",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:hypothesispytest",
            f"--benchmark-storage=file://{self.storage}",
            f"--benchmark-save={name}",
            *extra,
        ]

    def run_local(self, index: int, kind: str) -> dict:
        run_id = f"soak-{uuid.uuid4().hex[:10]}"
        extra, env_extra = [], {}
        if kind == "enospc":
            extra = ["-p", "enospc_plugin"]
            env_extra["DPBENCH_ENOSPC_AT"] = self.rng.choice(["json", "timelines"])
        delay = self.rng.uniform(*self.window)
        log = self.work / f"run{index:03d}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                self.pytest_cmd(f"soak{index:03d}", *extra),
                cwd=ROOT,
                env=self.env(run_id, **env_extra),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
        started = time.monotonic()
        note = self.inject(kind, proc, run_id, started + delay) if kind != "enospc" else ""
        try:
            code = proc.wait(HANG_S)
        except subprocess.TimeoutExpired:
            code = "hang"
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return self.check(kind, run_id, code, log.read_text(errors="replace"), note, time.monotonic() - started)

    def inject(self, kind: str, proc: subprocess.Popen, run_id: str, at: float) -> str:
        while time.monotonic() < at and proc.poll() is None:
            time.sleep(0.05)
        if kind in ("kill-worker", "kill-helper"):  # wait for a target to exist
            while proc.poll() is None:
                targets = self.targets(kind, proc.pid, run_id)
                if targets:
                    target = self.rng.choice(targets)
                    try:
                        target.kill()
                        return f"pid {target.pid}"
                    except psutil.NoSuchProcess:
                        continue
                time.sleep(0.05)
            return "finished before the fault"
        if proc.poll() is not None:
            return "finished before the fault"
        if kind == "sigint-group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal({"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL}[kind])
        return ""

    @staticmethod
    def targets(kind: str, pytest_pid: int, run_id: str) -> list[psutil.Process]:
        helpers, workers = [], []
        for proc in marked(run_id):
            try:
                if "multiprocessing.forkserver" not in " ".join(proc.cmdline()):
                    continue
                (helpers if proc.ppid() == pytest_pid else workers).append(proc)
            except psutil.NoSuchProcess:
                continue
        return helpers if kind == "kill-helper" else workers

    # -- the checks ---------------------------------------------------------------
    def check(self, kind: str, run_id: str, code, output: str, note: str, took: float) -> dict:
        ended = time.monotonic()
        left = marked(run_id)
        while left and time.monotonic() - ended < LEFT_AFTER_S:
            time.sleep(0.1)
            left = marked(run_id)
        for proc in left:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        # torch's own compile cache (torchinductor_<user>) is kept by design, and so is torchrun's
        # log directory (torchelastic_*: torchrun never removes it, even after a clean run);
        # anything else counts.
        dirs = sorted(p.name for p in self.tmp.iterdir() if not p.name.startswith(("torchinductor_", "torchelastic_")))
        for p in self.tmp.iterdir():
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
        now = hashes(self.storage) if self.storage.exists() else {}
        changed = [k for k, v in self.before.items() if now.get(k) != v]
        new_runs = [k for k in now if k not in self.before and k.endswith(".json") and "/timelines/" not in k]
        partial = [k for k in new_runs if not self._parses(self.storage / k)]
        partial += [str(p) for p in self.storage.rglob(".*.partial")] if self.storage.exists() else []
        ok_to_save = code == 0 or kind in ("kill-worker", "kill-helper")
        # A run the fault's exit status calls failed, but which holds every benchmark with every
        # trial of the clean baseline run: the signal came after the save (in the process's last
        # moments, or SIGKILL after the file was complete). Counted, shown, not a violation.
        late = [k for k in new_runs if k not in partial and not ok_to_save and self._complete(self.storage / k)]
        half = [k for k in new_runs if k not in partial and not ok_to_save and k not in late]
        outcome = self.outcome(kind, code, output, note)
        if late and (outcome.startswith("OTHER") or code == -signal.SIGKILL):
            outcome = f"saved complete, then the signal ({code})"
        row = dict(
            kind=kind,
            code=code,
            outcome=outcome,
            left=[p.pid for p in left],
            dirs=dirs,
            partial=partial,
            half=half,
            late=late,
            changed=changed,
            took=round(took, 1),
            last=last_line(output),
            note=note,
        )
        self.before = now
        return row

    @staticmethod
    def shape(path: Path) -> dict[str, int] | None:
        """Every benchmark of a saved run with its trial count; None when it does not parse."""
        try:
            doc = json.loads(path.read_text())
            return {
                b["name"]: int((b.get("extra_info", {}).get("trials") or {}).get("count", 0)) for b in doc["benchmarks"]
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def _complete(self, path: Path) -> bool:
        """Holds what the clean baseline run holds: every benchmark, every trial."""
        return self.baseline_shape is not None and self.shape(path) == self.baseline_shape

    @staticmethod
    def _parses(path: Path) -> bool:
        try:
            json.loads(path.read_text())
            return True
        except (OSError, ValueError):
            return False

    @staticmethod
    def outcome(kind: str, code, output: str, note: str) -> str:
        last = last_line(output, limit=None)  # a long path must not cut off the words it is judged by
        if code == "hang":
            return "HANG"
        if note == "finished before the fault":
            return f"finished first ({code})"
        if code == 0:
            return "completed (0)"
        if code == -9:
            return "killed (-9)"
        if code == 143 and "terminated (SIGTERM): nothing was saved" in last:
            return "terminated, nothing saved (143)"
        if code == 2 and "interrupted: nothing was saved" in last:
            return "interrupted, nothing saved (2)"
        if code == 3 and "saving failed (OSError" in last and "No space left on device" in last:
            return "disk full, nothing saved (3)"
        if code == 1 and "died with exit code" in output and "worker rank" in output:
            gone = "forkserver helper that started it is gone" in output
            return "case failed naming the rank" + (" and the helper" if gone else "") + " (1)"
        return f"OTHER ({code}): {last[:80]}"

    # -- the soak -----------------------------------------------------------------
    def run(self) -> int:
        self.storage.mkdir()
        self.seed_earlier_run()
        self.before = hashes(self.storage)
        t0 = time.monotonic()
        for index in range(1, self.args.runs + 1):
            kind = self.rng.choice(self.args.kinds)
            row = self.run_nodes(index, kind) if kind in NODE_KINDS else self.run_local(index, kind)
            self.rows.append(row)
            print(
                f"[{index}/{self.args.runs}] {kind:12s} → {row['outcome']}  ({row['took']} s)"
                + (f"  LEFT {row['left']}" if row["left"] else "")
                + (f"  DIRS {row['dirs']}" if row["dirs"] else "")
                + (f"  PARTIAL {row['partial']}" if row["partial"] else "")
                + (f"  HALF {row['half']}" if row["half"] else "")
                + (f"  KEPT-COMPLETE {row['late']}" if row.get("late") else "")
                + (f"  CHANGED {row['changed']}" if row["changed"] else "")
                + (f"  (the killed node's own temp kept {row['victim_dirs']})" if row.get("victim_dirs") else "")
                + (f"  VICTIM-LEFT {row['victim_left']}" if row.get("victim_left") else ""),
                flush=True,
            )
            if not row.get("node_ok", True):  # say where it stuck: the end of each node's output
                print(row.get("tails", ""), flush=True)
        return self.report(time.monotonic() - t0)

    def seed_earlier_run(self) -> None:
        """An earlier run the soak must never touch: one real, complete run of the same suite."""
        if self.args.no_baseline:
            machine = self.storage / "earlier"
            machine.mkdir()
            (machine / "0001_earlier.json").write_text(json.dumps({"benchmarks": [], "note": "earlier run"}))
            return
        code = subprocess.call(
            self.pytest_cmd("earlier"),
            cwd=ROOT,
            env=self.env(f"soak-{uuid.uuid4().hex[:10]}"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        if code != 0:
            raise SystemExit(f"soak_faults: the baseline run (no fault) failed with exit {code}")
        (saved,) = self.storage.glob("*/[0-9][0-9][0-9][0-9]_earlier.json")
        self.baseline_shape = self.shape(saved)

    def report(self, seconds: float) -> int:
        by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for row in self.rows:
            label = (
                row["outcome"]
                if "exited" not in row["outcome"] or not row.get("node_ok")
                else ("other node exited non-zero ≤ 10 s")
            )
            if row.get("torchrun_start") and not label.startswith("in torchrun"):
                label = "in torchrun's own start-up: " + label
            by_kind[row["kind"]][label] += 1
        print(f"\nsoak: {len(self.rows)} runs with one fault each, seed {self.args.seed}, {seconds / 60:.1f} min\n")
        print("| fault | runs | outcomes |\n|---|---|---|")
        for kind in KINDS:
            if kind in by_kind:
                outcomes = "; ".join(f"{n}× {o}" for o, n in by_kind[kind].most_common())
                print(f"| {kind} | {sum(by_kind[kind].values())} | {outcomes} |")
        totals = {
            f"processes left {LEFT_AFTER_S:g} s after the run": sum(len(r["left"]) for r in self.rows),
            "directories left": sum(len(r["dirs"]) for r in self.rows),
            "partial run files": sum(len(r["partial"]) for r in self.rows),
            "half-measured runs saved": sum(len(r["half"]) for r in self.rows),
            "earlier run files changed": sum(len(r["changed"]) for r in self.rows),
            "hangs": sum(r["code"] == "hang" for r in self.rows),
            "unexplained outcomes": sum(r["outcome"].startswith("OTHER") for r in self.rows),
            "node/agent kills not noticed within 10 s (dpbench running on both nodes)": sum(
                not r.get("node_ok", True) and not r.get("torchrun_start") for r in self.rows
            ),
            "processes of a node whose torchrun was killed still alive 10 s after": sum(
                len(r.get("victim_left", [])) for r in self.rows
            ),
        }
        print()
        for name, value in totals.items():
            print(f"{name}: {value}")
        print(
            f"complete runs kept although the fault's exit status is non-zero (it came after the save; "
            f"not a violation): {sum(len(r.get('late', [])) for r in self.rows)}"
        )
        early = [r for r in self.rows if r.get("torchrun_start")]
        if early:
            print(
                f"node kills in torchrun's own start-up, before it had started dpbench on both nodes (a node "
                f"dead before it reached the rendezvous is, to the others, one not started yet; torchrun's "
                f"join_timeout / read_timeout decide; not counted above): {len(early)}, "
                f"{sum(not r['node_ok'] for r in early)} of them not noticed within 10 s"
            )
        gaps = sorted(r["gap"] for r in self.rows if r.get("gap") is not None)
        if gaps:
            print(
                f"node or agent kill → other node's exit: {len(gaps)} tries, {gaps[0]:.1f}–{gaps[-1]:.1f} s "
                f"(median {gaps[len(gaps) // 2]:.1f} s)"
            )
        if not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            print(f"kept: {self.work}")
        return 1 if any(totals.values()) else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100, help="runs, one fault each (default 100)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--kinds",
        default=",".join(LOCAL_KINDS),
        help="comma-separated faults to draw from (default: all but node-kill and agent-kill); "
        f"any of {', '.join(KINDS)}",
    )
    p.add_argument("--trials", type=int, default=2, help="DPBENCH_TRIALS of each run (default 2)")
    p.add_argument(
        "--window", default="2,30", help="the fault lands uniformly in [A, B] s after the start (default 2,30)"
    )
    p.add_argument("--dir", default=None, help="where the soak's work directory goes (default: the system temp dir)")
    p.add_argument("--no-baseline", action="store_true", help="seed a synthetic earlier run instead of a real one")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, results)")
    args = p.parse_args(argv)
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown or not args.kinds:
        p.error(f"--kinds: expected some of {', '.join(KINDS)}, found {', '.join(unknown) or 'none'}")
    try:
        low, high = (float(x) for x in args.window.split(","))
        assert 0 <= low <= high
    except (ValueError, AssertionError):
        p.error(f"--window: expected A,B seconds with 0 <= A <= B, found {args.window!r}")
    args.window = (low, high)
    if args.runs < 1 or args.trials < 1:
        p.error("--runs and --trials must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    return Soak(parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
