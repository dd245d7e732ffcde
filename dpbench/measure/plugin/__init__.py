"""The measuring plugin: how pytest runs dpbench's suites (registered as the ``dpbench`` pytest
plugin through the ``pytest11`` entry point, so an installed package has it without a conftest).

This module is what every pytest session in an environment with dpbench loads; it stays light
and measures nothing unless the session runs dpbench's suites — a path in the suites directory
(``pytest suites/`` in a checkout), ``pytest --pyargs dpbench.suites`` (an installed package) —
or is asked to with ``--dpbench`` (a suite of your own). Then it registers
:mod:`~dpbench.measure.plugin.session` (the hooks and fixtures: the interleaved trials, the
machine info, saving), split by concern as pytest-benchmark's plugin is:
:mod:`~dpbench.measure.plugin.storage` (where runs and timelines go, nothing half-saved),
:mod:`~dpbench.measure.plugin.signals` (SIGINT, SIGTERM, SIGHUP from start-up to the last line) and
:mod:`~dpbench.measure.plugin.text` (what it prints). The session's state is one
:class:`~dpbench.measure.plugin.state.DpbenchSession` on pytest's config: the suites and other
plugins read it with :func:`session_of`. ``-p no:dpbench`` turns it off.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from dpbench.measure.plugin.selection import SUITES_PACKAGE, measures, suites_dir
from dpbench.measure.plugin.state import DpbenchSession, measuring_session, session_of

__all__ = ["SUITES_PACKAGE", "DpbenchSession", "measures", "measuring_session", "session_of", "suites_dir"]


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("dpbench", "dpbench: data-parallel training benchmarks")
    group.addoption(
        "--dpbench",
        action="store_true",
        default=False,
        dest="dpbench_measure",
        help="measure this session's cases with dpbench's plugin (fresh-process trials, saved runs); "
        "on by itself for dpbench's own suites (paths under its suites directory, "
        "--pyargs dpbench.suites)",
    )
    group.addoption(
        "--dpbench-trials",
        metavar="N",
        default=None,
        help="fresh-process trials per case (default: the profile's; env DPBENCH_TRIALS)",
    )
    group.addoption(
        "--dpbench-until-settled",
        action="store_true",
        default=False,
        help="trials until the answer is settled: after the fewest trials a claim needs, only the cases "
        "whose comparisons are still open get more, up to --dpbench-max-trials and within --dpbench-budget "
        "(a sequential design that keeps false claims at the fixed design's level)",
    )
    group.addoption(
        "--dpbench-max-trials",
        metavar="N",
        default=None,
        help="with --dpbench-until-settled: the most trials a case gets (default 12; at least 3)",
    )
    group.addoption(
        "--dpbench-budget",
        metavar="TIME",
        default=None,
        help="with --dpbench-until-settled: no trial pass starts that would end past this wall-clock "
        "time from the first trial, e.g. 90s, 10m, 1h (default: none)",
    )
    group.addoption(
        "--dpbench-workload",
        action="append",
        metavar="SPEC",
        default=None,
        dest="dpbench_workloads",
        help="measure this workload in every suite (repeatable; replaces the profile's and DPBENCH_WORKLOADS): "
        "a registered name, MODULE:ATTR, path/to/file.py:ATTR or hf:MODEL_TYPE, with @key=value overrides",
    )
    group.addoption(
        "--dpbench-strategies",
        metavar="LIST",
        default=None,
        help="measure only these strategies' cases, e.g. single,ddp,fsdp; each maybe a configuration, "
        "ddp@bucket_cap_mb=100, a case of its own (env DPBENCH_STRATEGIES)",
    )
    group.addoption(
        "--dpbench-settings",
        metavar="JSON",
        default=None,
        help="the session's settings as one value, as dpbench run hands them in (instead of the options "
        "above and the DPBENCH_* variables)",
    )
    group.addoption(
        "--dpbench-device-memory",
        metavar="SIZE",
        default=None,
        help="the memory of each device (each GPU; the host's RAM on CPU) the estimate is checked against "
        "before a case launches, instead of what is free now, e.g. 80GB, 16GiB (env DPBENCH_DEVICE_MEMORY)",
    )
    group.addoption(
        "--dpbench-ignore-memory-estimate",
        action="store_true",
        default=False,
        help="launch every case even when its memory estimate exceeds the device's free memory "
        "(env DPBENCH_IGNORE_MEMORY_ESTIMATE=1)",
    )
    group.addoption(
        "--dpbench-trace",
        action="store_true",
        default=False,
        help="profile a few steps of every case after its first trial's timed rounds: per-rank "
        "traces in results/<machine>/traces/<run-id>/ (env DPBENCH_TRACE=1)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: Any, parser: Any, args: list[str]) -> None:
    """Before any conftest: register the measuring session when this session measures."""
    known = early_config.known_args_namespace
    paths = list(getattr(known, "file_or_dir", None) or [])
    if not measures(
        paths,
        asked=bool(getattr(known, "dpbench_measure", False)),
        invocation_dir=Path(early_config.invocation_params.dir),
        suites=suites_dir(),
    ):
        return
    from dpbench.measure.plugin import signals

    # The cluster runner's head runs this pytest session inside its own signal handling: it has
    # installed its pools' provider (dpbench.workers.provider) before starting pytest.
    provider = sys.modules.get("dpbench.workers.provider")
    signals.begin_start_up(someone_else_handles=provider is not None and provider.current_provider() is not None)
    from dpbench.measure.plugin import session  # torch and dpbench: seconds, while a signal is only noted

    signals.end_start_up_imports()
    if not early_config.pluginmanager.is_registered(session):
        early_config.pluginmanager.register(session, "dpbench-session")
