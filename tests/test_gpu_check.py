"""tools/gpu-check, checked on CPU with a stub interpreter: its passes and step order, one
PASS/FAIL line per step with its time, the worker's traceback on a FAIL, the one archive, the
interpreter it picks (the lock's .venv or the image's own Python, said at the top), --dry-run's
CPU stand-ins and its budget line; and the GPU workflow (parsed as YAML)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
FIRST = ["inventory", "smoke", "gpu-tests", "compile", "traces", "convergence", "report"]
SECOND = ["gradscaler", "suites", "compare", "report-ab", "predict"]
# One call to a lent GPU machine may run 600 s: the first pass leaves two minutes of it unbudgeted.
FIRST_PASS_MAX_S = 480
BUDGET_LINE = re.compile(r"^first pass: (\d+) steps, (\d+) s budgeted$")

_STUB = textwrap.dedent("""\
    #!/usr/bin/env bash
    # Stands in for python: logs its arguments and environment, fakes saved runs, fails on request.
    seen="device=${DPBENCH_DEVICE:-} limit=${DPBENCH_UNMARKED_LIMIT_S:-} addopts=${PYTEST_ADDOPTS:-}"
    echo "$* | $seen path=${PYTHONPATH:-}" >> "$STUB_LOG"
    for arg in "$@"; do
        case "$arg" in
            --benchmark-storage=file://*) store=${arg#--benchmark-storage=file://} ;;
            --benchmark-save=*) name=${arg#--benchmark-save=} ;;
        esac
    done
    if [ -n "${name:-}" ]; then  # numbered as pytest-benchmark numbers its saves
        mkdir -p "$store/machine"
        echo '{}' > "$store/machine/$(printf %04d $(($(ls "$store/machine" | wc -l) + 1)))_$name.json"
    fi
    if [ -n "${STUB_NO_CUDA:-}" ] && [[ "$*" == *"--require-cuda"* ]]; then
        echo "gpu-inventory: CUDA required but unavailable: stub without CUDA" >&2
        exit 1
    fi
    if [ -n "${STUB_FAIL:-}" ] && [[ "$*" == *"$STUB_FAIL"* ]]; then
        echo "collecting ... worker rank 1 failed (world_size=2):"
        echo "Traceback (most recent call last):"
        echo '  File "worker.py", line 3, in step'
        echo "ValueError: stub failing on purpose"
        exit "${STUB_FAIL_RC:-3}"
    fi
    if [ -n "${STUB_SKIP:-}" ] && [[ "$*" == *"$STUB_SKIP"* ]]; then  # pytest -rs when every test skipped
        echo "s                                                                        [100%]"
        echo "=========================== short test summary info ============================"
        echo "SKIPPED [1] tests/strategies/test_sharded_cuda.py:112: $STUB_SKIP_REASON"
        echo "1 skipped in 2.10s"
        exit 0
    fi
    if [ -n "${STUB_SLOW:-}" ] && [[ "$*" == *"$STUB_SLOW"* ]]; then
        echo "stub: slow on purpose"
        sleep 60
    fi
    echo "stub ok"
""")


def _stub(path: Path, body: str = _STUB) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _checkout(tmp_path: Path, *, installed: bool = True) -> Path:
    """A checkout with gpu-check, the lock files and a stub .venv (stamped as installed or not)."""
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    for script in ("gpu-check", "gpu-session"):
        shutil.copy(ROOT / "tools" / script, repo / "tools" / script)
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, repo / name)
    _stub(repo / ".venv" / "bin" / "python")
    for path, text in (("x/test_cuda.py", "@pytest.mark.gpu\n"), ("y/test_nvml.py", "pytestmark = pytest.mark.gpu\n")):
        (repo / "tests" / path).parent.mkdir(parents=True)
        (repo / "tests" / path).write_text(text)
    (repo / "tests" / "test_cpu_only.py").write_text("def test_cpu(): pass\n")
    if installed:  # what scripts/setup-env writes once the lock is installed
        want = hashlib.sha256((repo / "pyproject.toml").read_bytes() + (repo / "constraints.txt").read_bytes())
        (repo / ".venv" / ".dpbench-installed").write_text(want.hexdigest() + "\n")
    return repo


def _gpu_check(repo: Path, tmp_path: Path, *args: str, **env) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = tmp_path / "calls.log"
    full = {k: v for k, v in os.environ.items() if k not in ("OUT", "PYTHONPATH")}
    full.update({"STUB_LOG": str(log), "TMPDIR": str(tmp_path), **env})
    out = subprocess.run(
        ["bash", str(repo / "tools" / "gpu-check"), *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
    )
    return out, log.read_text().splitlines() if log.exists() else []


def _step_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.split(" ", 1)[0] in ("PASS", "FAIL", "SKIP")]


def _members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return set(tar.getnames())


def test_gpu_check_parses():
    subprocess.run(["bash", "-n", str(ROOT / "tools" / "gpu-check")], check=True)


def test_the_first_pass_runs_every_step_in_order_and_leaves_one_archive(tmp_path):
    out, calls = _gpu_check(_checkout(tmp_path), tmp_path, "--out", str(tmp_path / "art"))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = _step_lines(out.stdout)
    assert [line.split()[1] for line in lines] == FIRST
    assert all(re.match(r"PASS \S+ \(\d+ s of \d+ s\) ", line) for line in lines), lines
    assert "the lock (constraints.txt" in out.stdout.splitlines()[0]
    steps, budget = BUDGET_LINE.match(out.stdout.splitlines()[-1]).groups()
    assert int(steps) == len(FIRST) and int(budget) <= FIRST_PASS_MAX_S
    # What each step ran, on cuda, with the test suite's 5 s guard off.
    assert calls[0].startswith("-m tools.gpu_inventory --require-cuda |")
    assert calls[1].startswith("-m tools.gpu_smoke --device cuda |")
    assert calls[2].startswith("-m pytest tests/x/test_cuda.py tests/y/test_nvml.py -m gpu") and "limit=0" in calls[2]
    # The cold torch.compile is a step of its own, left out of the other GPU tests.
    compile_test = "tests/strategies/test_sharded_cuda.py::test_compile_on_cuda_matches_eager_single"
    assert f"--deselect {compile_test} " in calls[2]
    assert calls[3].startswith(f"-m pytest {compile_test} -m gpu ")
    assert "--dpbench-trace" in calls[4] and "--benchmark-save=gpu-check-traces" in calls[4]
    assert calls[5].startswith("-m tools.gpu_check_verify traces ") and "gpu-check-traces.json" in calls[5]
    assert calls[6].startswith("-m pytest suites/test_convergence.py ")
    assert calls[7].startswith("-m dpbench.cli report ") and "gpu-check-traces" in calls[7]
    assert "gpu-check-convergence" in calls[7]
    assert all("device=cuda" in c for c in calls) and len(calls) == 8
    members = _members(tmp_path / "art" / "gpu-check.tgz")
    assert {f"gpu-check/{name}.log" for name in FIRST} | {"gpu-check/gpu-check.log"} <= members
    assert {f"gpu-check/{name}.result" for name in FIRST} <= members
    assert "gpu-check/results/machine/0001_gpu-check-traces.json" in members
    # The same files, live in --out: each step's result line as printed.
    live = tmp_path / "art" / "gpu-check"
    assert [(live / f"{name}.result").read_text().strip() for name in FIRST] == lines
    assert not (tmp_path / "repo" / "results").exists()  # saved runs only in --out
    assert not list(tmp_path.glob("gpu-check.*"))  # no temporary work directory


def test_a_failing_step_shows_the_worker_traceback_and_the_others_still_run(tmp_path):
    out, calls = _gpu_check(_checkout(tmp_path), tmp_path, "--out", str(tmp_path), STUB_FAIL="tools.gpu_smoke")
    assert out.returncode == 1
    lines = _step_lines(out.stdout)
    assert [line.split()[0] for line in lines] == ["PASS", "FAIL"] + ["PASS"] * 5
    assert re.match(r"FAIL smoke \(\d+ s of 80 s; exit 3\): smoke.log$", lines[1])
    shown = out.stdout.split(lines[1], 1)[1].split("PASS gpu-tests", 1)[0]
    assert "    Traceback (most recent call last):" in shown and "    ValueError: stub failing on purpose" in shown
    assert "gpu-check: 1 step(s) FAILED" in out.stdout and len(calls) == 8
    assert "gpu-check/gpu-check.log" in _members(tmp_path / "gpu-check.tgz")


def test_a_step_whose_tests_all_skipped_says_skip_with_the_reason_not_pass(tmp_path):
    reason = "ddp option compile=True on CUDA needs libcuda.so for Triton's -lcuda link, but only libcuda.so.1 is here"
    out, _ = _gpu_check(
        _checkout(tmp_path), tmp_path, "--out", str(tmp_path), STUB_SKIP="eager_single -m gpu", STUB_SKIP_REASON=reason
    )
    assert out.returncode == 0, out.stdout + out.stderr  # a refusal is not a failure of the check
    lines = _step_lines(out.stdout)
    assert [line.split()[0] for line in lines] == ["PASS"] * 3 + ["SKIP"] + ["PASS"] * 3
    assert re.fullmatch(r"SKIP compile \(\d+ s of 75 s\): " + re.escape(reason), lines[3])
    assert (tmp_path / "gpu-check" / "compile.result").read_text().strip() == lines[3]
    assert re.search(r"^gpu-check: every step passed or skipped \(skipped: compile\) in \d+ s$", out.stdout, re.M)


def test_without_cuda_the_inventory_ends_the_check_with_its_archive(tmp_path):
    out, calls = _gpu_check(_checkout(tmp_path), tmp_path, "--out", str(tmp_path), STUB_NO_CUDA="1")
    assert out.returncode == 1 and len(calls) == 1
    assert [line.split()[:2] for line in _step_lines(out.stdout)] == [["FAIL", "inventory"]]
    assert (tmp_path / "gpu-check.tgz").exists()


@pytest.mark.parametrize("rc", [124, 3])
def test_an_inventory_that_times_out_or_breaks_does_not_end_the_check(tmp_path, rc):
    # A cold first import of a CUDA torch may outlast the budget: the GPU steps still say more.
    out, calls = _gpu_check(
        _checkout(tmp_path), tmp_path, "--out", str(tmp_path), STUB_FAIL="--require-cuda", STUB_FAIL_RC=str(rc)
    )
    assert out.returncode == 1
    lines = _step_lines(out.stdout)
    assert [line.split()[:2] for line in lines] == [["FAIL", "inventory"]] + [["PASS", name] for name in FIRST[1:]]
    assert lines[0].startswith("FAIL inventory (")
    assert (": timed out)" in lines[0]) == (rc == 124)
    assert len(calls) == 8


def test_the_dry_run_rehearses_on_cpu_and_ends_with_the_budget(tmp_path):
    out, calls = _gpu_check(_checkout(tmp_path), tmp_path, "--dry-run", "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = _step_lines(out.stdout)
    assert [line.split()[:2] for line in lines] == [["PASS", name] for name in FIRST]
    assert all("device=cpu" in c for c in calls)
    assert calls[0].startswith("-m tools.gpu_inventory |")  # no --require-cuda
    assert calls[1].startswith("-m tools.gpu_smoke --device cpu |")
    assert not any("gradscaler" in c for c in calls)
    steps, budget = BUDGET_LINE.match(out.stdout.splitlines()[-1]).groups()
    assert int(steps) == len(FIRST) and int(budget) <= FIRST_PASS_MAX_S
    # On CPU each step has 4x its budget: the PASS line names it.
    assert re.match(r"PASS smoke \(\d+ s of 320 s\)", lines[1])


def test_the_second_pass_runs_the_suites_and_a_regression_verdict_is_not_a_failure(tmp_path):
    repo = _checkout(tmp_path)
    _stub(
        repo / ".venv" / "bin" / "python",
        _STUB.replace('echo "stub ok"', '[[ "$*" == *"cli compare"* ]] && exit 1\necho "stub ok"'),
    )
    out, calls = _gpu_check(repo, tmp_path, "--pass", "second", "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout
    assert [line.split()[1] for line in _step_lines(out.stdout)] == SECOND
    assert calls[0].startswith("-m benchmarks.gradscaler_sync")
    assert calls[1].startswith("-m pytest suites/ ") and "--benchmark-save=gpu-check-a" in calls[1]
    assert "--benchmark-save=gpu-check-b" in calls[2] and calls[3].startswith("-m dpbench.cli compare ")
    assert calls[4].startswith("-m dpbench.cli report ") and calls[4].count("gpu-check-") == 2
    assert calls[5].startswith("-m validation.predict_step ") and "gpu-check-a.json" in calls[5]
    assert out.stdout.splitlines()[-1] == "second pass: 5 steps, 400 s budgeted"


@pytest.mark.parametrize("installed", [False, True])
def test_without_the_installed_lock_it_runs_the_images_python_and_says_so(tmp_path, installed):
    repo = _checkout(tmp_path, installed=False)  # a half-made .venv: never used
    image = _stub(tmp_path / "image" / "python3")
    env = {} if installed else {"STUB_FAIL": "distribution"}  # is dpbench an installed distribution there?
    out, calls = _gpu_check(repo, tmp_path, PYTHON=str(image), OUT=str(tmp_path / "from-env"), **env)
    assert out.returncode == 0, out.stdout
    first = out.stdout.splitlines()[0]
    assert first.startswith(f"gpu-check: python {image}: the IMAGE'S OWN Python, NOT the lock")
    assert calls[0].startswith('-c import importlib.metadata as m; m.distribution("torch-dpbench")')
    assert all(c.endswith(f"path={repo}") for c in calls)  # this checkout on PYTHONPATH
    # The measuring plugin comes by entry point only from an installed dpbench: else pytest is told.
    pytest_calls = [c for c in calls[1:] if c.startswith("-m pytest")]
    assert len(pytest_calls) == 4
    assert all(("addopts=-p dpbench.measure.plugin " in c) != installed for c in pytest_calls)
    assert (tmp_path / "from-env" / "gpu-check.tgz").exists()  # $OUT names the archive's directory


def test_an_archive_path_and_a_bad_argument(tmp_path):
    out, _ = _gpu_check(_checkout(tmp_path), tmp_path, "--pass", "second", "--out", str(tmp_path / "x" / "run1.tgz"))
    assert out.returncode == 0 and (tmp_path / "x" / "run1.tgz").exists()
    bad, calls = _gpu_check(_checkout(tmp_path / "b"), tmp_path / "b", "--fast")
    assert bad.returncode == 2 and not calls
    assert bad.stderr.strip() == (
        "gpu-check: argument: expected --out PATH, --pass first|second|all, --steps NAME,... or --dry-run, "
        "found '--fast'"
    )


def test_steps_reruns_only_the_named_steps_and_keeps_the_others_results(tmp_path):
    repo = _checkout(tmp_path)
    first, _ = _gpu_check(repo, tmp_path, "--out", str(tmp_path / "art"), STUB_FAIL="tools.gpu_check_verify")
    live = tmp_path / "art" / "gpu-check"
    assert first.returncode == 1 and (live / "traces.result").read_text().startswith("FAIL traces")
    smoke_log = (live / "smoke.log").read_text()
    (tmp_path / "again").mkdir()
    again, calls = _gpu_check(repo, tmp_path / "again", "--out", str(tmp_path / "art"), "--steps", "traces,gradscaler")
    assert again.returncode == 0, again.stdout
    assert [line.split()[:2] for line in _step_lines(again.stdout)] == [["PASS", "traces"], ["PASS", "gradscaler"]]
    assert len(calls) == 3  # the traced suite, its verification, the GradScaler bench
    assert (live / "traces.result").read_text().startswith("PASS traces")
    assert (live / "smoke.log").read_text() == smoke_log  # the other steps' logs are kept
    # The rerun's saved run replaces the failed one's: the verification reads one run, not both.
    assert len(list((live / "results" / "machine").glob("*_gpu-check-traces.json"))) == 1
    assert {f"gpu-check/{name}.result" for name in FIRST} <= _members(tmp_path / "art" / "gpu-check.tgz")
    bad, _ = _gpu_check(repo, tmp_path / "bad", "--steps", "smoke,tracse")
    assert bad.returncode == 2 and bad.stderr.strip().startswith("gpu-check: --steps: expected names among ")
    assert bad.stderr.strip().endswith("found 'tracse'")


def _session_pids(sid: int) -> list[int]:
    """The processes of one session (the check's, and the steps it left behind when it was killed)."""
    pids = []
    for proc_stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = proc_stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # after "pid (comm)": state, ppid, pgrp, session
            pids.append(int(proc_stat.parent.name))
    return pids


def _start_check_cut_in_traces(repo: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """gpu-check in a session of its own whose traces step hangs in its verification; returned
    once that step has begun."""
    live = tmp_path / "art" / "gpu-check"
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "PYTHONPATH")}
    env.update(STUB_LOG=str(tmp_path / "calls.log"), TMPDIR=str(tmp_path), STUB_SLOW="tools.gpu_check_verify")
    with open(tmp_path / "stdout", "w") as stdout:
        proc = subprocess.Popen(
            ["bash", str(repo / "tools" / "gpu-check"), "--out", str(tmp_path / "art")],
            stdout=stdout,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while "slow on purpose" not in ((live / "traces.log").read_text() if (live / "traces.log").exists() else ""):
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stdout").read_text()
        time.sleep(0.1)
    return proc, live


def _reap(sid: int) -> None:
    for pid in _session_pids(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_sigkill_of_the_whole_call_keeps_every_finished_step_in_out(tmp_path):
    proc, live = _start_check_cut_in_traces(_checkout(tmp_path), tmp_path)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # what a device call's hard limit does
        proc.wait(timeout=30)
    finally:
        _reap(proc.pid)
    finished = FIRST[: FIRST.index("traces")]
    for name in finished:
        assert (live / f"{name}.log").read_text().strip().endswith("stub ok")
        assert (live / f"{name}.result").read_text().startswith(f"PASS {name} (")
    assert "slow on purpose" in (live / "traces.log").read_text()  # the cut step's log, as far as it got
    assert not (live / "traces.result").exists()
    assert (live / "results" / "machine" / "0001_gpu-check-traces.json").exists()  # saved before the cut
    logged = (live / "gpu-check.log").read_text()
    assert all(f"PASS {name} (" in logged for name in finished)
    assert not (tmp_path / "art" / "gpu-check.tgz").exists()  # SIGKILL leaves no archive: the folder is it


def test_a_sigterm_stops_the_running_step_and_still_writes_the_archive(tmp_path):
    proc, live = _start_check_cut_in_traces(_checkout(tmp_path), tmp_path)
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # what an outer `timeout` sends first
        rc = proc.wait(timeout=30)  # not the step's budget: the step is stopped too
    finally:
        _reap(proc.pid)
    assert rc == 143
    stdout = (tmp_path / "stdout").read_text()
    assert "gpu-check: stopped by SIGTERM during the traces step" in stdout
    members = _members(tmp_path / "art" / "gpu-check.tgz")
    assert {"gpu-check/traces.log", "gpu-check/compile.result", "gpu-check/gpu-check.log"} <= members


def test_every_step_runs_under_a_timeout_that_kills_what_ignores_sigterm():
    script = (ROOT / "tools" / "gpu-check").read_text()
    calls = [line.strip() for line in script.splitlines() if re.match(r"\s*timeout\b", line)]
    assert calls and all(call.startswith('timeout -k 10 "$limit" ') for call in calls), calls


# -- tools/gpu-session: what one call to a lent machine runs --------------------------------------
# A lent machine returns at most 8 files from $OUT, none deeper than two folders.
SESSION_FILES = {"facts.txt", "session.log", "gpu-check.tgz", "gpu-check-live.tgz"}


def _session_env(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "PYTHONPATH")}
    env.update(STUB_LOG=str(tmp_path / "calls.log"), TMPDIR=str(tmp_path), OUT=str(tmp_path / "out"), **extra)
    env["PYTHON"] = str(_stub(tmp_path / "image" / "python3"))  # the facts' Python: a stub too
    return env


def test_the_session_leaves_the_facts_and_the_check_in_a_few_files(tmp_path):
    repo = _checkout(tmp_path)
    out = subprocess.run(
        ["bash", str(repo / "tools" / "gpu-session")], capture_output=True, text=True, env=_session_env(tmp_path)
    )
    assert out.returncode == 0, out.stdout + out.stderr
    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert files == SESSION_FILES and all((tmp_path / "out" / f).is_file() for f in files)
    facts = (tmp_path / "out" / "facts.txt").read_text()
    headings = [line for line in facts.splitlines() if line.startswith("== ")]
    assert headings[1] == "== nvidia-smi query" and "== Python.h (torch.compile needs it)" in headings
    assert "== libcuda (Triton links against it)" in headings
    session = (tmp_path / "out" / "session.log").read_text()
    assert [line.split()[1] for line in _step_lines(session)] == FIRST
    for archive in ("gpu-check.tgz", "gpu-check-live.tgz"):
        assert {f"gpu-check/{name}.result" for name in FIRST} <= _members(tmp_path / "out" / archive)


@pytest.mark.slow  # waits for the live archive, packed every 5 s
def test_a_session_cut_by_sigkill_still_returns_the_finished_steps(tmp_path):
    repo = _checkout(tmp_path)
    live = tmp_path / "out" / "gpu-check-live.tgz"
    with open(tmp_path / "stdout", "w") as stdout:
        proc = subprocess.Popen(
            ["bash", str(repo / "tools" / "gpu-session")],
            stdout=stdout,
            stderr=subprocess.STDOUT,
            env=_session_env(tmp_path, STUB_SLOW="tools.gpu_check_verify"),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not (live.exists() and "gpu-check/traces.log" in _members(live)):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stdout").read_text()
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)  # the device call's hard limit
        proc.wait(timeout=30)
    finally:
        _reap(proc.pid)
    assert {p.name for p in (tmp_path / "out").iterdir()} <= SESSION_FILES | {"gpu-check-live.tgz.part"}
    assert {f"gpu-check/{name}.result" for name in FIRST[: FIRST.index("traces")]} <= _members(live)


@pytest.mark.slow  # runs into its limit on purpose
def test_a_session_past_its_limit_stops_the_check_which_still_writes_its_archive(tmp_path):
    repo = _checkout(tmp_path)
    env = _session_env(tmp_path, STUB_SLOW="tools.gpu_check_verify", GPU_SESSION_S="22")  # gpu-check gets ~7 s
    out = subprocess.run(["bash", str(repo / "tools" / "gpu-session")], capture_output=True, text=True, env=env)
    assert out.returncode == 124, out.stdout + out.stderr  # timeout's own status when it cut the command
    assert "gpu-check: stopped by SIGTERM during the traces step" in out.stdout
    assert "gpu-check/traces.log" in _members(tmp_path / "out" / "gpu-check.tgz")


@pytest.mark.slow  # an inner pytest session: ~2 s idle
def test_the_environment_switch_gpu_check_sets_turns_the_5_s_guard_off(pytester, monkeypatch):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text().split("# ---- report fixtures ----")[0])
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(test_long="import time\n\ndef test_long():\n    time.sleep(0.3)\n")
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))
    args = ("-p", "no:cacheprovider", "-p", "no:benchmark")
    pytester.runpytest(*args, "--unmarked-limit", "0.1").assert_outcomes(failed=1)
    monkeypatch.setenv("DPBENCH_UNMARKED_LIMIT_S", "0")
    pytester.runpytest(*args).assert_outcomes(passed=1)


# -- the workflow --------------------------------------------------------------------------------
def _workflow(name: str = "gpu-benchmarks.yml") -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML (the test extra) parses the workflow")
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


GPU_JOBS = (("gpu-benchmarks.yml", "benchmarks"), ("upgrade-check.yml", "upgrade-check"))
FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"


def test_workflow_runs_the_suites_on_cuda_and_fails_without_it():
    workflow = _workflow()
    assert workflow["env"]["DPBENCH_DEVICE"] == "cuda"
    steps = workflow["jobs"]["benchmarks"]["steps"]
    runs = [str(s.get("run", "")) for s in steps]
    assert "nvidia-smi" in runs[0]  # the inventory before anything else
    check = next(i for i, r in enumerate(runs) if "-m tools.gpu_inventory --require-cuda" in r)
    assert "|| true" not in runs[check] and not steps[check].get("continue-on-error")
    measuring = [i for i, r in enumerate(runs) if "dpbench ab" in r or "pytest suites/" in r]
    assert measuring and check < min(measuring)
    assert not any("DPBENCH_DEVICE" in str(s.get("env", {})) for s in steps)  # no step turns it off


def test_no_gpu_workflow_runs_a_forks_code_by_default():
    benchmarks = _workflow()
    # PyYAML reads the key `on` as True.
    assert "pull_request" in benchmarks[True] and "pull_request_target" not in benchmarks[True]
    guard = benchmarks["jobs"]["benchmarks"]["if"]
    assert guard == f"github.event_name != 'pull_request' || {FORK_GUARD}"
    upgrade = _workflow("upgrade-check.yml")
    assert set(upgrade[True]) == {"workflow_dispatch"}  # started by hand by someone with write access


def test_both_gpu_workflows_queue_on_one_group_per_host_and_restore_the_venv():
    groups = set()
    for name, job_name in GPU_JOBS:
        job = _workflow(name)["jobs"][job_name]
        concurrency = job["concurrency"]
        assert concurrency["cancel-in-progress"] is False, name  # never cancel another workflow's measurement
        groups.add(concurrency["group"])
        steps = job["steps"]
        cache = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/cache@"))
        setup = next(i for i, s in enumerate(steps) if "scripts/setup-env" in str(s.get("run", "")))
        checkout = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/checkout@"))
        assert checkout < cache < setup, name  # checkout cleans .venv; the cache brings it back before setup
        assert steps[cache]["with"]["path"] == ".venv"
        assert "hashFiles('constraints.txt', 'pyproject.toml')" in steps[cache]["with"]["key"]
    assert len(groups) == 1 and "vars.DPBENCH_GPU_HOST" in groups.pop()
