"""tools/gpu-check and tools/gpu-session, checked on CPU with a stub interpreter: passes, step order,
one PASS/FAIL line per step, a FAIL's traceback, the one archive however a signal ends it, the
interpreter it picks, --dry-run, and the budgets of one call (tools/gpu-budgets.sh; --within never
cuts the report). The GPU workflows: tests/test_gpu_workflows.py."""

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
# What answers the most first: the smoke of every strategy before the cold compile, the traces and
# the report of them; the CUDA tests and the convergence suite open the second pass.
FIRST = ["inventory", "smoke", "compile", "traces", "report"]
SECOND = ["gpu-tests", "convergence", "gradscaler", "suites", "compare", "predict", "report-ab"]
BUDGET_LINE = re.compile(r"^first pass: (\d+) steps, (\d+) s budgeted$")
_SCALARS = (
    "CALL_S",
    "SESSION_TAIL_S",
    "CHECK_GRACE_S",
    "FACTS_S",
    "FACT_GRACE_S",
    "STEP_GRACE_S",
    "ARCHIVE_S",
    "MIN_STEP_S",
)


def budgets(path: Path = ROOT / "tools" / "gpu-budgets.sh") -> dict:
    """tools/gpu-budgets.sh as the scripts read it (sourced by bash): its seconds, its step lists
    and each step's budget (``STEP_S``)."""
    names = " ".join(_SCALARS + ("FIRST_STEPS", "SECOND_STEPS", "CLOSING_STEPS"))
    script = (
        f'source "{path}"; for n in {names}; do printf "%s=%s\\n" "$n" "${{!n}}"; done; '
        'for k in "${!STEP_S[@]}"; do printf "STEP_S.%s=%s\\n" "$k" "${STEP_S[$k]}"; done'
    )
    lines = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    values = dict(line.split("=", 1) for line in lines)
    out: dict = {n: int(values[n]) for n in _SCALARS}
    out.update({n: values[n].split() for n in ("FIRST_STEPS", "SECOND_STEPS", "CLOSING_STEPS")})
    out["STEP_S"] = {k.split(".", 1)[1]: int(v) for k, v in values.items() if k.startswith("STEP_S.")}
    return out


B = budgets()

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
    for script in ("gpu-check", "gpu-session", "gpu-budgets.sh"):
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
        ["bash", str(repo / "tools" / "gpu-check"), *args], capture_output=True, text=True, env=full, timeout=60
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
    assert int(steps) == len(FIRST) and int(budget) == sum(B["STEP_S"][name] for name in FIRST)
    # What each step ran, on cuda, with the test suite's 5 s guard off.
    assert calls[0].startswith("-m tools.gpu_inventory --require-cuda |")
    assert calls[1].startswith("-m tools.gpu_smoke --device cuda |") and "limit=0" in calls[1]
    compile_test = "tests/strategies/test_sharded_cuda.py::test_compile_on_cuda_matches_eager_single"
    assert calls[2].startswith(f"-m pytest {compile_test} -m gpu ")
    assert "--dpbench-trace" in calls[3] and "--benchmark-save=gpu-check-traces" in calls[3]
    assert calls[4].startswith("-m tools.gpu_check_verify traces ") and "gpu-check-traces.json" in calls[4]
    assert calls[5].startswith("-m dpbench.cli report ") and "gpu-check-traces" in calls[5]
    assert all("device=cuda" in c for c in calls) and len(calls) == 6
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
    assert [line.split()[0] for line in lines] == ["PASS", "FAIL"] + ["PASS"] * 3
    assert re.match(rf"FAIL smoke \(\d+ s of {B['STEP_S']['smoke']} s; exit 3\): smoke.log$", lines[1])
    shown = out.stdout.split(lines[1], 1)[1].split("PASS compile", 1)[0]
    assert "    Traceback (most recent call last):" in shown and "    ValueError: stub failing on purpose" in shown
    assert "gpu-check: 1 step(s) FAILED" in out.stdout and len(calls) == 6
    assert "gpu-check/gpu-check.log" in _members(tmp_path / "gpu-check.tgz")


def test_a_step_whose_tests_all_skipped_says_skip_with_the_reason_not_pass(tmp_path):
    reason = "ddp option compile=True on CUDA needs libcuda.so for Triton's -lcuda link, but only libcuda.so.1 is here"
    out, _ = _gpu_check(
        _checkout(tmp_path), tmp_path, "--out", str(tmp_path), STUB_SKIP="eager_single -m gpu", STUB_SKIP_REASON=reason
    )
    assert out.returncode == 0, out.stdout + out.stderr  # a refusal is not a failure of the check
    lines = _step_lines(out.stdout)
    at = FIRST.index("compile")
    assert [line.split()[:2] for line in lines] == [["SKIP" if name == "compile" else "PASS", name] for name in FIRST]
    assert re.fullmatch(rf"SKIP compile \(\d+ s of {B['STEP_S']['compile']} s\): " + re.escape(reason), lines[at])
    assert (tmp_path / "gpu-check" / "compile.result").read_text().strip() == lines[at]
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
    assert len(calls) == 6


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
    assert int(steps) == len(FIRST) and int(budget) == sum(B["STEP_S"][name] for name in FIRST)
    # On CPU each step has 4x its budget: the PASS line names it.
    assert re.match(rf"PASS smoke \(\d+ s of {4 * B['STEP_S']['smoke']} s\)", lines[1])


def test_the_dry_runs_second_pass_runs_the_cpu_stand_ins_and_prints_the_rest(tmp_path):
    out, calls = _gpu_check(_checkout(tmp_path), tmp_path, "--dry-run", "--pass", "second", "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = _step_lines(out.stdout)
    assert [line.split()[:2] for line in lines] == [["PASS", "gpu-tests"], ["PASS", "convergence"]] + [
        ["SKIP", name] for name in SECOND[2:]
    ]
    assert calls[0].startswith("-m pytest tests/x/test_cuda.py tests/y/test_nvml.py -m gpu") and "limit=0" in calls[0]
    compile_test = "tests/strategies/test_sharded_cuda.py::test_compile_on_cuda_matches_eager_single"
    assert f"--deselect {compile_test} " in calls[0]  # the cold compile is a step of its own
    assert calls[1].startswith("-m pytest suites/test_convergence.py ") and "-k single or ddp" in calls[1]
    assert len(calls) == 2 and all("device=cpu" in c for c in calls)


def test_the_second_pass_runs_the_suites_and_a_regression_verdict_is_not_a_failure(tmp_path):
    repo = _checkout(tmp_path)
    _stub(
        repo / ".venv" / "bin" / "python",
        _STUB.replace('echo "stub ok"', '[[ "$*" == *"cli compare"* ]] && exit 1\necho "stub ok"'),
    )
    out, calls = _gpu_check(repo, tmp_path, "--pass", "second", "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout
    assert [line.split()[1] for line in _step_lines(out.stdout)] == SECOND
    assert calls[0].startswith("-m pytest tests/x/test_cuda.py tests/y/test_nvml.py -m gpu")
    assert calls[1].startswith("-m pytest suites/test_convergence.py ") and "-k" not in calls[1]
    assert calls[2].startswith("-m benchmarks.gradscaler_sync")
    assert calls[3].startswith("-m pytest suites/ ") and "--benchmark-save=gpu-check-a" in calls[3]
    assert "--benchmark-save=gpu-check-b" in calls[4] and calls[5].startswith("-m dpbench.cli compare ")
    assert calls[6].startswith("-m validation.predict_step ") and "gpu-check-a.json" in calls[6]
    assert calls[7].startswith("-m dpbench.cli report ") and calls[7].count("gpu-check-") == 2
    total = sum(B["STEP_S"][name] for name in SECOND)
    assert out.stdout.splitlines()[-1] == f"second pass: {len(SECOND)} steps, {total} s budgeted"


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
    assert len(pytest_calls) == 2
    assert all(("addopts=-p dpbench.measure.plugin " in c) != installed for c in pytest_calls)
    assert (tmp_path / "from-env" / "gpu-check.tgz").exists()  # $OUT names the archive's directory


def test_an_archive_path_and_a_bad_argument(tmp_path):
    out, _ = _gpu_check(_checkout(tmp_path), tmp_path, "--pass", "second", "--out", str(tmp_path / "x" / "run1.tgz"))
    assert out.returncode == 0 and (tmp_path / "x" / "run1.tgz").exists()
    bad, calls = _gpu_check(_checkout(tmp_path / "b"), tmp_path / "b", "--fast")
    assert bad.returncode == 2 and not calls
    assert bad.stderr.strip() == (
        "gpu-check: argument: expected --out PATH, --pass first|second|all, --steps NAME,..., --within S or "
        "--dry-run, found '--fast'"
    )
    late, _ = _gpu_check(_checkout(tmp_path / "c"), tmp_path / "c", "--within", "9m")
    assert late.returncode == 2 and late.stderr.strip() == "gpu-check: --within: expected whole seconds, found '9m'"


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


@pytest.mark.parametrize("again", [False, True])
def test_a_sigterm_stops_the_running_step_and_still_writes_the_archive(tmp_path, again):
    proc, live = _start_check_cut_in_traces(_checkout(tmp_path), tmp_path)
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # what an outer `timeout` sends first
        while again and proc.poll() is None:  # `timeout` signals the check, then its group: a 2nd TERM
            os.kill(proc.pid, signal.SIGTERM)  # can land as the archive is written
            time.sleep(0.005)
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
    assert calls and all(call.startswith('timeout -k "$STEP_GRACE_S" "$limit" ') for call in calls), calls
    assert B["STEP_GRACE_S"] == 10  # what the arithmetic in docs/gpu.md counts a step's grace as


# -- the budgets of one call (tools/gpu-budgets.sh) ----------------------------------------------
def _worst_case_within(b: dict) -> int:
    """What gpu-session gives gpu-check (--within) when the facts take all they may."""
    return b["CALL_S"] - (b["FACTS_S"] + b["FACT_GRACE_S"]) - b["SESSION_TAIL_S"] - b["CHECK_GRACE_S"]


def test_the_first_pass_every_kill_grace_and_the_facts_worst_case_fit_one_call():
    assert B["FIRST_STEPS"] == FIRST and B["SECOND_STEPS"] == SECOND
    assert set(B["STEP_S"]) == set(FIRST) | set(SECOND)
    # The closing step of each pass is its last: the one --within keeps whole.
    assert B["CLOSING_STEPS"] == [FIRST[-1], SECOND[-1]]
    first_pass = sum(B["STEP_S"][name] + B["STEP_GRACE_S"] for name in FIRST) + B["ARCHIVE_S"]
    assert first_pass <= _worst_case_within(B), (first_pass, _worst_case_within(B))


def test_at_the_worst_case_within_every_first_pass_step_gets_its_whole_budget(tmp_path):
    within = _worst_case_within(B)
    out, _ = _gpu_check(_checkout(tmp_path), tmp_path, "--out", str(tmp_path), "--within", str(within))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = _step_lines(out.stdout)
    assert [line.split()[1] for line in lines] == FIRST
    for name, line in zip(FIRST, lines):
        assert re.match(rf"PASS {name} \(\d+ s of {B['STEP_S'][name]} s\) ", line), line


def test_within_cuts_a_step_to_what_is_left_and_leaves_the_report_its_whole_budget(tmp_path):
    report = B["STEP_S"]["report"]
    within = 100
    out, calls = _gpu_check(
        _checkout(tmp_path), tmp_path, "--out", str(tmp_path), "--steps", "smoke,report", "--within", str(within)
    )
    smoke, report_line = _step_lines(out.stdout)
    # The smoke gets what is left once the report (budget and grace), the archive and its own grace are kept.
    left = within - (report + B["STEP_GRACE_S"]) - B["ARCHIVE_S"] - B["STEP_GRACE_S"]
    cut = re.match(rf"PASS smoke \(\d+ s of (\d+) s, cut from {B['STEP_S']['smoke']} s to fit --within 100\) ", smoke)
    assert cut and left - 2 <= int(cut.group(1)) <= left - 1, smoke  # a second kept for the clock's rounding
    assert re.match(rf"FAIL report \(\d+ s of {report} s; exit 1\)", report_line)  # no saved run: not its budget
    assert len(calls) == 1


def test_when_time_runs_short_the_steps_before_the_report_are_skipped_never_the_report(tmp_path):
    repo = _checkout(tmp_path)
    seeded = tmp_path / "gpu-check" / "results" / "machine" / "0001_gpu-check-convergence.json"
    seeded.parent.mkdir(parents=True)
    seeded.write_text("{}")  # a run the report can render: --steps keeps the folder
    report = B["STEP_S"]["report"]
    # Enough for the report, its grace and the archive, not for any step besides.
    within = report + 2 * B["STEP_GRACE_S"] + B["ARCHIVE_S"] + B["MIN_STEP_S"] - 1
    out, calls = _gpu_check(repo, tmp_path, "--out", str(tmp_path), "--steps", ",".join(FIRST), "--within", str(within))
    assert out.returncode == 1, out.stdout + out.stderr
    lines = _step_lines(out.stdout)
    assert [line.split()[:2] for line in lines] == [["SKIP", name] for name in FIRST[:-1]] + [["PASS", "report"]]
    assert lines[0].startswith("SKIP inventory (no time left: ") and f"for its {B['STEP_S']['inventory']} s" in lines[0]
    assert re.match(rf"PASS report \(\d+ s of {report} s\) ", lines[-1]), lines[-1]
    assert calls == [calls[0]] and calls[0].startswith("-m dpbench.cli report ")
    assert (tmp_path / "gpu-check" / "smoke.result").read_text().startswith("SKIP smoke (no time left")
    assert f"gpu-check: 4 step(s) not run, no time left within {within} s: rerun them with --steps " in out.stdout
    assert "--steps inventory,smoke,compile,traces\n" in out.stdout


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
    # gpu-check is told what the call has left: the call less the facts, the tail and its timeout's grace.
    within = int(re.search(r"^gpu-session: tools/gpu-check --within (\d+) ", out.stdout, re.M).group(1))
    took = int(re.search(r"^gpu-session: facts in (\d+) s ", out.stdout, re.M).group(1))
    assert B["CALL_S"] - B["SESSION_TAIL_S"] - B["CHECK_GRACE_S"] - took - within in (0, 1), out.stdout
    assert f"under timeout -k {B['CHECK_GRACE_S']} {within}\n" in out.stdout


@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
def test_the_facts_end_within_their_share_of_the_call(tmp_path):
    repo = _checkout(tmp_path)
    budgets_file = repo / "tools" / "gpu-budgets.sh"
    budgets_file.write_text(budgets_file.read_text().replace(f"FACTS_S={B['FACTS_S']}", "FACTS_S=2"))
    # The Python fact (the first import's seconds) hangs: it is cut, and the facts after it are not run.
    env = _session_env(tmp_path, STUB_SLOW="import sys, time")
    out = subprocess.run(["bash", str(repo / "tools" / "gpu-session")], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    took = int(re.search(r"^gpu-session: facts in (\d+) s ", out.stdout, re.M).group(1))
    assert took <= 2 + B["FACT_GRACE_S"]
    facts = (tmp_path / "out" / "facts.txt").read_text().split("== ")
    python = next(f for f in facts if f.startswith("python, torch, CUDA, cuDNN, NCCL"))
    assert "stub: slow on purpose" in python and "(exit 124)" in python
    assert all(f.endswith("(not run: the facts had 2 s)\n") for f in facts[facts.index(python) + 1 :])


def test_a_session_short_of_time_skips_steps_but_not_the_report(tmp_path):
    repo = _checkout(tmp_path)
    report = B["STEP_S"]["report"]
    # gpu-check is left about enough for the report alone (its budget, its grace and the archive).
    session_s = B["SESSION_TAIL_S"] + B["CHECK_GRACE_S"] + report + 2 * B["STEP_GRACE_S"] + B["ARCHIVE_S"] + 3
    env = _session_env(tmp_path, GPU_SESSION_S=str(session_s))
    out = subprocess.run(["bash", str(repo / "tools" / "gpu-session")], capture_output=True, text=True, env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    lines = _step_lines((tmp_path / "out" / "session.log").read_text())
    assert [line.split()[:2] for line in lines] == [["SKIP", name] for name in FIRST[:-1]] + [["FAIL", "report"]]
    # The report had its whole budget (it fails at once here: the skipped steps saved no run).
    assert re.match(rf"FAIL report \(\d+ s of {report} s; exit 1\)", lines[-1]), lines[-1]  # 0 s idle, 1 s loaded
    assert "gpu-check/report.result" in _members(tmp_path / "out" / "gpu-check.tgz")
    too_short = subprocess.run(
        ["bash", str(repo / "tools" / "gpu-session")],
        capture_output=True,
        text=True,
        env=_session_env(tmp_path / "t", GPU_SESSION_S="20"),
    )
    assert too_short.returncode == 2 and too_short.stderr.startswith(
        "gpu-session: GPU_SESSION_S: expected more than the facts' "
    )


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
    # gpu-check gets ~10 s but is told (the caller's --within wins) it has 1000: the session's timeout stops it.
    session_s = B["SESSION_TAIL_S"] + B["CHECK_GRACE_S"] + 10
    env = _session_env(tmp_path, STUB_SLOW="tools.gpu_check_verify", GPU_SESSION_S=str(session_s))
    out = subprocess.run(
        ["bash", str(repo / "tools" / "gpu-session"), "--within", "1000"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 124, out.stdout + out.stderr  # timeout's own status when it cut the command
    assert "gpu-check: stopped by SIGTERM during the traces step" in out.stdout
    assert (tmp_path / "out" / "gpu-check.tgz").is_file(), out.stdout + out.stderr  # the 2nd TERM: see above
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
