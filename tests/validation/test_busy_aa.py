"""``validation.busy_aa``'s plumbing with ``dpbench run`` and the neighbours stood in for: which
neighbour each pair runs beside (a ``yes`` loop pinned to core 0; another ``dpbench run``, started
again when it ends first), the runs it starts, that every neighbour is stopped, and the counting of
contradictions within pairs. Its real runs are for a machine nobody else uses
(docs/validation/decision.md)."""

from __future__ import annotations

import importlib
import json
import subprocess
import tempfile
from pathlib import Path


def _decision(faster: str, slower: str) -> dict:
    recipe = {"optimizer": "sgd", "precision": "fp32", "global_batch": 64.0}
    configs = [
        {"configuration": faster, "vs_single": None, "vs_leader": None},
        {"configuration": slower, "vs_single": None, "vs_leader": {"claim": "slower"}},
    ]
    return {
        "questions": [
            {"workload": "mlp", "recipe": recipe, "single": None, "leader": faster, "configurations": configs}
        ]
    }


class Neighbour:
    """A stand-in for a neighbour process: ``ends_after`` polls it reports having exited."""

    started: list[Neighbour] = []

    def __init__(self, cmd, stdout=None, stderr=None, preexec_fn=None):
        self.cmd, self.preexec_fn, self.stopped, self.polls = cmd, preexec_fn, False, 0
        self.ends_after = 1 if "dpbench.cli" in cmd else None
        Neighbour.started.append(self)

    def poll(self):
        self.polls += 1
        ended = self.stopped or (self.ends_after is not None and self.polls > self.ends_after)
        return 0 if ended else None

    def terminate(self):
        self.stopped = True

    def wait(self, timeout=None):
        return 0


def test_busy_aa_runs_each_pair_beside_its_neighbour_and_counts_contradictions_within_pairs(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    module = importlib.import_module("validation.busy_aa")
    # pair 3's second run turns the first's claim round: one contradiction, within that pair
    decisions = [_decision("ddp w2", "single w1")] * 5 + [_decision("single w1", "ddp w2")]
    runs = []

    def fake_run(cmd):
        runs.append(cmd)
        Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps(decisions[len(runs) - 1]))
        return subprocess.CompletedProcess(cmd, 0)

    Neighbour.started = []
    monkeypatch.setattr(module.subprocess, "run", fake_run)
    monkeypatch.setattr(module.subprocess, "Popen", Neighbour)
    assert module.main(["--pairs", "3", "--workloads", "mlp", "--", "--max-trials", "8"]) == 0
    (work,) = tmp_path.glob("dpbench-busy-aa-*")
    assert [r[r.index("--save") + 1] for r in runs] == [f"aa{i}" for i in range(1, 7)]
    assert all(r[-2:] == ["--max-trials", "8"] for r in runs)
    kinds = [n.cmd[0] if n.cmd == ["yes"] else "dpbench" for n in Neighbour.started]
    # two yes loops pinned to core 0; the dpbench neighbour ended after run 5 and was started again
    assert kinds == ["yes", "yes", "dpbench", "dpbench"]
    assert [n.preexec_fn for n in Neighbour.started[:2]] == [module._pin_to_core_0] * 2
    assert Neighbour.started[2].cmd[-4:] == ["--save", "neighbour", "--report", str(work / "neighbour.html")]
    assert all(n.stopped or n.ends_after for n in Neighbour.started)
    out = capsys.readouterr().out.splitlines()
    start = out.index("pair 1 (runs 1 and 2): beside a yes loop on core 0")
    assert out[start : start + 15] == [
        "pair 1 (runs 1 and 2): beside a yes loop on core 0",
        "pair 2 (runs 3 and 4): beside a yes loop on core 0",
        "pair 3 (runs 5 and 6): beside dpbench",
        *[f"run {i}: 1 of 1 comparisons settled (100%); 1 claims" for i in range(1, 7)],
        "runs 1 and 2: 0 contradictions",
        "runs 3 and 4: 0 contradictions",
        "runs 5 and 6: 1 contradictions",
        "  mlp optimizer=sgd, precision=fp32, global_batch=64: ddp w2 > single w1, then <",
        "contradictions over 3 pairs of runs: 1",
        "contradictions within the 3 A/A pairs: 1 (goal 0)",
    ]
    assert out[-1] == "contradictions over 15 pairs of runs: 5"


def test_the_pin_keeps_the_yes_loop_on_one_core(monkeypatch):
    module = importlib.import_module("validation.busy_aa")
    pinned = []
    monkeypatch.setattr(module.os, "sched_setaffinity", lambda pid, cores: pinned.append((pid, cores)))
    module._pin_to_core_0()
    assert pinned == [(0, {0})]
