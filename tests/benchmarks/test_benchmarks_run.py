"""Every benchmark of ``benchmarks/`` runs end to end at its smallest size (pyperf's habit with its
examples): the fewest rounds, steps and trials it accepts, ``mlp`` where it takes a workload, world
size 1 or 2, its outputs under ``tmp_path``. Each asserts its exit code and the table or JSON it
wrote; the numbers themselves are the dated ones on the validation pages, measured at full size.

Run here elsewhere: ``dp_overhead`` (tests/parallel/test_bench_script.py), ``sharding``
(tests/strategies/test_bench_sharding_script.py), ``trial_cv`` (tests/launcher/test_bench_trial_cv.py).
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _count(out: str, pattern: str) -> int:
    return sum(1 for line in out.splitlines() if re.fullmatch(pattern, line))


@pytest.mark.parametrize(
    "module, argv, expected",
    [
        pytest.param(
            "benchmarks.history_scale",
            ["--commits", "12", "--benchmarks", "4", "--dir", "{tmp}/runs"],
            {r"4 series x 12 commits: load \+ change points .* \d+ changes reported \(.*/history-scale\.html\)": 1},
            id="history_scale",
        ),
        pytest.param(
            "benchmarks.allreduce_vs_ddp",
            ["--rounds", "2", "--steps", "1", "--global-batch", "8"],  # 2 samples: the p95 needs two
            {
                r"strategy {16}median ms   p95 ms  samples/s  comm ms   vs ddp": 1,
                r"ddp +[\d.]+ +[\d.]+ +\d+ +- +\+0\.0%": 1,
                r"allreduce (per-param|bucketed|overlap) +[\d.]+ +[\d.]+ +\d+ +[\d.]+ +[+-][\d.]+%": 3,
            },
            marks=pytest.mark.slow,  # four runs of two ranks each
            id="allreduce_vs_ddp",
        ),
        pytest.param(
            "benchmarks.gradscaler_sync",
            ["--device", "cpu", "--rounds", "2", "--steps", "1", "--batch", "8"],
            {r"gradscaler sync \(mlp, batch 8, cpu, 2 rounds x 1 steps\): with [\d.]+ ms, .* ratio [\d.]+ .*": 1},
            marks=pytest.mark.slow,  # first autocast + optimizer step in the process
            id="gradscaler_sync",
        ),
        pytest.param(
            "benchmarks.harness_overhead",
            ["--rounds", "3", "--steps", "1", "--global-batch", "8"],
            {
                r"workload {8}harness ms   bare ms   ratio      95% interval         pairs IQR": 1,
                # the pairs' IQR is of differences: below zero where a round ran the bare loop slower
                r"mlp +[\d.]+ +[\d.]+ +[\d.]+ +\[[\d.]+, [\d.]+\] +\[-?[\d.]+, -?[\d.]+\] .*": 1,
                r"SESSION-RATIO mlp [\d.]+(e-?\d+)?": 1,
            },
            marks=pytest.mark.slow,  # a worker process and its steps
            id="harness_overhead",
        ),
        pytest.param(
            "benchmarks.memory_estimate",
            ["--workloads", "mlp"],
            {
                r"\| workload \| batch \| precision \| estimated \(bytes\) \| measured \(bytes\) \| error \| .*": 1,
                r"\| `mlp` \| 64 \| (fp32|bf16) \| [\d,]+ \| [\d,]+ \| [+-][\d.]+% \| [\d.]+ \|": 2,
            },
            marks=pytest.mark.slow,  # a spawned process measures each peak
            id="memory_estimate",
        ),
        pytest.param(
            "benchmarks.checkpointing",
            ["--workloads", "transformer", "--trials", "1", "--steps", "1"],
            {
                r"\| `transformer` \| 64 \| (False|True) \| [\d,]+ \| [\d,]+ \| [+-][\d.]+% \|": 2,
                r"`transformer` at batch 64: checkpointing saves [\d,]+ bytes measured, [\d,]+ estimated": 1,
                r"step time checkpointed ÷ plain: [\d.]+ \(.*, 1 interleaved pairs; plain median [\d.]+ ms\)": 1,
            },
            marks=pytest.mark.slow,  # two launches of a transformer, two spawned peaks
            id="checkpointing",
        ),
        pytest.param(
            "benchmarks.predict",
            ["--repeats", "1"],  # the default run: tests/predict/data/step_run.json
            {
                r"wall times: [\d.]+ s": 1,
                r"median [\d.]+ s against a target of 5 s: (met|missed)": 1,
            },
            marks=pytest.mark.slow,  # dpbench predict in a fresh interpreter
            id="predict",
        ),
        pytest.param(
            "benchmarks.report",
            ["--runs", "1", "--repeat", "1", "--keep", "{tmp}"],
            {
                r"\d+ benchmarks per run; 1 render\(s\) per size in a fresh process each": 1,
                r"\| 1 \| [\d.]+ \([\d.]+–[\d.]+\) \| [\d.]+ \| [\d.]+ \| [\d.]+ \|": 1,
            },
            marks=pytest.mark.slow,  # a report of ~70 benchmarks in a fresh interpreter
            id="report",
        ),
        pytest.param(
            "benchmarks.sampler_overhead",
            ["--rounds", "1", "--seconds", "0.01", "--size", "32", "--backend", "cpu"],
            {
                r"  round 1: wall off [\d.]+s on [\d.]+s ratio [\d.]+ \| cpu off .*": 1,
                r"backend: cpu": 1,
                r"sampler thread CPU \(idle process, in place\): \d+ us per sample = .*": 1,
            },
            marks=pytest.mark.slow,  # the sampler's own CPU is read over 3 s of sleep
            id="sampler_overhead",
        ),
        pytest.param(
            "benchmarks.parity_spread",
            ["--seeds", "2", "--strategies", "", "--json", "{tmp}/spread.json"],  # the spread needs 2 seeds
            {
                r"single seed [01]: 0\.\d{4}": 2,
                r"sd across 2 seeds: [\d.]+ images; tolerance 0\.\d{4}": 1,
            },
            marks=pytest.mark.slow,  # digits-mlp trained twice for its 10 epochs
            id="parity_spread",
        ),
    ],
)
def test_the_benchmark_runs_at_its_smallest(module, argv, expected, tmp_path, capsys):
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    assert importlib.import_module(module).main(argv) == 0
    out = capsys.readouterr().out
    for pattern, count in expected.items():
        assert _count(out, pattern) == count, f"{pattern!r} in:\n{out}"


@pytest.mark.slow  # a fresh interpreter
def test_python_m_benchmarks_lists_every_benchmark_and_runs_one_by_name(tmp_path, capsys):
    listing = importlib.import_module("benchmarks.__main__")
    assert listing.main([]) == 0
    printed = capsys.readouterr().out
    names = sorted(path.stem for path in (ROOT / "benchmarks").glob("[!_]*.py"))
    assert [line.split()[0] for line in printed.splitlines()[2:]] == names == sorted(listing.available())
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "history_scale", "--commits", "8", "--benchmarks", "4"]
        + ["--dir", str(tmp_path / "runs")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("4 series x 8 commits: ") and (tmp_path / "history-scale.html").exists()
    unknown = subprocess.run(
        [sys.executable, "-m", "benchmarks", "no_such_bench"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert unknown.returncode == 2 and "benchmarks: NAME: expected one of " in unknown.stderr


@pytest.mark.slow  # five fresh-process trials of one case
def test_fingerprint_overhead_measures_one_pair_of_first_trials(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DPBENCH_TRIALS", "2")  # the profile's trials: the case's share counts them
    out_file = tmp_path / "fingerprint.json"
    argv = ["--pairs", "1", "--cases", "single:mlp:1", "--json", str(out_file)]
    assert importlib.import_module("benchmarks.fingerprint_overhead").main(argv) == 0
    found = json.loads(out_file.read_text())
    (case,) = found["cases"].values()
    (pair,) = case["pairs"]
    assert list(found["cases"]) == ["single-mlp-w1"] and found["profile"] == "quick"
    assert pair["with"]["fingerprint_s"] > 0 and pair["without"]["fingerprint_s"] is None
    assert 0 < pair["fingerprint_share"] < 1 and case["order_effect"] is None  # one pair: no order to compare
    assert "single-mlp-w1 pair 1: with " in capsys.readouterr().out


@pytest.mark.slow  # two pytest sessions of the suites, one case each
def test_trace_overhead_runs_the_suites_untraced_and_traced(tmp_path, monkeypatch, capsys):
    # One case of one trial; the workloads and world sizes narrowed so the sessions collect little.
    monkeypatch.setenv("DPBENCH_TRIALS", "1")
    monkeypatch.setenv("DPBENCH_WORKLOADS", "mlp")
    monkeypatch.setenv("DPBENCH_WORLD_SIZES", "1")
    monkeypatch.setenv("DPBENCH_MEMORY_ESTIMATE", "state")  # the fit check's traced peak: ~2 s a session
    out_file = tmp_path / "trace.json"
    argv = ["--passes", "1", "-k", "test_throughput and single-mlp-w1", "--json", str(out_file)]
    assert importlib.import_module("benchmarks.trace_overhead").main(argv) == 0
    found = json.loads(out_file.read_text())
    summary = found["summary"]
    assert summary["cases_traced"] == 1 and len(summary["wall"]) == 1
    assert [case for case, _ in found["overheads"]] == ["suites/test_throughput.py::test_throughput[single-mlp-w1]"]
    assert [case for case, _ in found["timed"]] == ["suites/test_throughput.py::test_throughput[single-mlp-w1]"]
    assert re.search(r"^pass 1: untraced [\d.]+ s, traced [\d.]+ s: [\d.]+×$", capsys.readouterr().out, re.M)
