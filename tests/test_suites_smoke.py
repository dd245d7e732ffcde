"""The suites run end to end as a user runs them: saved JSON with the documented extra_info
(schema 2: trials, controls), raw timings, published timelines, readable by pytest-benchmark,
and no process left behind — also when a strategy fails and when the run is interrupted with
Ctrl-C (in the middle of a later case, and during the save)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from dpbench.schema import EXTRA_INFO_FIELDS, SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _env(marker: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DPBENCH_PROFILE": "quick",
            "DPBENCH_WORKLOADS": "mlp",
            "DPBENCH_WORLD_SIZES": "1,2",
            "DPBENCH_TRIALS": "2",
            "DPBENCH_SMOKE_MARKER": marker,
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def _leftovers(marker: str, grace: float = 0.0) -> list[psutil.Process]:
    """Processes still alive that inherited this test's marker (workers of the pytest run).

    With ``grace``, wait up to that long for them to go: multiprocessing's forkserver and
    resource tracker exit when they see their parent's pipe close, a moment after it exits.
    """
    deadline = time.monotonic() + grace
    while True:
        found = _alive(marker)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def _alive(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("DPBENCH_SMOKE_MARKER") == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _pytest(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_suites_save_the_documented_run(tmp_path):
    marker = uuid.uuid4().hex
    storage = tmp_path / "results"
    selection = (
        "test_throughput and (single or ddp) or test_allreduce_vs_ddp and not mode"
        " or test_collective and all_reduce and 4KiB and not 64KiB and not bucket"
    )
    proc = _pytest(
        ["suites/", "-k", selection, f"--benchmark-storage=file://{storage}", "--benchmark-save=smoke", "-q"],
        _env(marker),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "seconds per step" in proc.stdout  # the terminal table says what its columns are
    saved = list(storage.glob("*/0001_smoke.json"))
    assert len(saved) == 1, list(storage.rglob("*"))
    run = json.loads(saved[0].read_text())
    assert run["machine_info"]["dpbench"]["lock_hash"]
    assert run["machine_info"]["dpbench"]["profile"]["trials"] == 2
    by_kind: dict[str, list] = {}
    for bench in run["benchmarks"]:
        by_kind.setdefault(bench["extra_info"]["kind"], []).append(bench)
        info = bench["extra_info"]
        trials = info["trials"]
        assert trials["count"] == 2 and len(trials["step_time_s"]) == 2 and len(trials["control_s"]) == 2
        assert all(c > 0 for c in trials["control_s"]) and trials["cv"] is not None
        # pytest-benchmark's rounds are the trials (their medians); every timed round is kept beside them.
        assert bench["stats"]["rounds"] == 2 and bench["stats"]["data"] == trials["step_time_s"]
        assert [len(r) for r in trials["round_times_s"]] == [trials["rounds_per_trial"]] * 2
        assert bench["options"]["timer"].endswith("worker_clock")
    assert {b["extra_info"]["strategy"] for b in by_kind["training"]} == {"single", "ddp"}
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
        # Minor page faults per step: one value per trial, the headline their median (two trials: the mean).
        faults = info["trials"]["minor_faults_per_step"]
        assert len(faults) == 2 and all(f >= 0 for f in faults)
        assert info["minor_faults_per_step"] == (faults[0] + faults[1]) / 2
    # Interleaved: trial 2 of any case comes after trial 1 of every case.
    orders = [b["extra_info"]["trials"]["order"] for b in run["benchmarks"]]
    assert max(o[0] for o in orders) < min(o[1] for o in orders), orders
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
    made = subprocess.run(
        [sys.executable, "-m", "dpbench.cli", "report", str(saved[0]), "-o", str(html)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert made.returncode == 0, made.stderr
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
    proc = _pytest([str(suite), "-q", "--dpbench", f"--benchmark-storage=file://{tmp_path / 'results'}"], _env(marker))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert "1 failed, 1 passed" in out, out[-4000:]
    assert "exploding forward on purpose" in out  # the worker's traceback reaches the report
    assert not _leftovers(marker, grace=10)


def _sigint_when(cmd: list[str], env: dict[str, str], when: str, *, delay: float = 0.0) -> tuple[int, str]:
    """Run ``cmd``, send SIGINT ``delay`` s after a line matches the regex ``when``; (exit code, output)."""
    # A shell's background job starts with SIGINT ignored, and Python keeps an ignored SIGINT:
    # give the run the default disposition so it gets KeyboardInterrupt as in a terminal.
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            lines.append(line)
            if re.search(when, line):
                time.sleep(delay)
                proc.send_signal(signal.SIGINT)
                break
            assert time.monotonic() < deadline, "".join(lines)[-3000:]
        rest, _ = proc.communicate(timeout=90)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(lines)


def _interrupted_run(tmp_path, marker: str, *, when: str, args: list[str], extra_plugin: str | None = None):
    """Start a suite run, send SIGINT once a line matches the regex ``when``; return its output."""
    storage = tmp_path / "results"
    earlier = storage / "Some-Machine" / "0001_earlier.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text(json.dumps({"benchmarks": [], "machine_info": {}, "version": "x"}))
    before = earlier.read_bytes()
    # Not under tmp_path: the forkserver's socket lives under TMPDIR and must fit a Unix socket path.
    tmpdir = Path(tempfile.mkdtemp(prefix="dpt-"))
    try:
        env = _env(marker, TMPDIR=str(tmpdir))
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *args,
            "-q",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save=interrupted",
        ]
        if extra_plugin:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
            cmd += ["-p", extra_plugin]
        code, out = _sigint_when(cmd, env, when, delay=0.3)
        assert code != 0, out[-3000:]
        assert earlier.read_bytes() == before, "an earlier run was changed"
        saved = sorted(p.name for p in storage.rglob("*.json") if p != earlier)
        assert saved == [], f"an interrupted session saved {saved}"
        assert not list(storage.rglob("timelines/*")), "an interrupted session published timelines"
        assert not list(tmpdir.glob("dpbench-*")), list(tmpdir.iterdir())
        assert not _leftovers(marker, grace=10)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return out


def test_ctrl_c_in_a_later_case_saves_nothing_and_keeps_earlier_runs(tmp_path):
    marker = uuid.uuid4().hex
    # Interrupt in the middle of the second trial pass, cases into it: several cases were complete.
    out = _interrupted_run(
        tmp_path, marker, when=r"trial 2/2 · .*ddp-mlp-w2", args=["suites/", "-k", "test_throughput"]
    )
    assert "interrupted: nothing was saved" in out, out[-3000:]


def test_ctrl_c_during_the_save_leaves_no_file(tmp_path):
    marker = uuid.uuid4().hex
    # A plugin that makes the save slow enough to be interrupted, announcing when it is in it.
    (tmp_path / "slow_save.py").write_text(
        textwrap.dedent("""
        import sys, time
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_benchmark_update_json(config, benchmarks, output_json):
            print("SAVING NOW", flush=True)
            sys.stdout.flush()
            time.sleep(20)
    """)
    )
    _interrupted_run(
        tmp_path,
        marker,
        when="SAVING NOW",
        extra_plugin="slow_save",
        args=["suites/", "-k", "test_throughput and single"],
    )


def test_suites_run_once_each_with_benchmark_disable(tmp_path):
    """`--benchmark-disable` (a quick "does every case work" pass) runs each target once."""
    marker = uuid.uuid4().hex
    selection = "test_throughput and dp and w2 or test_dp_phases or test_collective and 4KiB and not 64KiB"
    proc = _pytest(
        ["suites/", "-q", "--benchmark-disable", "-k", selection, f"--benchmark-storage=file://{tmp_path / 'results'}"],
        _env(marker),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout
    assert "× 1 trials" in proc.stdout  # a smoke pass: one trial, one round per case
    assert not _leftovers(marker, grace=10)


def test_bad_trial_counts_are_usage_errors(tmp_path):
    for env, args in (({"DPBENCH_TRIALS": "0"}, []), ({"DPBENCH_TRIALS": "2.5"}, []), ({}, ["--dpbench-trials=x"])):
        proc = _pytest(["suites/test_throughput.py", "--collect-only", "-q", *args], _env("none", **env), timeout=120)
        assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "must be an integer >= 1" in proc.stderr, proc.stderr[-2000:]


def test_the_suites_refuse_pytest_xdist_in_one_line():
    message = (
        "ERROR: the suites measure each case in fresh-process trials that must not share the machine with other "
        "measurements: run them without pytest-xdist's -n/--numprocesses"
    )
    for env, args in (({}, ["-n", "2"]), ({"PYTEST_XDIST_WORKER": "gw0"}, [])):
        proc = _pytest(["suites/test_throughput.py", "--collect-only", "-q", *args], _env("none", **env), timeout=120)
        assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines()[-1] == message, proc.stderr[-2000:]


def test_ctrl_c_after_the_save_keeps_the_complete_run_and_exits_cleanly(tmp_path):
    """A SIGINT once the run is saved (here: during pytest's unconfigure) changes nothing on disk:
    the run is complete, pytest exits 0 and says the signal came late. Before, it escaped pytest
    as a KeyboardInterrupt traceback (exit -2) beside the saved run: the fault soak's one finding."""
    marker = uuid.uuid4().hex
    (tmp_path / "late_plugin.py").write_text(
        textwrap.dedent("""
        import sys, time
        import pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_unconfigure(config):
            print("UNCONFIGURE NOW", flush=True)
            time.sleep(3)
    """)
    )
    storage = tmp_path / "results"
    env = _env(marker, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "late_plugin",
        "suites/",
        "-q",
        "-k",
        "test_throughput and single",
        f"--benchmark-storage=file://{storage}",
        "--benchmark-save=late",
    ]
    code, out = _sigint_when(cmd, env, "UNCONFIGURE NOW")
    assert code == 0, out[-3000:]
    assert "KeyboardInterrupt" not in out, out[-3000:]
    assert "SIGINT came after the session had settled its results: ignored" in out, out[-3000:]
    (saved,) = storage.glob("*/0001_late.json")
    names = {b["name"] for b in json.loads(saved.read_text())["benchmarks"]}
    assert names == {"test_throughput[single-mlp-w1]"}, names
    assert not _leftovers(marker, grace=10)


_EARLY_HOOKS = {
    # While the measuring plugin imports torch (the first import of torch in this pytest): noted,
    # acted on once the imports are done (unwinding through torch's import aborted Python).
    "torch-import": """
        import sys

        class _Finder:
            def find_spec(self, name, path=None, target=None):
                if name == "torch":
                    sys.meta_path.remove(self)
                    os.kill(os.getpid(), SIG)
                return None

        sys.meta_path.insert(0, _Finder())
    """,
    # The measuring session is registered once imported, before any pytest_configure.
    "import": """
        def pytest_plugin_registered(plugin, manager):
            if getattr(plugin, "__name__", "") == "dpbench.measure.plugin.session":
                os.kill(os.getpid(), SIG)
    """,
    # In the suites' own pytest_configure (before pytest's terminal is set up, which configures
    # after it): exit 2 with no line at all for a SIGINT, -15 for a SIGTERM (found by the soak).
    "suites-configure": """
        def pytest_plugin_registered(plugin, manager):
            if getattr(plugin, "__name__", "") == "dpbench.measure.plugin.session":
                original = plugin.resolve_profile

                def resolve_profile(*args, **kwargs):
                    os.kill(os.getpid(), SIG)
                    return original(*args, **kwargs)

                plugin.resolve_profile = resolve_profile
    """,
    # After the suites' own pytest_configure, before the session starts (pytest then calls no
    # pytest_sessionfinish: found by scripts/soak_faults.py with a fault in the first 4 s).
    "configure": """
        import pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_sessionstart(session):
            os.kill(os.getpid(), SIG)
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["torch-import", "import", "suites-configure", "configure"])
@pytest.mark.parametrize(
    "sig, code, why",
    [(signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGINT, 2, "interrupted")],
    ids=["sigterm", "sigint"],
)
def test_a_signal_while_the_suites_start_says_so_in_one_line(tmp_path, sig, code, why, moment):
    """The measuring plugin imports torch and dpbench for seconds, then pytest configures the
    session: a SIGTERM or SIGINT in either ends the run with dpbench's one line and the exit status
    of an interrupted run, not a bare -15, pytest's KeyboardInterrupt traceback or exit 2 for a
    SIGTERM (found by scripts/soak_faults.py)."""
    (tmp_path / "early_plugin.py").write_text(f"import os\nSIG = {int(sig)}\n" + textwrap.dedent(_EARLY_HOOKS[moment]))
    storage = tmp_path / "results"
    env = _env(
        uuid.uuid4().hex, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    )
    # One stream, in the order it was written (the environment has PYTHONUNBUFFERED=1), as a terminal shows it.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "early_plugin",
            "suites/",
            "-q",
            "-k",
            "test_throughput and single",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save=early",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        # A test runner started in the background may have SIGINT ignored; the child must not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    out = proc.stdout
    assert proc.returncode == code, out[-3000:]
    assert out.strip().splitlines()[-1] == (
        f"dpbench: {why}: nothing was saved (the run had not started); earlier runs are untouched"
    ), out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert not list(storage.rglob("*.json"))  # no run saved (pytest-benchmark may have made the directory)
