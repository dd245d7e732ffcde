"""Fixtures and pytest-benchmark hooks shared by the dpbench suites.

Measuring happens before any test runs: every selected case (and the reference cases they are
judged against) is measured in ``profile.trials`` fresh-process trials, trial 1 of every case,
then trial 2 of every case, … (:class:`dpbench.measure.trials.TrialSession`). Each test then publishes
its case's trials: pytest-benchmark reads them through ``worker_clock``, so its statistics and
terminal table are worker-measured seconds per step, and ``extra_info`` carries the trials.

Runs are stored by pytest-benchmark (``--benchmark-storage=file://./results``, set in
pyproject.toml). Sampler timelines are written to a staging directory while the session runs
and moved into ``results/<machine-id>/timelines/<run-id>/`` only when pytest-benchmark saves
the run. An interrupted session (Ctrl-C) saves nothing: no run file, no timelines; earlier
runs are left exactly as they were.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from pytest_benchmark.utils import get_machine_id

from dpbench.launcher.machine import machine_facts
from dpbench.measure import parse_trials, resolve_profile
from dpbench.measure.convergence import resolve_convergence
from dpbench.measure import TrialSession, worker_clock

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
        shutil.copytree(self.staging, partial)
        os.replace(partial, final)  # atomic: the directory appears complete or not at all
        self.published = final
        return final

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def _storage_dir(config) -> Path | None:
    storage = config.getoption("benchmark_storage", None) or ""
    if not storage.startswith("file://"):
        return None
    return Path(storage[len("file://"):]).expanduser().resolve()


def pytest_addoption(parser):
    parser.addoption("--dpbench-trials", metavar="N", default=None,
                     help="fresh-process trials per case (default: the profile's; env DPBENCH_TRIALS)")


def pytest_configure(config):
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
    _INTERRUPTED["yes"] = False
    from dpbench.strategies import StrategyUnavailable

    config._dpbench_trials = TrialSession(profile, profile.trials, timeline=config._dpbench_timelines.path_for,
                                          unavailable=(StrategyUnavailable,),
                                          progress=lambda text: _say(config, text))


def _say(config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"dpbench: {text}")


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


_INTERRUPTED = {"yes": False}


def pytest_unconfigure(config):
    store = getattr(config, "_dpbench_timelines", None)
    if store is not None:
        store.discard()


@pytest.fixture(scope="session")
def timelines(request):
    return request.config._dpbench_timelines


def pytest_benchmark_update_machine_info(config, machine_info):
    facts = machine_facts()
    facts["dpbench"]["profile"] = config._dpbench_profile.to_dict()
    facts["threads_per_worker"] = "max(1, cpu_count // processes) on CPU; see each benchmark's extra_info"
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
    config._dpbench_timelines.publish(storage / get_machine_id())


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session, exitstatus):
    """An interrupted session saves nothing; a save interrupted mid-write leaves nothing behind.

    pytest-benchmark writes the run in its own sessionfinish; this wrapper removes the file it
    wrote when the session was interrupted (Ctrl-C at any point, the save included) and any run
    file left unparsable. Files that existed before the session are never touched.
    """
    storage = _storage_dir(session.config)
    before = set(storage.glob("*/[0-9][0-9][0-9][0-9]_*.json")) if storage and storage.exists() else set()
    interrupted = _INTERRUPTED["yes"] or exitstatus == pytest.ExitCode.INTERRUPTED
    outcome = yield
    interrupted = interrupted or _INTERRUPTED["yes"] or outcome.excinfo is not None
    store = session.config._dpbench_timelines
    if interrupted and store.published is not None:
        shutil.rmtree(store.published, ignore_errors=True)  # published by this session only
    if storage is None or not storage.exists():
        return
    removed = []
    for path in set(storage.glob("*/[0-9][0-9][0-9][0-9]_*.json")) - before:
        try:
            if interrupted:
                raise ValueError("interrupted")
            json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    if interrupted:
        _say(session.config, "interrupted: nothing was saved" + (f" (removed {', '.join(removed)})" if removed else "")
             + "; earlier runs are untouched")


@pytest.fixture(scope="session")
def trials(request):
    """The session's :class:`dpbench.measure.trials.TrialSession`, every selected case measured."""
    return request.config._dpbench_trials


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    profile = getattr(config, "_dpbench_profile", None)
    if profile is not None and len(getattr(config, "_dpbench_trials", ())):
        terminalreporter.write_line(
            f"dpbench: pytest-benchmark's table shows seconds per step (per call for collectives), measured in "
            f"the workers: {profile.trials} fresh-process trials × {profile.rounds} rounds per case. "
            f"`dpbench report` gives the medians over trials with their intervals.")


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
