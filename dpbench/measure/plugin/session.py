"""Fixtures and pytest-benchmark hooks shared by the dpbench suites.

Measuring happens before any test runs: every selected case (and the reference cases they are
judged against) is measured in ``profile.trials`` fresh-process trials, trial 1 of every case,
then trial 2 of every case, … (:class:`dpbench.measure.trials.TrialSession`). Each test then publishes
its case's trials: pytest-benchmark reads them through ``worker_clock``, so its statistics and
terminal table are worker-measured seconds per step, and ``extra_info`` carries the trials.

Runs are stored by pytest-benchmark (``--benchmark-storage=file://./results``, set in
pyproject.toml). Sampler timelines are written to a staging directory while the session runs
and moved into ``results/<machine-id>/timelines/<run-id>/`` only when pytest-benchmark saves
the run. An interrupted session (Ctrl-C, or SIGTERM, which is handled as Ctrl-C and makes pytest
exit 143) saves nothing: no run file, no timelines; earlier runs are left exactly as they were.
Staged timelines and a save in progress are registered with the launcher's reaper
(:mod:`dpbench.launcher.lifeline`), so even a SIGKILL of pytest leaves neither behind.
"""
from __future__ import annotations

import os
import signal
import sys
import threading


_START_UP: dict = {"importing": True, "signal": None}


def _not_started_line(sigterm: bool) -> str:
    why = "terminated (SIGTERM)" if sigterm else "interrupted"
    return f"{why}: nothing was saved (the run had not started); earlier runs are untouched"


def _leave_at_start_up(signum: int) -> None:
    # Through sys.stderr and SystemExit, not os._exit: pytest captures output while it imports
    # conftests and writes what it captured out when an exception (this one) leaves the import.
    print(f"dpbench: {_not_started_line(signum == signal.SIGTERM)}", file=sys.stderr, flush=True)
    raise SystemExit(128 + signal.SIGTERM if signum == signal.SIGTERM else 2)  # 2: pytest's "interrupted"


def _start_up_signal(signum, frame):  # noqa: ARG001 - signal handler signature
    """SIGINT / SIGTERM before pytest configures the session: nothing has started and nothing can
    be saved yet, so say so in one line and exit as an interrupted session would. While this
    conftest imports torch the signal is only noted, and acted on once the imports are done:
    unwinding an exception through torch's half-done import aborted the interpreter (exit -6,
    found by scripts/soak_faults.py)."""
    if _START_UP["importing"]:
        _START_UP["signal"] = _START_UP["signal"] or signum
        return
    _leave_at_start_up(signum)


# Installed before the heavy imports below; pytest_configure puts back what was there before.
# Only over the defaults: a handler the caller installed is theirs.
_START_UP_HANDLERS: dict = {}
# Not in the cluster runner's head: it handles both itself, around the pytest session it runs.
if threading.current_thread() is threading.main_thread() and "dpbench.launcher.cluster" not in sys.modules:
    for _sig, _default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(_sig) is _default:
            _START_UP_HANDLERS[_sig] = signal.signal(_sig, _start_up_signal)

import dataclasses
import datetime as _dt
import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from pytest_benchmark.utils import get_machine_id

from dpbench.launcher.lifeline import reaper
from dpbench.launcher.machine import machine_facts
from dpbench.measure import parse_trials, resolve_profile
from dpbench.measure.convergence import resolve_convergence
from dpbench.measure import TrialSession, worker_clock

_START_UP["importing"] = False
if _START_UP["signal"] is not None:  # it came during the imports above
    _leave_at_start_up(_START_UP["signal"])

_TIMELINES = "timelines"


def _cuda_count() -> int:
    # device_count() asks the driver how many devices there are; it creates no CUDA context,
    # so spawned workers still own their devices.
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.fixture(scope="session")
def profile(request):
    return request.config._dpbench_profile


class TimelineStore:
    """Stages timeline files during the session; publishes them when the run is saved."""

    def __init__(self) -> None:
        self.staging = Path(tempfile.mkdtemp(prefix="dpbench-timelines-"))
        reaper().register(self.staging)  # removed even if pytest is SIGKILLed
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.run_id = f"{stamp}-{os.getpid()}"
        self.published: Path | None = None

    def path_for(self, name: str) -> tuple[Path, str]:
        safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)
        return self.staging / f"{safe}.csv", f"{_TIMELINES}/{self.run_id}/{safe}.csv"

    def publish(self, machine_dir: Path) -> Path | None:
        if self.published is not None or not any(self.staging.iterdir()):
            return self.published
        final = machine_dir / _TIMELINES / self.run_id
        partial = machine_dir / _TIMELINES / f".{self.run_id}.partial"
        partial.parent.mkdir(parents=True, exist_ok=True)
        reaper().register(partial)
        try:
            shutil.copytree(self.staging, partial)
            os.replace(partial, final)  # atomic: the directory appears complete or not at all
        except shutil.Error as exc:  # copytree gathers the errors: the first one says why (a full disk)
            shutil.rmtree(partial, ignore_errors=True)
            raise OSError(f"copying the timelines to {partial} failed: {exc.args[0][0][2]}") from None
        except BaseException:  # a full disk, Ctrl-C: no half-copied directory stays
            shutil.rmtree(partial, ignore_errors=True)
            raise
        finally:
            reaper().release(partial)
        self.published = final
        return final

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        reaper().release(self.staging)


def _storage_dir(config) -> Path | None:
    storage = config.getoption("benchmark_storage", None) or ""
    if not storage.startswith("file://"):
        return None
    return Path(storage[len("file://"):]).expanduser().resolve()


def pytest_addoption(parser):
    parser.addoption("--dpbench-trials", metavar="N", default=None,
                     help="fresh-process trials per case (default: the profile's; env DPBENCH_TRIALS)")
    parser.addoption("--dpbench-trace", action="store_true", default=False,
                     help="profile a few steps of every case after its first trial's timed rounds: per-rank "
                          "traces in results/<machine>/traces/<run-id>/ (env DPBENCH_TRACE=1)")


def pytest_configure(config):
    # From here on the session's own handling: SIGTERM is Ctrl-C at once (the start-up handler is
    # replaced, never the default put back in between: a SIGTERM there ended pytest with -15 and no
    # line), SIGINT is Python's KeyboardInterrupt again.
    _INTERRUPTED.update(yes=False, signal=None)
    _sigterm_interrupts(config, restore=_START_UP_HANDLERS.pop(signal.SIGTERM, None))
    for sig, previous in _START_UP_HANDLERS.items():
        signal.signal(sig, previous)
    _START_UP_HANDLERS.clear()
    if config.getoption("numprocesses", None) or os.environ.get("PYTEST_XDIST_WORKER"):
        # Every xdist worker would measure its own share of the cases at the same time as the others,
        # on the same cores (and pytest-benchmark disables itself in a worker: nothing would be saved).
        raise pytest.UsageError("the suites measure each case in fresh-process trials that must not share the "
                                "machine with other measurements: run them without pytest-xdist's -n/--numprocesses")
    # Resolved once: the test modules parametrize from it at collection time.
    try:
        profile = resolve_profile(cuda_count=_cuda_count())
        if config.getoption("dpbench_trials", None) is not None:
            profile = dataclasses.replace(profile, trials=parse_trials("--dpbench-trials",
                                                                      config.getoption("dpbench_trials")))
        config._dpbench_convergence = resolve_convergence()  # suites/test_convergence.py's DPBENCH_* settings
    except ValueError as exc:  # a bad DPBENCH_* variable or option: one clear line, not a traceback
        raise pytest.UsageError(str(exc)) from None
    if config.getoption("benchmark_disable", False):
        # --benchmark-disable is a smoke run: every case once, one round, no statistics.
        profile = dataclasses.replace(profile, trials=1, rounds=1, warmup_rounds=0)
    config._dpbench_profile = profile
    config._dpbench_timelines = TimelineStore()
    config._dpbench_traces = _trace_store(config)
    from dpbench.strategies import StrategyUnavailable

    from dpbench.launcher.forkserver import fresh_forkserver, worker_start
    from dpbench.launcher.remote import active_session

    # A fresh forkserver helper before each trial pass: the helper's luck is then trial-to-trial
    # spread, not a level that moves the whole session (fresh_forkserver says what was measured).
    # Under torchrun each node's agent forks its ranks from its own helper, kept for the session:
    # only this process's is restarted, so the runs say one helper per session there.
    clustered = active_session() is not None
    config._dpbench_trials = TrialSession(profile, profile.trials, timeline=config._dpbench_timelines.path_for,
                                          trace=config._dpbench_traces and config._dpbench_traces.dir_for,
                                          unavailable=(StrategyUnavailable,),
                                          progress=lambda text: _say(config, text),
                                          between_passes=fresh_forkserver, worker_start=worker_start(not clustered))


def _trace_store(config):
    """The session's TraceStore when tracing is on (--dpbench-trace or DPBENCH_TRACE=1), else None."""
    from dpbench.measure.tracing import trace_env
    from dpbench.traces.store import TraceStore

    try:
        on = config.getoption("dpbench_trace", False) or trace_env(os.environ)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    return TraceStore(config._dpbench_timelines.run_id) if on else None


def _say(config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"dpbench: {text}")
    else:  # pytest's terminal is not set up yet: interrupted while this conftest's pytest_configure ran
        print(f"dpbench: {text}", file=sys.stderr, flush=True)


def _case_of(item):
    """The case a suite item measures; None for other items and for items marked to skip."""
    if item.get_closest_marker("skip") is not None:
        return None
    case = getattr(item, "callspec", None) and item.callspec.params.get("case")
    return case if hasattr(case, "measure_trial") else None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "benchmark" in getattr(item, "fixturenames", ()):
            # pytest-benchmark reads the workers' clock, never the parent's (see dpbench.measure.trials).
            item.add_marker(pytest.mark.benchmark(timer=worker_clock))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """Measure every selected case in interleaved trials, then let the tests publish them."""
    config = session.config
    if config.option.collectonly or config.getoption("benchmark_skip", False):
        return None
    trials = config._dpbench_trials
    for item in session.items:
        case = _case_of(item)
        if case is not None:
            trials.add(case)
            if case.reference is not None:
                trials.add(case.reference)
    if len(trials):
        _say(config, f"measuring {len(trials)} cases × {trials.trials} trials, interleaved")
        trials.run()
    return None  # pytest's own loop runs the tests next


def pytest_keyboard_interrupt(excinfo):
    # Recorded for the saving hooks below; pytest itself goes on to finish the session.
    _INTERRUPTED["yes"] = True


_INTERRUPTED: dict = {"yes": False, "signal": None}
_EXIT_SIGTERM = 128 + signal.SIGTERM  # what a shell reports for a process SIGTERM ended


def _sigterm_interrupts(config, restore=None) -> None:
    """SIGTERM (a CI runner's cancel, ``timeout``) is Ctrl-C: the trial's workers are stopped,
    nothing is saved, and pytest exits 143 with a line saying so (see pytest_sessionfinish).
    ``restore``: the handler pytest_unconfigure puts back (default: the one this replaces)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
        _INTERRUPTED.update(yes=True, signal="SIGTERM")
        raise KeyboardInterrupt("SIGTERM")

    replaced = signal.signal(signal.SIGTERM, interrupt)
    config._dpbench_sigterm = restore if restore is not None else replaced


def _late_signals(config) -> None:
    """Once the run is saved (or discarded), SIGINT and SIGTERM only note that they came: the run
    on disk is already what the exit status will say. Restored in pytest_unconfigure."""
    if threading.current_thread() is not threading.main_thread():
        return

    def late(signum, frame):  # noqa: ARG001 - signal handler signature
        config._dpbench_late_signal = signal.Signals(signum).name

    config._dpbench_late_handlers = {sig: signal.signal(sig, late) for sig in (signal.SIGINT, signal.SIGTERM)}


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    # From here on pytest runs pytest_sessionfinish whatever happens (the save's hooks above).
    session.config._dpbench_session_started = True


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    last = getattr(config, "_dpbench_last_line", None)
    # Interrupted while pytest was still configuring: it runs no pytest_sessionfinish then.
    early = last is None and _INTERRUPTED["yes"] and not getattr(config, "_dpbench_session_started", False)
    if early:
        last = _not_started_line(_INTERRUPTED["signal"] == "SIGTERM")
    if last is not None:
        _say(config, last)
    late = getattr(config, "_dpbench_late_signal", None)
    if late is not None:
        _say(config, f"{late} came after the session had settled its results: ignored, nothing changed on disk")
    previous = getattr(config, "_dpbench_sigterm", None)
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
    for sig, handler in getattr(config, "_dpbench_late_handlers", {}).items():
        if sig != signal.SIGTERM or previous is None:  # SIGTERM: back to what it was before _sigterm_interrupts
            signal.signal(sig, handler)
    for name in ("_dpbench_timelines", "_dpbench_traces"):
        store = getattr(config, name, None)
        if store is not None:
            store.discard()
    if early and _INTERRUPTED["signal"] == "SIGTERM":
        raise SystemExit(_EXIT_SIGTERM)  # pytest would say 2 (interrupted); last of the unconfigure hooks


@pytest.fixture(scope="session")
def timelines(request):
    return request.config._dpbench_timelines


def pytest_benchmark_update_machine_info(config, machine_info):
    facts = machine_facts()
    facts["dpbench"]["profile"] = config._dpbench_profile.to_dict()
    facts["threads_per_worker"] = "max(1, cpu_count // processes) on CPU; see each benchmark's extra_info"
    facts["dpbench"]["worker_start"] = config._dpbench_trials.worker_start  # also per case: harness_settings
    from dpbench.launcher.runtime_env import user_runtime_env

    # The user's OpenMP/MKL settings, passed to the workers unchanged (dpbench adds none).
    facts["runtime_env"] = user_runtime_env(os.environ)
    machine_info.update(facts)
    from dpbench.launcher.cluster import cluster_facts

    cluster = cluster_facts()  # dpbench.launcher.cluster: nodes, processes per node, each node's hostname/GPUs/NCCL_*
    if cluster is not None:
        machine_info["cluster"] = cluster


def pytest_benchmark_update_json(config, benchmarks, output_json):
    """Called just before pytest-benchmark writes the run: publish the timelines beside it."""
    if not (config.getoption("benchmark_save", None) or config.getoption("benchmark_autosave", None)):
        return
    if _INTERRUPTED["yes"]:
        return  # the run is about to be discarded (see pytest_sessionfinish): publish nothing
    storage = _storage_dir(config)
    if storage is None:
        return
    # Should pytest die during the write (SIGKILL), the reaper removes a half-written run file
    # and the timelines and traces published for it (see dpbench.launcher.lifeline).
    before = sorted(map(str, storage.glob(_RUN_GLOB)))
    machine_dir = storage / get_machine_id()
    config._dpbench_timelines.publish(machine_dir)
    if config._dpbench_traces is not None:
        config._dpbench_traces.publish(machine_dir)
    published = [config._dpbench_timelines.published, getattr(config._dpbench_traces, "published", None)]
    reaper().guard_save(str(storage), root=storage, pattern=_RUN_GLOB, before=before,
                        also=[str(p) for p in published if p], keep_complete=True)


_RUN_GLOB = "*/[0-9][0-9][0-9][0-9]_*.json"


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session, exitstatus):
    """An interrupted session saves nothing; a save interrupted mid-write leaves nothing behind.

    pytest-benchmark writes the run in its own sessionfinish; this wrapper removes the file it
    wrote when the session was interrupted (Ctrl-C at any point, the save included) and any run
    file left unparsable. Files that existed before the session are never touched.
    """
    storage = _storage_dir(session.config)
    before = set(storage.glob(_RUN_GLOB)) if storage and storage.exists() else set()
    interrupted = _INTERRUPTED["yes"] or exitstatus == pytest.ExitCode.INTERRUPTED
    outcome = yield
    # From here on the save is over: a SIGINT / SIGTERM landing now (settling the files below, the
    # rest of the shutdown) is noted and said, never raised — raised, it escaped pytest's session
    # as a traceback and a -2 exit beside a complete, saved run (found by scripts/soak_faults.py).
    _late_signals(session.config)
    interrupted_in_save = outcome.excinfo is not None and isinstance(outcome.excinfo[1], KeyboardInterrupt)
    failed_save = outcome.excinfo is not None and not interrupted_in_save
    interrupted = interrupted or _INTERRUPTED["yes"] or outcome.excinfo is not None
    store = session.config._dpbench_timelines
    for published in (store.published, getattr(session.config._dpbench_traces, "published", None)):
        if interrupted and published is not None:
            shutil.rmtree(published, ignore_errors=True)  # published by this session only
    removed = []
    if storage is not None and storage.exists():
        for path in set(storage.glob(_RUN_GLOB)) - before:
            try:
                if interrupted:
                    raise ValueError("interrupted")
                json.loads(path.read_text())
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
                removed.append(path.name)
        reaper().release(str(storage))  # the save is settled: nothing left for the reaper
    if not interrupted:
        return
    why = "terminated (SIGTERM)" if _INTERRUPTED["signal"] == "SIGTERM" else "interrupted"
    if failed_save:  # a full disk, a permission error: one line instead of pytest's INTERNALERROR
        error = outcome.excinfo[1]
        why = f"saving failed ({type(error).__name__}: {error})"
        outcome.force_result(None)
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    elif _INTERRUPTED["signal"] == "SIGTERM":
        session.exitstatus = _EXIT_SIGTERM
    if interrupted_in_save:  # Ctrl-C during the save (or pytest's summary): one line, pytest's exit 2, no traceback
        outcome.force_result(None)
        if _INTERRUPTED["signal"] != "SIGTERM":
            session.exitstatus = pytest.ExitCode.INTERRUPTED
    # The run's last line (printed after pytest's own summary, in pytest_unconfigure).
    session.config._dpbench_last_line = (f"{why}: nothing was saved" + (f" (removed {', '.join(removed)})" if removed
                                                                       else "") + "; earlier runs are untouched")


@pytest.fixture(scope="session")
def trials(request):
    """The session's :class:`dpbench.measure.trials.TrialSession`, every selected case measured."""
    return request.config._dpbench_trials


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    profile = getattr(config, "_dpbench_profile", None)
    if profile is not None and len(getattr(config, "_dpbench_trials", ())):
        terminalreporter.write_line(
            f"dpbench: pytest-benchmark's table shows seconds per step (per call for collectives), measured in "
            f"the workers: one round = one fresh-process trial's median ({profile.trials} trials × "
            f"{profile.rounds} timed rounds per case), so its Median is the headline step_time_s that "
            f"`dpbench report` and `dpbench compare` use.")


@pytest.fixture
def unavailable_to_skip():
    """Turn a strategy that cannot run on this machine into a skip carrying its reason."""
    from dpbench.strategies import StrategyUnavailable

    class _Ctx:
        def __enter__(self):
            return self

        def __exit__(self, exc_type, exc, tb):
            if exc_type is not None and issubclass(exc_type, StrategyUnavailable):
                pytest.skip(str(exc))
            return False

    return _Ctx()
