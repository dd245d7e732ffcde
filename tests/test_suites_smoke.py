"""The suites run end to end as a user runs them: saved JSON with the documented extra_info
(schema 2: trials, controls), raw timings, published timelines, readable by pytest-benchmark,
and no process left behind — also when a strategy fails. Interrupted runs (Ctrl-C, SIGTERM):
test_suites_signals.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from _suites_helpers import ROOT, _env, _leftovers, _pytest

from dpbench.schema import EXTRA_INFO_FIELDS, SCHEMA_VERSION

pytestmark = pytest.mark.slow
ONE_TRIAL = {"DPBENCH_TRIALS": "1"}


def test_suites_save_the_documented_run(tmp_path):
    marker = uuid.uuid4().hex
    storage = tmp_path / "results"
    selection = (
        "test_throughput and (single or ddp) or test_allreduce_vs_ddp and not mode"
        " or test_collective and all_reduce and 4KiB and not 64KiB and not bucket"
    )
    proc = _pytest(
        ["suites/", "-k", selection, f"--benchmark-storage=file://{storage}", "--benchmark-save=smoke", "-q"],
        _env(marker, DPBENCH_MEMORY_ESTIMATE="peak"),  # the suites' default, as a user runs them
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "seconds per step" in proc.stdout  # the terminal table says what its columns are
    saved = list(storage.glob("*/0001_smoke.json"))
    assert len(saved) == 1, list(storage.rglob("*"))
    run = json.loads(saved[0].read_text())
    assert run["machine_info"]["dpbench"]["lock_hash"]
    assert run["machine_info"]["dpbench"]["profile"]["trials"] == 2
    assert run["machine_info"]["dpbench"]["remeasure"]["trials"] > 0  # the extra pass judged every trial
    by_kind: dict[str, list] = {}
    for bench in run["benchmarks"]:
        by_kind.setdefault(bench["extra_info"]["kind"], []).append(bench)
        info = bench["extra_info"]
        trials = info["trials"]
        assert trials["count"] == 2 and len(trials["step_time_s"]) == 2 and len(trials["control_s"]) == 2
        assert len(trials["disturbed"]) == 2  # per trial: null, or why it was disturbed (docs/disturbed-trials.md)
        assert all(c > 0 for c in trials["control_s"]) and trials["cv"] is not None
        # pytest-benchmark's rounds are the trials (their medians); every timed round is kept beside them.
        assert bench["stats"]["rounds"] == 2 and bench["stats"]["data"] == trials["step_time_s"]
        assert [len(r) for r in trials["round_times_s"]] == [trials["rounds_per_trial"]] * 2
        assert bench["options"]["timer"].endswith("worker_clock")
    assert {b["extra_info"]["strategy"] for b in by_kind["training"]} == {"single", "ddp"}
    # Every case proves it trained single's model (dpbench.results.fingerprint).
    from dpbench.results.fingerprint import FingerprintStatus, compare_fingerprints

    infos = {b["extra_info"]["strategy"]: b["extra_info"] for b in by_kind["training"]}
    fingerprints = {strategy: info["fingerprint"] for strategy, info in infos.items()}
    # The probe's 2 steps, the quick profile's warm-up round and timed rounds: at most the first 8.
    steps = 2 + (1 + infos["single"]["trials"]["rounds_per_trial"]) * infos["single"]["steps_per_round"]
    assert fingerprints["single"]["step"] == 2 and len(fingerprints["single"]["losses"]) == min(8, steps)
    verdict = compare_fingerprints(fingerprints["ddp"], fingerprints["single"])
    assert verdict.status is FingerprintStatus.MATCHES, verdict.reason
    for bench in by_kind["training"]:
        info = bench["extra_info"]
        assert set(EXTRA_INFO_FIELDS) <= set(info), set(EXTRA_INFO_FIELDS) - set(info)
        assert info["schema"] == SCHEMA_VERSION == 2 and info["workload"] == "mlp"
        assert (
            info["step_time_s"]
            == sorted(info["trials"]["step_time_s"])[0]
            + (sorted(info["trials"]["step_time_s"])[1] - sorted(info["trials"]["step_time_s"])[0]) / 2
        )
        assert info["samples_per_s"] == info["global_batch"] / info["step_time_s"]
        lo, hi = info["step_time_ci95"]
        assert lo < info["step_time_s"] < hi
        # One estimator: pytest-benchmark's median is the headline step time, to the last digit.
        assert bench["stats"]["median"] == info["step_time_s"]
        assert "step_time_p50" not in info and info["harness_settings"]["added_runtime_env"] == {}
        # A fresh forkserver helper before each trial pass (dpbench.workers.forkserver.fresh_forkserver).
        assert (
            info["harness_settings"]["worker_start"]
            == run["machine_info"]["dpbench"]["worker_start"]
            == ("forkserver, a fresh helper each trial pass")
        )
        for timeline in info["trials"]["timelines"]:
            path = saved[0].parent / timeline
            assert path.is_file() and path.stat().st_size > 0
        assert info["sampler"]["sample_count"] > 0
        # On CPU there is no energy counter: absent with the reason, never 0 J; no GPU window to judge.
        assert info["energy"]["absent"] == "no_counter" and info["energy"]["j_per_sample"] is None
        assert info["energy"]["idle_absent"] == "no_counter" and info["sampled_window"] is None
        # Minor page faults per step: one value per trial, the headline their median (two trials: the mean).
        faults = info["trials"]["minor_faults_per_step"]
        assert len(faults) == 2 and all(f >= 0 for f in faults)
        assert info["minor_faults_per_step"] == (faults[0] + faults[1]) / 2
    # Interleaved: trial 2 of any case comes after trial 1 of every case — among the trials of the planned
    # passes (a disturbed trial's re-measurement, in the extra pass after them, takes its slot and its
    # later position: docs/disturbed-trials.md).
    planned = [
        [
            o if d is None else None
            for o, d in zip(b["extra_info"]["trials"]["order"], b["extra_info"]["trials"]["disturbed"])
        ]
        for b in run["benchmarks"]
    ]
    firsts, seconds = [o[0] for o in planned if o[0] is not None], [o[1] for o in planned if o[1] is not None]
    assert firsts and seconds and max(firsts) < min(seconds), planned
    # ddp-mlp-w2 is named by two suites and measured once: both publish the same trials.
    ddp = [b["extra_info"] for b in by_kind["training"] if b["name"].endswith("[ddp-mlp-w2]")]
    assert len(ddp) == 2 and {i["suite"] for i in ddp} == {"throughput", "allreduce"}
    assert ddp[0]["trials"]["step_time_s"] == ddp[1]["trials"]["step_time_s"]
    assert ddp[0]["case_key"] == ddp[1]["case_key"]
    (comm,) = by_kind["collective"]
    assert comm["extra_info"]["busbw_gbps"] > 0 and comm["extra_info"]["size_bytes"] == 4096
    assert comm["extra_info"]["trials"]["minor_faults_per_step"] == [None, None]  # no training steps
    assert (
        comm["extra_info"]["time_s"]
        == sorted(comm["extra_info"]["trials"]["step_time_s"])[0]
        + (
            sorted(comm["extra_info"]["trials"]["step_time_s"])[1]
            - sorted(comm["extra_info"]["trials"]["step_time_s"])[0]
        )
        / 2
    )
    # ... and the gate reads the same numbers: the saved run against itself, ratio exactly 1.
    from dpbench.gate.compare import compare_runs

    cmp = compare_runs(saved[0], saved[0].parent / "0001_smoke.json")
    for judged in cmp.benchmarks:
        bench = next(b for b in run["benchmarks"] if b["fullname"] == judged.name)
        headline = bench["extra_info"].get("step_time_s", bench["extra_info"].get("time_s"))
        assert judged.baseline_s == judged.candidate_s == headline == bench["stats"]["median"]
        assert judged.ratio == 1.0
    # pytest-benchmark's own tooling reads what we saved.
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_benchmark",
            "--storage",
            f"file://{storage}",
            "compare",
            "0001",
            "--columns=min,median",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert listed.returncode == 0, listed.stderr
    assert "test_throughput[ddp-mlp-w2]" in listed.stdout
    # ... and so does our report, timelines included.
    html = tmp_path / "report.html"
    from dpbench.cli import main  # in this process: a fresh interpreter would only import again (~2 s)

    assert main(["report", str(saved[0]), "-o", str(html)]) == 0
    page = html.read_text()
    assert "ddp w2" in page and "single w1" in page
    assert page.count("<img") >= 5
    assert "No sampler timelines" not in page and "could not be read" not in page and "holds no samples" not in page
    assert not _leftovers(marker, grace=10)


def test_a_failing_strategy_fails_only_its_case(tmp_path):
    marker = uuid.uuid4().hex
    suite = tmp_path / "suite_fault"
    suite.mkdir()
    (suite / "test_fault.py").write_text(
        textwrap.dedent("""
        import pytest
        from torch import nn
        import dpbench
        from dpbench.measure import TrainingCase, measure_training

        class Exploding(nn.Linear):
            def forward(self, x):
                raise RuntimeError("exploding forward on purpose")

        def exploding_model():
            return Exploding(784, 10)

        BOOM = dpbench.Workload(name="boom", model=exploding_model, batch=dpbench.get_workload("mlp").batch)
        CASES = [TrainingCase(strategy="ddp", workload=BOOM, world_size=2, global_batch=8),
                 TrainingCase(strategy="single", workload="mlp", world_size=1, global_batch=8)]

        @pytest.mark.parametrize("case", CASES, ids=["boom", "after"])
        def test_case(benchmark, case, profile, trials):
            info, _ = measure_training(benchmark, case, session=trials, profile=profile, suite="fault")
            assert info["samples_per_s"] > 0
    """)
    )
    storage = tmp_path / "results"
    # One trial a case: what is checked is that the failure stays in its case and is said in one line.
    proc = _pytest([str(suite), "-q", "--dpbench", f"--benchmark-storage=file://{storage}"], _env(marker, **ONE_TRIAL))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert "1 failed, 1 passed" in out, out[-4000:]
    # One line for the failed case: the rank, the exception, the user's own frame, the traceback's file.
    source = (suite / "test_fault.py").read_text().splitlines()
    line_no = next(i for i, line in enumerate(source, 1) if 'raise RuntimeError("exploding' in line)
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("ddp-boom-w2 (batch 8): worker rank")]
    match = re.fullmatch(
        r"ddp-boom-w2 \(batch 8\): worker ranks? [0-9, ]+ failed \(world_size=2\): RuntimeError: exploding forward "
        r"on purpose — in your code at "
        + re.escape(
            f'{suite / "test_fault.py"}:{line_no} in forward: raise RuntimeError("exploding forward on purpose")'
        )
        + r" \(the full traceback: (?P<path>\S+)\)",
        line,
    )
    assert match, line
    assert "Traceback (most recent call last)" not in out and "dpbench/workers" not in out, out[-4000:]
    (written,) = storage.glob("*/failures/*/ddp-boom-w2.txt")
    assert Path(match["path"]).resolve() == written.resolve()
    text = written.read_text()
    assert text.startswith(f"{line}\n\n"), text[:500]  # the line first: dpbench run says it when nothing was saved
    # Every failing rank's whole traceback is in the file.
    assert text.count("Traceback (most recent call last)") >= 1 and "dpbench/workers" in text, text
    assert not _leftovers(marker, grace=10)
    # -v: pytest's own traceback stays, the line is added.
    verbose = _pytest(
        [str(suite), "-v", "-k", "boom", "--dpbench", f"--benchmark-storage=file://{storage}"],
        _env(marker, **ONE_TRIAL),
    )
    assert verbose.returncode == 1 and "Traceback (most recent call last)" in verbose.stdout, verbose.stdout[-4000:]
    assert "ddp-boom-w2 (batch 8): worker rank" in verbose.stdout
    assert not _leftovers(marker, grace=10)


def test_suites_run_once_each_with_benchmark_disable(tmp_path):
    """`--benchmark-disable` (a quick "does every case work" pass) runs each target once."""
    marker = uuid.uuid4().hex
    # A case of each kind: in-process (dp) and process-group (ddp) training, dp's phases, a collective.
    selection = (
        "test_throughput and dp and w2 and not fsdp and not torch-dp or test_dp_phases"
        " or test_collective and 4KiB-all_reduce and not 64KiB"
    )
    proc = _pytest(
        ["suites/", "-q", "--benchmark-disable", "-k", selection, f"--benchmark-storage=file://{tmp_path / 'results'}"],
        _env(marker),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout
    assert "× 1 trials" in proc.stdout  # a smoke pass: one trial, one round per case
    assert not _leftovers(marker, grace=10)


def test_a_bad_trial_count_is_a_usage_error_in_one_line(tmp_path):
    # One session: the option (DPBENCH_TRIALS=0 and 2.5 take the same path, unit-tested with their
    # messages in tests/measure/test_settings.py).
    proc = _pytest(
        ["suites/test_throughput.py", "--collect-only", "-q", "--dpbench-trials=x"], _env("none"), timeout=120
    )
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        "ERROR: --dpbench-trials must be an integer >= 1 (fresh-process trials per case), got 'x'"
    ), proc.stderr[-2000:]


def test_the_suites_refuse_pytest_xdist_in_one_line():
    message = (
        "ERROR: the suites measure each case in fresh-process trials that must not share the machine with other "
        "measurements: run them without pytest-xdist's -n/--numprocesses"
    )
    for env, args in (({}, ["-n", "2"]), ({"PYTEST_XDIST_WORKER": "gw0"}, [])):
        proc = _pytest(["suites/test_throughput.py", "--collect-only", "-q", *args], _env("none", **env), timeout=120)
        assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines()[-1] == message, proc.stderr[-2000:]


def test_chosen_strategies_keep_every_collective_and_only_their_training_cases():
    """``--dpbench-strategies`` (what ``dpbench run --strategies`` passes) over every suite: the
    training cases of other strategies are deselected; the collectives, of no strategy, all stay."""

    def collected(*args: str) -> list[str]:
        proc = _pytest(["suites/", "--collect-only", "-q", *args], _env("none"), timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return [line for line in proc.stdout.splitlines() if line.startswith("suites/")]

    every, chosen = collected(), collected("--dpbench-strategies", "fsdp")
    collectives = [item for item in every if item.startswith("suites/test_comm.py::")]
    assert collectives and [item for item in chosen if item.startswith("suites/test_comm.py::")] == collectives
    training = [item for item in chosen if item.startswith(("suites/test_throughput.py", "suites/test_scaling.py"))]
    assert training and all("[fsdp-" in item for item in training), training
    # A configuration is a case of its own beside the strategy's plain one.
    configured = collected("--dpbench-strategies", "fsdp,fsdp@reshard_after_forward=false")
    plain = sorted(item for item in chosen if item.startswith("suites/test_throughput.py"))
    throughput = sorted(item for item in configured if item.startswith("suites/test_throughput.py"))
    assert plain and throughput == sorted(
        item for base in plain for item in (base, base[:-1] + "-reshard_after_forward=False]")
    ), throughput
