"""A pytest plugin (``-p disturb_plugin``, with this folder on PYTHONPATH) that disturbs one chosen
trial of a measuring session, as another user's job disturbs a shared machine: while trial
``DPBENCH_DISTURB_TRIAL`` (1-based) of the case whose id is ``DPBENCH_DISTURB_CASE`` (``single-mlp-w1``)
runs for the first time, CPU-bound processes (``DPBENCH_DISTURB_HOGS`` per core, default 2) spin
beside its workers. Its re-measurement runs undisturbed. Nothing in dpbench knows: the plugin
wraps the case it hands the session (``TrialSession.add``), from the test side only."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dpbench.measure.plugin import measuring_session

_CASE = os.environ.get("DPBENCH_DISTURB_CASE", "")
_TRIAL = int(os.environ.get("DPBENCH_DISTURB_TRIAL", "0") or 0)
_HOGS = int(os.environ.get("DPBENCH_DISTURB_HOGS", "2") or 2)


class _Disturbed:
    """The case, with its first run of the chosen trial measured beside CPU hogs."""

    def __init__(self, case):
        self._case = case
        self._fired = False

    def __getattr__(self, name):
        return getattr(self._case, name)

    def measure_trial(self, profile, *, trial, **kwargs):
        if trial + 1 != _TRIAL or self._fired:
            return self._case.measure_trial(profile, trial=trial, **kwargs)
        self._fired = True
        count = _HOGS * (os.cpu_count() or 1)
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
        print(f"disturb_plugin: {count} CPU hogs during trial {_TRIAL} of {_CASE}", file=sys.stderr, flush=True)
        try:
            return self._case.measure_trial(profile, trial=trial, **kwargs)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()


@pytest.hookimpl(trylast=True)  # after dpbench's plugin made the session
def pytest_configure(config):
    state = measuring_session(config)
    session = state.trials if state is not None else None
    if session is None or not _CASE or _TRIAL < 1:
        return
    add = session.add

    def add_disturbed(case):
        if getattr(case, "id", None) == _CASE and case.key not in session.results:
            case = _Disturbed(case)
        return add(case)

    session.add = add_disturbed
