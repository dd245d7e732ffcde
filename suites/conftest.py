"""Fixtures and pytest-benchmark hooks shared by the dpbench suites.

Runs are stored by pytest-benchmark (``--benchmark-storage=file://./results``, set in
pyproject.toml). Sampler timelines are written to a staging directory while the session runs
and moved into ``results/<machine-id>/timelines/<run-id>/`` only when pytest-benchmark saves
the run, so an interrupted session never leaves a half-written file in ``results/``.
"""
from __future__ import annotations

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

from dpbench.machine import machine_facts
from dpbench.suite import resolve_profile

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


def pytest_configure(config):
    # Resolved once: the test modules parametrize from it at collection time.
    try:
        config._dpbench_profile = resolve_profile(cuda_count=_cuda_count())
    except ValueError as exc:  # a bad DPBENCH_* variable: one clear line, not a traceback
        raise pytest.UsageError(str(exc)) from None
    config._dpbench_timelines = TimelineStore()


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


def pytest_benchmark_update_json(config, benchmarks, output_json):
    """Called just before pytest-benchmark writes the run: publish the timelines beside it."""
    if not (config.getoption("benchmark_save", None) or config.getoption("benchmark_autosave", None)):
        return
    storage = _storage_dir(config)
    if storage is None:
        return
    config._dpbench_timelines.publish(storage / get_machine_id())


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session, exitstatus):
    """If saving is interrupted mid-write, remove the half-written run file."""
    storage = _storage_dir(session.config)
    before = set(storage.glob("*/[0-9][0-9][0-9][0-9]_*.json")) if storage and storage.exists() else set()
    outcome = yield
    if outcome.excinfo is None or storage is None or not storage.exists():
        return
    for path in set(storage.glob("*/[0-9][0-9][0-9][0-9]_*.json")) - before:
        try:
            json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def baselines():
    """`single` throughput per (workload, global_batch) measured in this session."""
    return {}


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
