"""``dpbench run``'s bad input: one line, exit 2, before any process starts, nothing saved; and a run
that saves nothing (failed, interrupted) leaves no results directory behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest
from _suites_helpers import _env, _leftovers, _sigint_when
from _user_models import SOURCE

from dpbench.cli import main
from dpbench.runner import run as run_module


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    import sys

    sys.modules.pop("my_models", None)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--workload", "no_such_mod:net"], "cannot import 'no_such_mod': No module named 'no_such_mod'"),
        (["--workload", "my_models:tiny"], "has no attribute 'tiny'; its Workload attributes: fixed, tiny_net"),
        (["--workload", "my_models:not_a_workload"], "not_a_workload is a int, expected a dpbench.Workload"),
        (["--workload", "my_models:tiny_net@hiden=2"], "override 'hiden' is no argument of tiny_net"),
        (
            ["--workload", "my_models:tiny_net@hidden=abc"],
            "--workload: workload spec 'my_models:tiny_net@hidden=abc': its model cannot be built with hidden='abc': "
            "TypeError: empty(): argument 'size' (position 1) must be tuple of ints",
        ),
        (["--workload", "hf:openai/gpt2"], "a hub id is refused: pass a directory holding its config.json"),
        (["--workload", "mlp", "--world-sizes", "1,x"], "--world-sizes: expected comma-separated ints >= 1"),
        (["--workload", "mlp", "--suites", "throughput,speed"], "--suites: expected names from throughput"),
        (["--suites", "throughputt"], "found 'throughputt' (did you mean 'throughput'?)"),
        (
            ["--workload", "mlp", "--strategies", "single,ddp@bucket_cap=5"],
            "--strategies: 'ddp@bucket_cap=5': ddp has no option 'bucket_cap' (did you mean 'bucket_cap_mb'?)",
        ),
        (["--strategies", "single,ddpp"],
         "--strategies: expected strategy names from single, dp, torch-dp, ddp, manual, allreduce, fsdp, zero, "
         "found 'ddpp' (did you mean 'ddp'?)"),
        (["--precision", "fp8"], "--precision: expected one of fp32, bf16, fp16, found 'fp8'\n"),
        (["--precision", "fp61"], "--precision: expected one of fp32, bf16, fp16, found 'fp61' (did you mean 'fp16'?)"),
        (["--budget", "ten"], "--budget: expected a duration such as 90s, 10m, 1h, found 'ten'\n"),
        (["--budget", "10"], "--budget: expected a duration such as 90s, 10m, 1h, found '10'\n"),
        (["--max-trials", "2"],
         "--max-trials: expected an int >= 3 (the fewest pairs a claim is read from), found '2'\n"),
        (["--until-settled", "--trials", "3"],
         "--until-settled: trials until the answer is settled, found with --trials 3 (a fixed number of trials "
         "per case): choose one\n"),
        (["--trials", "3", "--budget", "10m"], "--budget: trials until the answer is settled, found with --trials 3"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2_with_nothing_started_or_saved(user_dir, capsys, monkeypatch, argv, message):
    started = []
    monkeypatch.setattr(run_module, "_run_pytest", lambda *a, **k: started.append(a))
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpbench run: error: ") and message in err and err.count("\n") == 1
    assert not started and not (user_dir / "results").exists() and not (user_dir / "report.html").exists()


@pytest.fixture
def no_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.delenv("DPBENCH_DEVICE", raising=False)
    return torch.__version__


@pytest.mark.parametrize("source", ["option", "config file", "environment"])
def test_cuda_without_a_visible_gpu_is_refused_before_pytest_starts_naming_where_it_was_asked(
    user_dir, capsys, monkeypatch, no_gpu, source
):
    started = []
    monkeypatch.setattr(run_module, "_run_pytest", lambda *a, **k: started.append(a))
    argv = ["run", "--workload", "mlp"]
    named = {
        "option": "--device",
        "config file": f"{user_dir / 'dpbench.toml'}: device",
        "environment": "DPBENCH_DEVICE",
    }
    if source == "option":
        argv += ["--device", "cuda"]
    elif source == "config file":
        (user_dir / "dpbench.toml").write_text('device = "cuda"\n')
    else:
        monkeypatch.setenv("DPBENCH_DEVICE", "cuda")
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"dpbench run: error: {named[source]}: expected cpu where no CUDA device is visible (torch {no_gpu}), "
        "found 'cuda'\n"
    )
    assert not started and not (user_dir / "results").exists()


def test_cuda_with_a_visible_gpu_goes_on_to_pytest(user_dir, monkeypatch, no_gpu):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    started = []
    monkeypatch.setattr(run_module, "_run_pytest", lambda cmd, env: started.append(cmd) or 5)
    assert main(["run", "--workload", "mlp", "--device", "cuda"]) == 5  # pytest's exit: nothing saved
    (handed,) = [a for a in started[0] if a.startswith("--dpbench-settings=")]
    assert json.loads(handed.partition("=")[2])["device"] == "cuda"


@pytest.mark.parametrize("existed", [False, True])
def test_a_run_that_saves_nothing_leaves_no_results_directory_it_made(user_dir, monkeypatch, capsys, existed):
    results = user_dir / "results"
    if existed:
        (results / "earlier").mkdir(parents=True)

    def pytest_that_fails(cmd, env):  # pytest-benchmark makes its storage as it starts
        (results / "Linux-CPython-3.11-64bit").mkdir(parents=True, exist_ok=True)
        return 1

    monkeypatch.setattr(run_module, "_run_pytest", pytest_that_fails)
    assert main(["run", "--workload", "mlp", "--strategies", "single"]) == 1
    assert "no run named run was saved (pytest exit 1)" in capsys.readouterr().err
    assert (results / "earlier").is_dir() if existed else not results.exists()  # what was there before stays


@pytest.mark.slow
def test_ctrl_c_leaves_no_results_directory(tmp_path):
    marker = uuid.uuid4().hex
    tmpdir = Path(tempfile.mkdtemp(prefix="dpt-"))  # short: the forkserver's socket lives under it
    cmd = _tiny_run(tmp_path)
    try:
        # Ctrl-C in a terminal reaches the whole foreground group: dpbench run and its pytest.
        # Until settled by default: the first pass of at most the design's maximum.
        code, out = _sigint_when(cmd, _env(marker, TMPDIR=str(tmpdir)), r"trial 1/\d+ · ", delay=0.3, group=True)
        assert code == 130 and out.endswith("dpbench run: interrupted\n"), out[-3000:]
        assert list(tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))
        assert not _leftovers(marker, grace=10)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _tiny_run(tmp_path: Path, strategies: str = "single,ddp", world_sizes: str = "1,2") -> list[str]:
    """``dpbench run`` of two cases a pass by default (single and ddp on two ranks: workers to leave behind)."""
    boot = "import sys; from dpbench.cli import main; sys.exit(main())"
    cmd = [sys.executable, "-c", boot, "run", "--workload", "mlp", "--strategies", strategies]
    cmd += ["--world-sizes", world_sizes]
    cmd += ["--suites", "throughput", "--device", "cpu", "--results", str(tmp_path / "results")]
    return cmd + ["--report", str(tmp_path / "report.html")]


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, code, last",
    [
        # kill -INT of dpbench run alone (a terminal's Ctrl-C reaches its pytest too: the test above).
        (signal.SIGINT, 130, "dpbench run: interrupted\n"),
        (signal.SIGTERM, 143, "dpbench run: terminated (SIGTERM)\n"),
        (signal.SIGHUP, 129, "dpbench run: terminated (SIGHUP)\n"),
        (signal.SIGKILL, -signal.SIGKILL, None),  # nothing left to say it; its pytest dies with it
    ],
    ids=["sigint", "sigterm", "sighup", "sigkill"],
)
def test_a_signal_to_dpbench_run_alone_ends_every_process_of_the_run_within_5s(tmp_path, sig, code, last):
    """``kill -TERM`` (``timeout``, a CI cancel), a closed terminal's SIGHUP and the SIGKILL after a
    grace period reach ``dpbench run`` alone, not its pytest: each must still end pytest and its
    workers within 5 s and save nothing. Before, the parent left at once and its pytest measured on
    for minutes and saved a run nobody reported.

    The signal comes as the case's first trial starts: the forkserver helper may still be importing
    torch, a worker may wait in its rendezvous for a rank that never starts. There, on a loaded
    machine, the helper and such a worker outlived pytest until its reaper SIGKILLed them (11 of 24
    runs of this test beside a busy loop left them 6.5-7.5 s after the signal); the helper now ends
    with its parent, and its workers with it (dpbench.workers.helper_signals)."""
    marker = uuid.uuid4().hex
    tmpdir = Path(tempfile.mkdtemp(prefix="dpt-"))  # short: the forkserver's socket lives under it
    proc = subprocess.Popen(
        _tiny_run(tmp_path, "ddp", "2"),
        env=_env(marker, TMPDIR=str(tmpdir)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # what reaches the group stays between this test and the run
        # A test process may have SIGINT ignored (a background job; a module that set it): not the run.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 180
        for line in proc.stdout:  # as the first trial starts (until settled: the first pass)
            lines.append(line)
            if re.search(r"trial 1/\d+ · .*ddp", line):
                break
            assert time.monotonic() < deadline, "".join(lines)[-3000:]
        # dpbench run's own (not the parent: psutil would reap it, and Popen would lose its status):
        # pytest and its reaper, the helper and workers where started (what starts later: _leftovers).
        tree = psutil.Process(proc.pid).children(recursive=True)
        assert len(tree) >= 2, tree
        proc.send_signal(sig)
        signalled = time.monotonic()
        _, alive = psutil.wait_procs(tree, timeout=5)
        alive = [p for p in alive if _running(p)]  # a zombie has ended; its parent just has not reaped it yet
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, signalled + 5 - time.monotonic()))
        alive += [f"dpbench run ({proc.pid})"] if proc.poll() is None else []
        took = time.monotonic() - signalled
        if alive:  # they would hold the output open: end them before reading it
            os.killpg(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
        out = "".join(lines) + rest
        assert not alive, f"still running {took:.1f} s after {sig.name}: {alive}\n{out[-3000:]}"
        assert not _leftovers(marker), out[-3000:]  # nothing the tree missed (the reaper included)
        assert proc.returncode == code, out[-3000:]
        if last is not None:  # in the output, not necessarily last: see test_suites_signals.py's SIGHUP test
            assert last in out, out[-3000:]
        assert not list(tmp_path.rglob("*.json")) and not (tmp_path / "report.html").exists(), list(tmp_path.rglob("*"))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(tmpdir, ignore_errors=True)


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["--strategies", "single", "--world-sizes", "2"],
            "dpbench run: single runs at world size 1 only (the baseline: one replica), not at 2; nothing to rank: "
            "one configuration a workload (single w1), its throughput alone",
        ),
        (
            ["--world-sizes", "2,4"],
            "dpbench run: single runs at world size 1 only (the baseline: one replica), not at 2, 4",
        ),
        (
            ["--strategies", "ddp@bucket_cap_mb=5", "--world-sizes", "2"],
            "dpbench run: nothing to rank: one configuration a workload (ddp@bucket_cap_mb=5 w2), its throughput alone",
        ),
        (
            ["--strategies", "single,ddp", "--world-sizes", "1,2"],
            "dpbench run: single runs at world size 1 only (the baseline: one replica), not at 2",
        ),
        (["--world-sizes", "1,2"], None),
        (["--strategies", "ddp", "--world-sizes", "1,2"], None),
    ],
)
def test_what_the_configurations_asked_for_will_not_measure_is_said_before_the_trials(
    user_dir, monkeypatch, capsys, argv, line
):
    """``--strategies single --world-sizes 2`` measured single at one rank without a word: neither
    that world size 2 was dropped nor that one configuration cannot be ranked."""
    said = []
    monkeypatch.setattr(run_module, "_run_pytest", lambda cmd, env: said.append(capsys.readouterr().out) or 1)
    assert main(["run", *argv]) == 1  # pytest (faked) saved nothing
    (before,) = said
    assert [text for text in before.splitlines() if text.startswith("dpbench run: ")] == ([line] if line else [])


def test_a_run_whose_every_case_failed_ends_on_what_failed(user_dir, monkeypatch, capsys):
    results = user_dir / "results"
    first = "single w1: worker rank 0 failed: ValueError: shape mismatch — in your code at my_models.py:9 in forward"

    def pytest_whose_cases_fail(cmd, env):  # the session writes one failure file per failed case, line first
        where = results / "Linux-CPython-3.11-64bit" / "failures" / "0001"
        where.mkdir(parents=True)
        (where / "single-w1.txt").write_text(f"{first}\n\nsingle w1\n\nTraceback ...\n")
        time.sleep(0.01)
        (where / "ddp-w2.txt").write_text("ddp w2: worker rank 1 failed: ValueError: shape mismatch\n\nddp w2\n")
        return 1

    monkeypatch.setattr(run_module, "_run_pytest", pytest_whose_cases_fail)
    assert main(["run", "--workload", "mlp", "--strategies", "single,ddp"]) == 1
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == (
        "dpbench run: 2 cases failed, so no run named run was saved and no report (pytest exit 1); the first: " + first
    )


def test_an_interrupted_run_is_not_said_to_have_failed_for_its_failed_cases(tmp_path):
    from dpbench.runner.run import nothing_saved_line

    failed = [tmp_path / "ddp-w2.txt"]
    failed[0].write_text("ddp w2: worker rank 1 failed: ValueError: shape mismatch\n\nddp w2\n")
    assert nothing_saved_line("run", 2, failed) == "no run named run was saved (pytest exit 2); no report"
    assert nothing_saved_line("run", 1, []) == "no run named run was saved (pytest exit 1); no report"
    assert nothing_saved_line("run", 1, failed) == (
        "1 case failed, so no run named run was saved and no report (pytest exit 1); the first: "
        "ddp w2: worker rank 1 failed: ValueError: shape mismatch"
    )
