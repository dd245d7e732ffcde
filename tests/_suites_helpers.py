"""The suite smoke tests' helpers (test_suites_smoke.py, test_suites_signals.py, traces/test_suite_traces.py):
a pytest of the suites in a subprocess, tagged with a marker to find the processes it leaves, and
interrupted with SIGINT at a chosen line of its output."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def _env(marker: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DPBENCH_PROFILE": "quick",
            "DPBENCH_WORKLOADS": "mlp",
            "DPBENCH_WORLD_SIZES": "1,2",
            "DPBENCH_TRIALS": "2",
            # The fit check on the held state (instant) rather than the traced peak: these sessions
            # check signals, saving and traces, and tracing the peak costs each one ~2 s of CPU
            # (torch._dynamo's import, FakeTensorMode). The documented run keeps the default.
            "DPBENCH_MEMORY_ESTIMATE": "state",
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


def _sigint_when(
    cmd: list[str],
    env: dict[str, str],
    when: str,
    *,
    delay: float = 0.0,
    group: bool = False,
    sig: signal.Signals = signal.SIGINT,
) -> tuple[int, str]:
    """Run ``cmd``, send SIGINT (or ``sig``) ``delay`` s after a line matches the regex ``when``;
    (exit code, output). ``group``: to ``cmd``'s whole process group, as Ctrl-C in a terminal does
    (it and its children)."""
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
        start_new_session=group,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            lines.append(line)
            if re.search(when, line):
                time.sleep(delay)
                if group:
                    os.killpg(proc.pid, sig)
                else:
                    proc.send_signal(sig)
                break
            assert time.monotonic() < deadline, "".join(lines)[-3000:]
        rest, _ = proc.communicate(timeout=90)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(lines)


def _interrupted_run(
    tmp_path,
    marker: str,
    *,
    when: str,
    args: list[str],
    extra_plugin: str | None = None,
    trials: int = 2,
    sig: signal.Signals = signal.SIGINT,
):
    """Start a suite run of ``trials`` trials a case, send SIGINT (or ``sig``) once a line matches
    the regex ``when``; return its output."""
    storage = tmp_path / "results"
    earlier = storage / "Some-Machine" / "0001_earlier.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text(json.dumps({"benchmarks": [], "machine_info": {}, "version": "x"}))
    before = earlier.read_bytes()
    # Not under tmp_path: the forkserver's socket lives under TMPDIR and must fit a Unix socket path.
    tmpdir = Path(tempfile.mkdtemp(prefix="dpt-"))
    try:
        env = _env(marker, TMPDIR=str(tmpdir), DPBENCH_TRIALS=str(trials))
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
        code, out = _sigint_when(cmd, env, when, delay=0.3, sig=sig)
        assert code != 0 if sig == signal.SIGINT else code == 128 + sig, out[-3000:]
        assert earlier.read_bytes() == before, "an earlier run was changed"
        saved = sorted(p.name for p in storage.rglob("*.json") if p != earlier)
        assert saved == [], f"an interrupted session saved {saved}"
        assert not list(storage.rglob("timelines/*")), "an interrupted session published timelines"
        assert not list(tmpdir.glob("dpbench-*")), list(tmpdir.iterdir())
        assert not _leftovers(marker, grace=10)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return out
