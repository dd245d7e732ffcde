"""The measuring session's state: one object on pytest's config, as pytest-benchmark keeps its
``BenchmarkSession``, stored under a :class:`pytest.StashKey` (pytest's place for a plugin's state).

The hooks fill it as the session goes (:mod:`.session` from ``pytest_configure`` on, :mod:`.signals`
with the handlers it replaced); the suites, the report's end-of-session summary and the tests read
it through :func:`session_of`. This module stays light: every pytest session loads the plugin.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from dpbench.measure.convergence import ConvergenceSettings
    from dpbench.measure.plugin.storage import TimelineStore
    from dpbench.measure.plugin.text import Progress
    from dpbench.measure.profiles import ProfileConfig
    from dpbench.measure.remeasure import Remeasured
    from dpbench.measure.settings import SessionSettings
    from dpbench.measure.trials import TrialSession
    from dpbench.traces.store import TraceStore

__all__ = ["SESSION_KEY", "DpbenchSession", "measuring_session", "session_of", "start_session"]


@dataclass(kw_only=True, eq=False)  # not frozen: the hooks fill it in as the session goes
class DpbenchSession:
    """What one measuring pytest session holds, from ``pytest_configure`` to ``pytest_unconfigure``.

    A field is None until the hook that sets it has run: an interrupted or misconfigured session
    ends with some of them never set, and ``pytest_unconfigure`` reads whatever is there."""

    settings: SessionSettings | None = None
    """The session's settings, parsed once: ``dpbench run``'s value, else the ``--dpbench-*``
    options over the ``DPBENCH_*`` variables."""
    profile: ProfileConfig | None = None
    """The profile the settings resolve to on this machine; the suites parametrize from it at collection time."""
    convergence: ConvergenceSettings | None = None
    """The convergence suite's ``DPBENCH_*`` settings, resolved once with the profile."""
    timelines: TimelineStore | None = None
    """Where the sampler timelines are staged, and published beside the saved run."""
    traces: TraceStore | None = None
    """Where the per-rank traces go when tracing is on; None when it is off."""
    progress: Progress | None = None
    """The ``trial i/n · k/N · case`` line: ended before any other ``dpbench:`` line."""
    trials: TrialSession | None = None
    """Every selected case (and its reference), measured in interleaved fresh-process trials."""
    files: dict[str, Path] = field(default_factory=dict)
    """Each collected node id's file: the suites' saved names (``storage.suite_fullnames``)."""
    remeasured: Remeasured | None = None
    """What the re-measurement pass did; None in a smoke run or before the trials ran."""
    nvml: Any = None
    """The ``pynvml`` module, initialised for the whole session on CUDA (None elsewhere)."""
    session_started: bool = False
    """pytest_sessionstart has run: pytest runs pytest_sessionfinish from then on, whatever happens."""
    last_line: str | None = None
    """The interrupted session's last line (nothing saved), printed after pytest's summary."""
    stop_handlers: dict[signal.Signals, Any] = field(default_factory=dict)
    """The SIGTERM/SIGHUP handlers to put back when the session ends (empty: nothing was replaced)."""
    late_handlers: dict[signal.Signals, Any] = field(default_factory=dict)
    """The SIGINT/SIGTERM/SIGHUP handlers the after-the-save handlers replaced, to put back at the end."""
    late_signal: str | None = None
    """The name of a signal that came after the results were settled (noted, never raised)."""


SESSION_KEY = pytest.StashKey[DpbenchSession]()
"""The measuring session's state on pytest's config: ``config.stash[SESSION_KEY]``."""


def start_session(config: Any) -> DpbenchSession:
    """A fresh state for this measuring session, stored on its config (pytest_configure)."""
    state = DpbenchSession()
    config.stash[SESSION_KEY] = state
    return state


def measuring_session(config: Any) -> DpbenchSession | None:
    """The session's state, or None when the dpbench plugin does not measure this pytest session
    (or it has not been configured yet)."""
    return config.stash.get(SESSION_KEY, None)


def session_of(config: Any) -> DpbenchSession:
    """The measuring session's state: a suite's ``metafunc.config``, a hook's ``config``."""
    state = measuring_session(config)
    if state is None:
        raise LookupError(
            "config: expected a pytest session the dpbench plugin measures (a path under its suites, "
            "--pyargs dpbench.suites or --dpbench), found one it does not measure"
        )
    return state
