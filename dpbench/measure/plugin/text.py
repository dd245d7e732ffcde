"""What a measuring session says on the terminal: its progress lines and the note under
pytest-benchmark's table."""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["Progress", "clock_text", "idle_line", "progress_line", "say", "table_note"]


def say(config: Any, text: str, *, progress: Progress | None = None) -> None:
    """One ``dpbench: …`` line, through pytest's terminal when it is set up. ``progress``: the
    session's updating line, ended first."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if progress is not None:
        progress.end_line()  # a line of its own, not over the updating progress line
    if reporter is not None:
        reporter.write_line(f"dpbench: {text}")
    else:  # pytest's terminal is not set up yet: interrupted while the session was configured
        print(f"dpbench: {text}", file=sys.stderr, flush=True)


def clock_text(seconds: float) -> str:
    """``75`` → ``1m15s``; ``3725`` → ``1h02m``; under a minute ``42s``."""
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_line(text: str, *, elapsed: float, done: int, total: int) -> str:
    """``text`` with the time so far and the time left, estimated from the slots done so far (each
    slot one case's trial; the rest are assumed to take as long on average)."""
    if done <= 0 or total <= 0:
        return f"{text} · {clock_text(elapsed)} elapsed"
    left = elapsed / done * max(total - done, 0)
    return f"{text} · {clock_text(elapsed)} elapsed, ~{clock_text(left)} left"


class Progress:
    """The session's ``trial i/n · k/N · case`` lines with elapsed time and an ETA.

    On a terminal they are one line rewritten in place (``\\r``; any other line ends it first);
    into a pipe or a CI log, one plain line each, as before. ``clock`` is injectable for tests."""

    def __init__(self, config: Any, *, clock: Callable[[], float] = time.monotonic):
        self._config = config
        self._clock = clock
        self._started: float | None = None
        self._open = False  # an updating line is on screen, not yet ended

    def _reporter(self) -> Any:
        return self._config.pluginmanager.get_plugin("terminalreporter")

    def __call__(self, text: str, *, done: int | None = None, total: int | None = None) -> None:
        if done is None or total is None:
            say(self._config, text, progress=self)
            return
        now = self._clock()
        if self._started is None:
            self._started = now
        line = f"dpbench: {progress_line(text, elapsed=now - self._started, done=done, total=total)}"
        reporter = self._reporter()
        if reporter is not None and reporter.isatty():
            reporter.rewrite(line, erase=True)
            self._open = True
        elif reporter is not None:
            reporter.write_line(line)
        else:
            print(line, file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def warnings_on_own_lines(self) -> Iterator[None]:
        """While it lasts, a warning this process prints ends the updating line first, so it is
        not drawn into the middle of the progress line (pytest captures warnings only around a
        test, not while the trials run)."""
        shown = warnings.showwarning

        def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            self.end_line()
            shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        try:
            yield
        finally:
            warnings.showwarning = shown

    def end_line(self) -> None:
        """End the updating line (before any other output, and when the trials are over)."""
        if self._open:
            self._open = False
            reporter = self._reporter()
            if reporter is not None:
                reporter.write("\n")


def table_note(profile: Any, *, trials: str | None = None) -> str:
    """What pytest-benchmark's table shows when the plugin measured it (``trials``: how many trials
    each case had, in words, where not the profile's count: ``6–12 trials until settled``)."""
    return (
        f"dpbench: pytest-benchmark's table shows seconds per step (per call for collectives), measured in "
        f"the workers: one round = one fresh-process trial's median ({trials or f'{profile.trials} trials'} × "
        f"{profile.rounds} timed rounds per case), so its Median is the headline step_time_s that "
        f"`dpbench report` and `dpbench compare` use."
    )


def idle_line(idle: Mapping[str, Any]) -> str:
    """What the session's idle baseline read (:func:`dpbench.measure.energy.idle_power`), one line:
    ``idle GPU draw over 2.5 s before the trials: cuda:0 61 W, cuda:1 58 W``."""
    from dpbench.decision.text import energy_gap_text

    devices = idle.get("devices") or {}
    if not devices:
        return f"no idle GPU draw: {energy_gap_text(idle)}"
    parts = [
        f"{label} {entry['w']:.0f} W" if entry.get("w") is not None else f"{label} absent ({energy_gap_text(entry)})"
        for label, entry in devices.items()
    ]
    return f"idle GPU draw over {idle['window_s']:.1f} s before the trials: {', '.join(parts)}"
