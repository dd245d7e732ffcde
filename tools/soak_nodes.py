"""The fault soak's torchrun part (python -m tools.soak_faults, kinds ``node-kill`` and ``agent-kill``):
two torchrun "nodes" on loopback running the small suite, one node's whole process tree or its
torchrun alone killed at a random moment, and the other node's exit timed.

Imported by tools.soak_faults.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
RUN_ID_ENV = "DPBENCH_RUN_ID"
HANG_S = 300.0
SESSION_END = re.compile(r"\b\d+ (passed|failed|errors?)\b.* in [\d.]+s\b")


def _runs_dpbench(pid: int) -> bool:
    """Does this torchrun have a worker running ``dpbench.cluster`` (its own command line,
    which names the module too, aside)?"""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    for child in children:
        try:
            if "dpbench.cluster" in " ".join(child.cmdline()):
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return False


class NodeRuns:
    """Soak's torchrun runs (a mixin: uses its ``work``, ``args``, ``rng``, ``window``, ``tmp``,
    ``pytest_cmd`` and ``check``)."""

    def run_nodes(self, index: int, kind: str = "node-kill") -> dict:
        from tests.cluster._torchrun import cluster_env, start

        run_id = f"soak-{uuid.uuid4().hex[:10]}"
        tmp = self.work / f"nodes{index:03d}"
        tmp.mkdir()
        env = {**cluster_env(run_id, DPBENCH_TRIALS=str(self.args.trials)), RUN_ID_ENV: run_id}
        args = self.pytest_cmd(f"soak{index:03d}")[3:]  # pytest's arguments after "-m pytest"
        victim = self.rng.randrange(2)
        # Each node its own temp dir, as separate hosts have their own disks: the survivor's must
        # end empty; the killed node's keeps what its processes had created (nothing of it is
        # left alive to remove it, as on a real dead node) and is reported, not counted.
        victim_tmp = self.work / f"nodes{index:03d}-victim-tmp"
        victim_tmp.mkdir()
        cluster = start(
            tmp, args, env=env, node_env=[{"TMPDIR": str(victim_tmp if i == victim else self.tmp)} for i in range(2)]
        )
        delay = self.rng.uniform(*self.window)
        started = time.monotonic()
        # Has torchrun started dpbench on each node? Before that the kill lands in torchrun's own
        # start-up (its import, its rendezvous), where no dpbench code runs on that node yet.
        seen = [False] * len(cluster.nodes)
        while time.monotonic() - started < delay and all(n.proc.poll() is None for n in cluster.nodes):
            seen = [s or _runs_dpbench(n.proc.pid) for s, n in zip(seen, cluster.nodes)]
            time.sleep(0.05)
        seen = [s or _runs_dpbench(n.proc.pid) for s, n in zip(seen, cluster.nodes)]
        note, gap = "", None
        after_session = False
        in_torchrun_start = False
        if all(n.proc.poll() is None for n in cluster.nodes):
            # pytest's last line on the head's node ("3 passed in 17.2s"): the session had saved
            # and said goodbye to every node before the kill.
            after_session = any(SESSION_END.search(n.output()) for n in cluster.nodes)
            in_torchrun_start = not all(seen)
            root = psutil.Process(cluster.nodes[victim].proc.pid)
            tree = [root] + root.children(recursive=True)
            killed_at = time.monotonic()
            for proc in tree if kind == "node-kill" else tree[:1]:  # agent-kill: torchrun alone
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    pass
            other = cluster.nodes[1 - victim].proc
            try:
                other.wait(60)
                gap = time.monotonic() - killed_at
            except subprocess.TimeoutExpired:
                pass
            # Its orphaned rank and workers must go too (node-kill: they were killed).
            _, victim_left = psutil.wait_procs(tree[1:], timeout=max(0.0, 10.0 - (time.monotonic() - killed_at)))
        else:
            note = "finished before the fault"
        codes = cluster.wait(HANG_S)
        cluster.stop()
        other_code = codes[1 - victim]
        output = cluster.nodes[1 - victim].output()
        row = self.check(
            kind, run_id, other_code if other_code is not None else "hang", output, note, time.monotonic() - started
        )
        row["victim_left"] = [] if note else [p.pid for p in victim_left if p.is_running()]
        # A kill after the session ended: the run is complete; the other node must still leave
        # within 10 s (torchrun's exit barrier would keep it 300 s), with whatever status it has.
        within = gap is not None and gap <= 10.0 and (other_code not in (0, None) or after_session)
        row["outcome"] = (
            f"finished first ({other_code})"
            if note
            else ("after the session: " if after_session else "")
            + (f"node {1 - victim} exited {other_code} in {gap:.1f} s" if gap is not None else "HANG")
        )
        row["node_ok"] = bool(note) or (within and not row["victim_left"])
        row["gap"] = gap
        row["torchrun_start"] = in_torchrun_start
        if in_torchrun_start:
            row["outcome"] = "in torchrun's own start-up: " + row["outcome"]
        if not row["node_ok"]:
            row["tails"] = "\n".join(
                f"    --- node {i}{' (killed)' if i == victim else ''} ---\n"
                + "\n".join("    " + line for line in n.output().splitlines()[-12:])
                for i, n in enumerate(cluster.nodes)
            )
        row["victim_dirs"] = sorted(
            p.name for p in victim_tmp.iterdir() if not p.name.startswith(("torchinductor_", "torchelastic_"))
        )
        shutil.rmtree(victim_tmp, ignore_errors=True)
        return row
