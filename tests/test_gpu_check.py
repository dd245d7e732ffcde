"""scripts/gpu-check, checked on CPU with a stub interpreter: its passes and step order, one
PASS/FAIL line per step with its time, the worker's traceback on a FAIL, the one archive, the
interpreter it picks (the lock's .venv or the image's own Python, said at the top), --dry-run's
CPU stand-ins and its budget line; and the GPU workflow (parsed as YAML)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import tarfile
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
FIRST = ["inventory", "smoke", "gpu-tests", "traces", "convergence", "report", "gradscaler"]
SECOND = ["suites", "compare", "report-ab"]
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
    if [ -n "${name:-}" ]; then mkdir -p "$store/machine"; echo '{}' > "$store/machine/0001_$name.json"; fi
    if [ -n "${STUB_FAIL:-}" ] && [[ "$*" == *"$STUB_FAIL"* ]]; then
        echo "collecting ... worker rank 1 failed (world_size=2):"
        echo "Traceback (most recent call last):"
        echo '  File "worker.py", line 3, in step'
        echo "ValueError: stub failing on purpose"
        exit 3
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
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "gpu-check", repo / "scripts" / "gpu-check")
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
        ["bash", str(repo / "scripts" / "gpu-check"), *args],
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
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu-check")], check=True)


def test_the_first_pass_runs_every_step_in_order_and_leaves_one_archive(tmp_path):
    out, calls = _gpu_check(_checkout(tmp_path), tmp_path, "--out", str(tmp_path / "art"))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = _step_lines(out.stdout)
    assert [line.split()[1] for line in lines] == FIRST
    assert all(re.match(r"PASS \S+ \(\d+ s of \d+ s\) ", line) for line in lines), lines
    assert "the lock (constraints.txt" in out.stdout.splitlines()[0]
    assert out.stdout.splitlines()[-1] == "first pass: 7 steps, 540 s budgeted"
    # What each step ran, on cuda, with the test suite's 5 s guard off.
    assert calls[0].startswith("scripts/gpu_inventory.py --require-cuda |")
    assert calls[1].startswith("scripts/gpu_smoke.py --device cuda |")
    assert calls[2].startswith("-m pytest tests/x/test_cuda.py tests/y/test_nvml.py -m gpu") and "limit=0" in calls[2]
    assert "--dpbench-trace" in calls[3] and "--benchmark-save=gpu-check-traces" in calls[3]
    assert calls[4].startswith("scripts/gpu_check_verify.py traces ") and "gpu-check-traces.json" in calls[4]
    assert calls[5].startswith("-m pytest suites/test_convergence.py ")
    assert calls[6].startswith("-m dpbench.cli report ") and "gpu-check-traces" in calls[6]
    assert "gpu-check-convergence" in calls[6]
    assert calls[7].startswith("scripts/bench_gradscaler_sync.py")
    assert all("device=cuda" in c for c in calls) and len(calls) == 8
    members = _members(tmp_path / "art" / "gpu-check.tgz")
    assert {f"gpu-check/{name}.log" for name in FIRST} | {"gpu-check/gpu-check.log"} <= members
    assert "gpu-check/results/machine/0001_gpu-check-traces.json" in members
    assert not (tmp_path / "repo" / "results").exists()  # saved runs only in the archive
    assert not list(tmp_path.glob("gpu-check.*"))  # the work directory is gone


def test_a_failing_step_shows_the_worker_traceback_and_the_others_still_run(tmp_path):
    out, calls = _gpu_check(_checkout(tmp_path), tmp_path, "--out", str(tmp_path), STUB_FAIL="gpu_smoke.py")
    assert out.returncode == 1
    lines = _step_lines(out.stdout)
    assert [line.split()[0] for line in lines] == ["PASS", "FAIL"] + ["PASS"] * 5
    assert re.match(r"FAIL smoke \(\d+ s of 120 s; exit 3\): smoke.log$", lines[1])
    shown = out.stdout.split(lines[1], 1)[1].split("PASS gpu-tests", 1)[0]
    assert "    Traceback (most recent call last):" in shown and "    ValueError: stub failing on purpose" in shown
    assert "gpu-check: 1 step(s) FAILED" in out.stdout and len(calls) == 8
    assert "gpu-check/gpu-check.log" in _members(tmp_path / "gpu-check.tgz")


def test_without_cuda_the_inventory_ends_the_check_with_its_archive(tmp_path):
    out, calls = _gpu_check(_checkout(tmp_path), tmp_path, "--out", str(tmp_path), STUB_FAIL="--require-cuda")
    assert out.returncode == 1 and len(calls) == 1
    assert [line.split()[:2] for line in _step_lines(out.stdout)] == [["FAIL", "inventory"]]
    assert (tmp_path / "gpu-check.tgz").exists()


def test_the_dry_run_rehearses_on_cpu_and_ends_with_the_budget(tmp_path):
    out, calls = _gpu_check(_checkout(tmp_path), tmp_path, "--dry-run", "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = _step_lines(out.stdout)
    assert [line.split()[1] for line in lines] == FIRST
    assert lines[-1].startswith("SKIP gradscaler (dry run: needs a GPU; 20 s budget): ")
    assert all("device=cpu" in c for c in calls)
    assert calls[0].startswith("scripts/gpu_inventory.py |")  # no --require-cuda
    assert calls[1].startswith("scripts/gpu_smoke.py --device cpu |")
    assert not any("gradscaler" in c for c in calls)
    steps, budget = BUDGET_LINE.match(out.stdout.splitlines()[-1]).groups()
    assert int(steps) == 7 and int(budget) <= 540
    # On CPU each step has 4x its budget: the PASS line names it.
    assert re.match(r"PASS smoke \(\d+ s of 480 s\)", lines[1])


def test_the_second_pass_runs_the_suites_and_a_regression_verdict_is_not_a_failure(tmp_path):
    repo = _checkout(tmp_path)
    _stub(
        repo / ".venv" / "bin" / "python",
        _STUB.replace('echo "stub ok"', '[[ "$*" == *"cli compare"* ]] && exit 1\necho "stub ok"'),
    )
    out, calls = _gpu_check(repo, tmp_path, "--pass", "second", "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout
    assert [line.split()[1] for line in _step_lines(out.stdout)] == SECOND
    assert calls[0].startswith("-m pytest suites/ ") and "--benchmark-save=gpu-check-a" in calls[0]
    assert "--benchmark-save=gpu-check-b" in calls[1] and calls[2].startswith("-m dpbench.cli compare ")
    assert calls[3].startswith("-m dpbench.cli report ") and calls[3].count("gpu-check-") == 2
    assert out.stdout.splitlines()[-1] == "second pass: 3 steps, 360 s budgeted"


@pytest.mark.parametrize("installed", [False, True])
def test_without_the_installed_lock_it_runs_the_images_python_and_says_so(tmp_path, installed):
    repo = _checkout(tmp_path, installed=False)  # a half-made .venv: never used
    image = _stub(tmp_path / "image" / "python3")
    env = {} if installed else {"STUB_FAIL": "distribution"}  # is dpbench an installed distribution there?
    out, calls = _gpu_check(repo, tmp_path, PYTHON=str(image), OUT=str(tmp_path / "from-env"), **env)
    assert out.returncode == 0, out.stdout
    first = out.stdout.splitlines()[0]
    assert first.startswith(f"gpu-check: python {image}: the IMAGE'S OWN Python, NOT the lock")
    assert calls[0].startswith('-c import importlib.metadata as m; m.distribution("dpbench")')
    assert all(c.endswith(f"path={repo}") for c in calls)  # this checkout on PYTHONPATH
    # The measuring plugin comes by entry point only from an installed dpbench: else pytest is told.
    pytest_calls = [c for c in calls[1:] if c.startswith("-m pytest")]
    assert len(pytest_calls) == 3
    assert all(("addopts=-p dpbench.measure.plugin " in c) != installed for c in pytest_calls)
    assert (tmp_path / "from-env" / "gpu-check.tgz").exists()  # $OUT names the archive's directory


def test_an_archive_path_and_a_bad_argument(tmp_path):
    out, _ = _gpu_check(_checkout(tmp_path), tmp_path, "--pass", "second", "--out", str(tmp_path / "x" / "run1.tgz"))
    assert out.returncode == 0 and (tmp_path / "x" / "run1.tgz").exists()
    bad, calls = _gpu_check(_checkout(tmp_path / "b"), tmp_path / "b", "--fast")
    assert bad.returncode == 2 and not calls
    assert bad.stderr.strip() == (
        "gpu-check: argument: expected --out PATH, --pass first|second|all or --dry-run, found '--fast'"
    )


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
def _workflow() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML (the test extra) parses the workflow")
    return yaml.safe_load((ROOT / ".github" / "workflows" / "gpu-benchmarks.yml").read_text())


def test_workflow_runs_the_suites_on_cuda_and_fails_without_it():
    workflow = _workflow()
    assert workflow["env"]["DPBENCH_DEVICE"] == "cuda"
    steps = workflow["jobs"]["benchmarks"]["steps"]
    runs = [str(s.get("run", "")) for s in steps]
    assert "nvidia-smi" in runs[0]  # the inventory before anything else
    check = next(i for i, r in enumerate(runs) if "gpu_inventory.py --require-cuda" in r)
    assert "|| true" not in runs[check] and not steps[check].get("continue-on-error")
    measuring = [i for i, r in enumerate(runs) if "dpbench ab" in r or "pytest suites/" in r]
    assert measuring and check < min(measuring)
    assert not any("DPBENCH_DEVICE" in str(s.get("env", {})) for s in steps)  # no step turns it off
