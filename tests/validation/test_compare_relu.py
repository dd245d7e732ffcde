"""``validation.compare_relu``: the candidate's ``sitecustomize`` slows ``F.relu`` and proves it ran (in a
real interpreter), and the jobs it starts and how their comparisons become the table and the exit code
(with the sessions and ``dpbench compare`` stood in for; both run end to end elsewhere)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

module = importlib.import_module("validation.compare_relu")


@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
def test_sitecustomize_slows_relu_and_leaves_its_marker(tmp_path):
    marker = module.write_sitecustomize(tmp_path / "slow")
    probe = (
        "import time, torch, torch.nn.functional as F; x = torch.ones(4); t = time.perf_counter(); "
        "[F.relu(x) for _ in range(3)]; print(hasattr(F.relu, '__wrapped__'), time.perf_counter() - t >= 0.009)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    plain = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    slow = subprocess.run(
        [sys.executable, "-c", probe],
        env={**env, "PYTHONPATH": str(tmp_path / "slow")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (plain.returncode, slow.returncode) == (0, 0), plain.stderr[-2000:] + slow.stderr[-2000:]
    assert (plain.stdout.split(), slow.stdout.split()) == (["False", "False"], ["True", "True"])
    assert marker.read_text().split() == [str(int(marker.read_text().split()[0]))]  # one line: one process


def _names(model: str) -> list[str]:
    return [f"test_throughput[{s}-{model}-w{w}]" for s in ("single", "ddp", "dp", "zero") for w in (1, 2)][:7]


def test_jobs_run_both_sides_and_the_table_reads_each_comparison(tmp_path, monkeypatch, capsys):
    sessions, compares = [], []
    outcomes = iter(
        [  # job 1: 13 of 14 named, job 2: passed with 2 named (the failure the issue is about)
            (
                1,
                13,
                "FAIL: 14 of 21 cases slower by +40% to +250% while the controls held (×1.002): a broad regression",
            ),
            (0, 2, "ok: no regression; 2 regressed?"),
        ]
    )

    def fake_session(cmd, cwd, env, stdout, stderr):
        sessions.append((cmd, env))
        name = next(a for a in cmd if a.startswith("--benchmark-save=")).split("=", 1)[1]
        storage = Path(next(a for a in cmd if a.startswith("--benchmark-storage=")).split("file://", 1)[1])
        (storage / "Linux").mkdir(parents=True, exist_ok=True)
        (storage / "Linux" / f"000{len(sessions)}_{name}.json").write_text("{}")
        if "PYTHONPATH" in env:  # the candidate: its workers ran the slow relu (job 2: none did)
            marker = Path(env["PYTHONPATH"]) / module.MARKER
            if len(sessions) < 3:
                marker.write_text("101\n102\n")
        return subprocess.CompletedProcess(cmd, 0)

    def fake_compare(cmd, cwd, env, capture_output, text):
        compares.append(cmd)
        code, named, first = next(outcomes)
        small = _names("mlp") + _names("lenet")
        found = {
            "family": {"broad": "regression" if code else "none", "control_shift": 1.002},
            "warnings": [],
            "benchmarks": [
                {"name": n, "verdict": "regressed" if i < named else "inconclusive"} for i, n in enumerate(small)
            ]
            + [{"name": n, "verdict": "unchanged"} for n in _names("transformer")],
        }
        Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps(found))
        return subprocess.CompletedProcess(cmd, code, stdout=first + "\n", stderr="")

    def fake_run(cmd, **kw):
        return fake_compare(cmd, **kw) if "compare" in cmd else fake_session(cmd, **kw)

    monkeypatch.setattr(module.subprocess, "run", fake_run)
    assert module.main(["--jobs", "2", "--out", str(tmp_path / "out")]) == 1
    assert len(sessions) == 4 and len(compares) == 2
    (base_cmd, base_env), (relu_cmd, relu_env) = sessions[:2]
    assert "PYTHONPATH" not in base_env and relu_env["PYTHONPATH"] == str(tmp_path / "out" / "job01" / "slow")
    assert base_env["DPBENCH_PROFILE"] == relu_env["DPBENCH_PROFILE"] == "quick"
    assert base_cmd[1:4] == ["-m", "pytest", "suites/test_throughput.py"] and "--benchmark-save=relu" in relu_cmd
    results = tmp_path / "out" / "job01" / "results" / "Linux"
    assert compares[0][3:6] == ["compare", str(results / "0001_base.json"), str(results / "0002_relu.json")]
    out = capsys.readouterr().out
    assert "| 1 | 1 | 13 of 14 | 0 | regression | ×1.002 | FAIL: 14 of 21" in out
    assert "| 2 | 0 | 2 of 14 (slowdown never ran: broken job) | 0 | none |" in out
    assert out.rstrip().endswith(
        f"1 of 2 jobs met the target (exit 1, ≥ 12 of 14 named, no transformer case); files in {tmp_path / 'out'}"
    )
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [(j["exit"], j["named"], j["relu_processes"]) for j in summary] == [(1, 13, 2), (0, 2, 0)]


def test_refuses_bad_input_in_one_line(tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert module.main(["--jobs", "0"]) == 2
    assert module.main(["--out", str(tmp_path / "full")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "validation.compare_relu: error: --jobs must be at least 1, got 0",
        f"validation.compare_relu: error: --out {tmp_path / 'full'} is not empty",
    ]


def test_rejudge_compares_the_kept_runs_again_with_this_gate(tmp_path, capsys):
    """The job the gate once passed (tests/gate/data: job 4 of the real series), kept as the series
    keeps it, re-judged by ``dpbench compare`` itself: it now fails and names 12+ of the 14."""
    import gzip

    data = Path(__file__).resolve().parents[1] / "gate" / "data"
    job = tmp_path / "job04"
    (job / "results" / "Linux").mkdir(parents=True)
    for side, name in (("base", "0001_base.json"), ("relu", "0002_relu.json")):
        with gzip.open(data / f"relu-job-pass-{side}.json.gz", "rt") as f:
            (job / "results" / "Linux" / name).write_text(f.read())
    (job / "slow").mkdir()
    (job / "slow" / module.MARKER).write_text("101\n102\n")
    assert module.main(["--rejudge", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| 4 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert (cells[1], cells[3], cells[4]) == ("1", "0", "regression") and int(cells[2].split()[0]) >= 12, row
    assert "1 of 1 jobs met the target" in out
    assert sorted(p.name for p in job.rglob("*")) == [
        "0001_base.json",
        "0002_relu.json",
        "Linux",
        module.MARKER,
        "results",
        "slow",
    ]


def test_rejudge_refuses_a_directory_without_jobs(tmp_path, capsys):
    assert module.main(["--rejudge", str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err == f"validation.compare_relu: error: --rejudge {tmp_path} holds no jobNN directories\n"
    )
