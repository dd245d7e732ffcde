"""``dpbench ab``: worktrees, shared environments, ABBA order, saved runs, compare, clean-up.

The revisions come from a throw-away clone of this repository at HEAD with a few commits on top:
a stand-in ``scripts/setup-env`` that makes an "environment" whose python is this test's own
interpreter (so no packages are installed) and logs each run; a version marker per revision, to
see which source each invocation imported; a different lock file; a broken suite. The suites run
a tiny selection (one collective, one world size), one trial per invocation.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from dpbench.ab.job import BASE, HEAD, abba_schedule, invocation_env
from dpbench.ab.revisions import cleanup, lock_hash, prepare
from dpbench.cli import main

REPO = Path(__file__).resolve().parents[2]
SELECTION = ["-k", "test_collective and 4KiB-all_reduce and not 64KiB"]
SUITE_ENV = {
    "DPBENCH_PROFILE": "quick",
    "DPBENCH_WORKLOADS": "mlp",
    "DPBENCH_WORLD_SIZES": "2",
    "DPBENCH_MEMORY_ESTIMATE": "state",
}
VERSIONS = {"ab-base": "0.1.0+ab-base", "ab-head": "0.1.0+ab-head"}

FAKE_SETUP_ENV = """#!/usr/bin/env bash
# Test stand-in for scripts/setup-env: "installing" makes .venv/bin/python run the test's interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || {{ echo "no .venv/bin/python in $(pwd)" >&2; exit 1; }}
stamp=.venv/.dpbench-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    rm -f .venv/bin/python
    printf '#!/bin/sh\\nexec %s "$@"\\n' '{python}' > .venv/bin/python
    chmod +x .venv/bin/python
    echo "$want" > "$stamp"
    echo "installed $(pwd)" >> '{log}'
fi
echo "ran $(pwd)" >> '{log}'
"""

pytestmark = pytest.mark.skipif(not (REPO / ".git").exists(), reason="dpbench ab needs a git checkout of dpbench")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.strip()


def _commit(repo: Path, tag: str, message: str) -> None:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    _git(repo, "tag", tag)


def _set_version(repo: Path, version: str) -> None:
    init = repo / "dpbench" / "schema.py"
    text, n = re.subn(r'^__version__ = ".*"$', f'__version__ = "{version}"', init.read_text(), flags=re.M)
    assert n == 1, "dpbench/schema.py has no __version__ line to mark"
    init.write_text(text)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Clone of HEAD + tags ab-base, ab-head (same lock), ab-lock (another lock), ab-broken."""
    root = tmp_path_factory.mktemp("ab")
    path = root / "repo"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(path)], check=True, timeout=120)
    (path / "scripts" / "setup-env").write_text(
        FAKE_SETUP_ENV.format(python=sys.executable, log=root / "setup-env.log")
    )
    _set_version(path, VERSIONS["ab-base"])
    _commit(path, "ab-base", "base: stand-in setup-env, version marker")
    _set_version(path, VERSIONS["ab-head"])
    _commit(path, "ab-head", "head: another version marker")
    with open(path / "constraints.txt", "a") as f:
        f.write("# another lock\n")
    _commit(path, "ab-lock", "a different lock file")
    _git(path, "checkout", "-q", "ab-head")
    (path / "suites" / "conftest.py").write_text('raise RuntimeError("this suite is broken on purpose")\n')
    _commit(path, "ab-broken", "a suite that cannot even be collected")
    return path


@pytest.fixture(scope="module")
def envs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Environments shared by the tests that run ab (making a venv takes seconds)."""
    return tmp_path_factory.mktemp("envs")


def _setup_log(repo: Path) -> list[str]:
    log = repo.parent / "setup-env.log"
    return log.read_text().splitlines() if log.exists() else []


def _run_ab(repo: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(_ab_command(*args), cwd=repo, env=_ab_env(), capture_output=True, text=True, timeout=timeout)


def _ab_command(*args: str) -> list[str]:
    # -P: the working directory (the clone) stays off the path, so this checkout's dpbench, which
    # the interpreter's editable install finds, runs ab.
    boot = "import sys; from dpbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-P", "-c", boot, "ab", *args]


def _ab_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPBENCH_") and k != "PYTHONPATH"}
    return {**env, **SUITE_ENV}


def _run_dirs(repo: Path) -> list[Path]:
    """Run directories made under the default work directory by tests before this one."""
    workdir = repo / ".dpbench-ab"
    return [p for p in workdir.iterdir() if p.is_dir() and p.name != "envs"] if workdir.exists() else []


def _worktrees(repo: Path) -> list[str]:
    return [line for line in _git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def _processes_under(path: Path) -> list[psutil.Process]:
    """Live processes whose command line or working directory mentions ``path``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if str(path) in " ".join(proc.cmdline()) or proc.cwd().startswith(str(path)):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _left_under(path: Path, within: float = 5.0) -> list[psutil.Process]:
    """What is still alive under ``path`` ``within`` s after ``dpbench ab`` exited: its pytest's
    forkserver helper and reaper leave a moment after that pytest (on its pipe's EOF), later on a
    loaded machine; the promise is "gone within 5 s", as the fault soak counts it."""
    deadline = time.monotonic() + within
    while (left := _processes_under(path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_abba_schedule():
    assert abba_schedule(1) == [(BASE, 1), (HEAD, 1)]
    assert abba_schedule(3) == [(BASE, 1), (HEAD, 1), (HEAD, 2), (BASE, 2), (BASE, 3), (HEAD, 3)]
    assert [side for side, _ in abba_schedule(6)].count(BASE) == 6


@pytest.mark.parametrize("trials", ["0", "-1", "two", "1.5"])
def test_trials_must_be_a_positive_integer(trials, repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    before = _run_dirs(repo)
    assert main(["ab", "ab-base", "ab-head", "--trials", trials]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == f"dpbench ab: error: --trials: expected an int >= 1, found {trials!r}", err
    assert _run_dirs(repo) == before, "nothing is made for bad input"


def test_unknown_revision_is_named(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    before = _run_dirs(repo)
    assert main(["ab", "ab-base", "no-such-rev"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'no-such-rev'" in err[0], err
    assert _run_dirs(repo) == before, "nothing is made for bad input"


def test_not_a_git_checkout(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["ab", "HEAD~1", "HEAD"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a git checkout" in err[0] and str(tmp_path) in err[0], err


def test_pytest_args_need_the_double_dash(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    assert main(["ab", "ab-base", "ab-head", "-k", "mlp"]) == 2
    assert "unrecognized arguments: -k mlp" in capsys.readouterr().err


@pytest.mark.slow
def test_same_lock_shares_one_environment_and_each_side_imports_its_own_source(repo, tmp_path, envs):
    # The file's shared environments, still empty: the first test to make one (the later tests reuse
    # it rather than pay a venv of their own).
    assert not any(envs.iterdir()), "this test makes the first shared environment"
    before = len(_setup_log(repo))
    revisions = prepare(repo=repo, revs={BASE: "ab-base", HEAD: "ab-head"}, run_dir=tmp_path / "run", envs=envs)
    try:
        assert revisions[0].lock == revisions[1].lock == lock_hash(revisions[0].worktree)
        # Each side's source compiled once, before any session imports it (whatever PYTHONDONTWRITEBYTECODE says).
        assert all(list((r.worktree / "dpbench" / "__pycache__").glob("__init__.cpython-*.pyc")) for r in revisions)
        assert [p.name for p in envs.iterdir() if p.is_dir()] == [revisions[0].lock[:16]]
        log = _setup_log(repo)[before:]
        # Each revision's own setup-env ran; only the first installed into the environment.
        assert [line.split()[0] for line in log] == ["installed", "ran", "ran"], log
        assert log[1].endswith(str(revisions[0].worktree)) and log[2].endswith(str(revisions[1].worktree))
        for rev, tag in zip(revisions, ("ab-base", "ab-head")):
            # From a neutral directory: only PYTHONPATH can make dpbench resolve to the worktree
            # (the shared environment's interpreter has this checkout's dpbench installed).
            out = subprocess.run(
                [str(rev.python), "-c", "import dpbench; print(dpbench.__file__, dpbench.__version__)"],
                cwd=tmp_path,
                env=invocation_env(rev),
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout.split()
            assert out == [str(rev.worktree / "dpbench" / "__init__.py"), VERSIONS[tag]]
    finally:
        cleanup(repo, revisions)
    assert len(_worktrees(repo)) == 1 and not (tmp_path / "run" / "worktrees").exists()
    assert (envs / revisions[0].lock[:16] / "bin" / "python").exists(), "the shared environment is kept"


@pytest.mark.slow
def test_another_lock_gets_its_own_environment(repo, tmp_path, envs):
    before = len(_setup_log(repo))
    revisions = prepare(repo=repo, revs={BASE: "ab-base", HEAD: "ab-lock"}, run_dir=tmp_path / "run", envs=envs)
    try:
        assert revisions[0].lock != revisions[1].lock
        assert {r.lock[:16] for r in revisions} <= {p.name for p in envs.iterdir() if p.is_dir()}
        # ab-lock's environment is new: its setup-env installed into it (ab-base's may be reused).
        assert f"installed {revisions[1].worktree}" in _setup_log(repo)[before:]
    finally:
        cleanup(repo, revisions)
    assert len(_worktrees(repo)) == 1


@pytest.fixture(scope="module")
def ab_run(repo: Path, envs: Path, tmp_path_factory: pytest.TempPathFactory):
    workdir = tmp_path_factory.mktemp("abwork")
    # Without the multi-run compare, ab's own part (order, saving, clean-up) is still checked.
    compare = ["--json", str(workdir / "compare.json")]
    # The fixed design: measuring until settled is tested with a fake suite runner (test_ab_settle.py).
    proc = _run_ab(
        repo,
        "ab-base",
        "ab-head",
        "--trials",
        "2",
        "--no-until-settled",
        "--workdir",
        str(workdir),
        "--envs",
        str(envs),
        *compare,
        "--",
        *SELECTION,
    )
    runs = sorted(workdir.glob("*/*/*/[0-9][0-9][0-9][0-9]_ab-*.json"))
    return proc, workdir, runs


@pytest.mark.slow
def test_ab_saves_both_sides_in_abba_order(ab_run, repo):
    proc, workdir, runs = ab_run
    # 1 would be the compare's verdict on noise; anything else is ab's own failure.
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    (run_dir,) = [p for p in workdir.iterdir() if p.is_dir()]
    assert sorted(p.relative_to(run_dir).parts[0] for p in runs) == [BASE, BASE, HEAD, HEAD]
    docs = {p: json.loads(p.read_text()) for p in runs}
    in_time_order = sorted(runs, key=lambda p: datetime.fromisoformat(docs[p]["datetime"]))
    assert [p.relative_to(run_dir).parts[0] for p in in_time_order] == [BASE, HEAD, HEAD, BASE]
    commits = {BASE: _git(repo, "rev-parse", "ab-base"), HEAD: _git(repo, "rev-parse", "ab-head")}
    for path, doc in docs.items():
        side = path.relative_to(run_dir).parts[0]
        # Each invocation ran its own revision's source (the version marker) at its own commit.
        assert doc["machine_info"]["dpbench"]["version"] == VERSIONS[f"ab-{side}"]
        assert doc["commit_info"]["id"] == commits[side]
        assert [b["name"] for b in doc["benchmarks"]] == ["test_collective[4KiB-all_reduce]"]
        # DPBENCH_TRIALS=1: one trial per invocation; ab interleaves the trials itself.
        assert [b["extra_info"]["trials"]["count"] for b in doc["benchmarks"]] == [1]
    schedule = json.loads((run_dir / "schedule.json").read_text())
    assert [(i["side"], i["trial"]) for i in schedule["invocations"]] == abba_schedule(2)
    assert [i["run"] for i in schedule["invocations"]] == [str(p) for p in in_time_order]


@pytest.mark.slow
def test_ab_exit_code_and_output_are_the_compares(ab_run):
    proc, workdir, runs = ab_run
    base = [str(p) for p in runs if f"{os.sep}{BASE}{os.sep}" in str(p)]
    head = [str(p) for p in runs if f"{os.sep}{HEAD}{os.sep}" in str(p)]
    assert re.search(r"^baseline  = base \(ab-base = [0-9a-f]{10}\): 2 runs", proc.stdout, re.M), proc.stdout
    assert re.search(r"^candidate = head \(ab-head = [0-9a-f]{10}\): 2 runs", proc.stdout, re.M), proc.stdout
    # compare's own summary line (the one benchmark is listed only when it is not unchanged).
    assert re.search(r"^(PASS|FAIL): .*\(Holm over 1 cases\); exit [01]", proc.stdout, re.M), proc.stdout
    # The same comparison run directly gives the same verdict and exit code.
    direct = workdir / "direct.json"
    # ab pairs trial i of base with trial i of head (they ran next to each other): --paired.
    assert (
        main(["compare", "--baseline", *base, "--candidate", *head, "--paired", "--json", str(direct)])
        == proc.returncode
    )
    ab_json, direct_json = json.loads((workdir / "compare.json").read_text()), json.loads(direct.read_text())
    assert ab_json == direct_json
    assert ab_json["paired"] is True and ab_json["family"]["method"] == "paired"
    (bench,) = ab_json["benchmarks"]
    assert bench["pairs"] == 2 and bench["test"] == "moderated test on paired log ratios"
    assert "2 base/head pairs in schedule order" in bench["note"]


@pytest.mark.slow
def test_ab_leaves_no_worktree_and_no_process(ab_run, repo):
    proc, workdir, runs = ab_run
    assert len(_worktrees(repo)) == 1
    assert not list(workdir.glob("*/worktrees"))
    assert _left_under(workdir) == []
    assert len(runs) == 4


@pytest.mark.slow
def test_a_failing_invocation_stops_and_names_the_revision_and_trial(repo, envs):
    proc = _run_ab(repo, "ab-broken", "ab-head", "--trials", "3", "--envs", str(envs), "--", *SELECTION)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dpbench ab: error:")]
    assert len(errors) == 1 and re.search(
        r"base \(ab-broken = [0-9a-f]{10}\) trial 1 of 3 failed: pytest exited", errors[0]
    ), proc.stderr
    assert "broken on purpose" in proc.stderr  # the log's tail
    (run_dir,) = _run_dirs(repo)  # under the default work directory
    assert [p.name for p in (run_dir / "logs").glob("ab-*.log")] == ["ab-base-t01.log"], "nothing ran after it"
    assert len(_worktrees(repo)) == 1 and _left_under(run_dir) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, side",
    # SIGHUP takes SIGTERM's path in ab (dpbench._children.stop_signals, unit-tested in tests/test_children.py).
    [(signal.SIGINT, HEAD), (signal.SIGTERM, BASE), (signal.SIGKILL, BASE)],
    ids=["ctrl-c", "sigterm", "sigkill"],
)
def test_an_interrupt_stops_everything_and_keeps_the_saved_runs(repo, tmp_path, envs, sig, side):
    """Ctrl-C during head's first trial (base's is saved by then); SIGTERM (a CI cancel) during base's;
    SIGKILL (after a CI runner's grace period) during base's: nothing of the job may run on, even with
    no chance to clean up (its worktrees stay)."""
    proc = subprocess.Popen(
        _ab_command(
            "ab-base", "ab-head", "--trials", "3", "--workdir", str(tmp_path), "--envs", str(envs), "--", *SELECTION
        ),
        cwd=repo,
        env=_ab_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A test runner started in the background may have SIGINT ignored; ab must see it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 180
        # Once the trial's workers are up: pytest, the forkserver and two ranks work in its worktree.
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            worktree = list(tmp_path.glob(f"*/worktrees/{side}"))
            if (
                worktree
                and list(tmp_path.glob(f"*/logs/ab-{side}-t01.log"))
                and len(_processes_under(worktree[0])) >= 4
            ):
                break
            time.sleep(0.2)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    if sig == signal.SIGKILL:  # its pytest dies with it, and that one's workers with that
        assert proc.returncode == -signal.SIGKILL, out + err
        assert _left_under(tmp_path) == []
        assert not list(run_dir.glob(f"{side}/*/*.json")), "no partial run of the interrupted side"
        return
    how = "interrupted" if sig == signal.SIGINT else f"terminated ({sig.name})"
    assert proc.returncode == 128 + sig, out + err
    assert f"{how} while {side} (ab-{side}" in err and "trial 1 of 3" in err, err
    saved = sorted(run_dir.glob("*/*/[0-9][0-9][0-9][0-9]_*.json"))
    assert [p.relative_to(run_dir).parts[0] for p in saved] == ([BASE] if side == HEAD else [])
    for path in saved:
        json.loads(path.read_text())  # complete, readable
    assert not list(run_dir.glob(f"{side}/*/*.json")), "no partial run of the interrupted side"
    assert len(_worktrees(repo)) == 1 and not (run_dir / "worktrees").exists()
    assert _left_under(tmp_path) == []
