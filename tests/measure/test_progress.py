"""The session's progress lines: elapsed time and an ETA from the slots done so far, one updating
line on a terminal, plain lines into a pipe."""

from __future__ import annotations

import warnings

from dpbench.measure.plugin.text import Progress, clock_text, progress_line


def test_clock_text():
    assert [clock_text(s) for s in (0, 42.4, 75, 3725)] == ["0s", "42s", "1m15s", "1h02m"]


def test_eta_from_the_slots_done_so_far():
    assert (
        progress_line("trial 1/5 · 1/310 · x", elapsed=0.0, done=0, total=310) == "trial 1/5 · 1/310 · x · 0s elapsed"
    )
    # 20 slots in 60 s: the other 290 at 3 s each
    assert (
        progress_line("trial 1/5 · 21/310 · x", elapsed=60.0, done=20, total=310)
        == "trial 1/5 · 21/310 · x · 1m00s elapsed, ~14m30s left"
    )


class _Reporter:
    def __init__(self, tty: bool):
        self.tty, self.out = tty, []

    def isatty(self):
        return self.tty

    def rewrite(self, line, erase=False):
        self.out.append(("rewrite", line))

    def write_line(self, line):
        self.out.append(("line", line))

    def write(self, text):
        self.out.append(("write", text))


class _Config:
    def __init__(self, reporter):
        self.reporter = reporter
        self.pluginmanager = self

    def get_plugin(self, name):
        return self.reporter if name == "terminalreporter" else None


def _session(tty: bool) -> tuple[_Reporter, Progress]:
    reporter = _Reporter(tty)
    config = _Config(reporter)
    clock = iter([100.0, 130.0, 160.0])  # a fake clock: 30 s per slot
    progress = Progress(config, clock=lambda: next(clock))
    return reporter, progress


def test_on_a_terminal_one_updating_line_ended_before_any_other_line():
    reporter, progress = _session(tty=True)
    progress("trial 1/2 · 1/4 · a", done=0, total=4)
    progress("trial 1/2 · 2/4 · b", done=1, total=4)
    progress("warning: a, trial 1: clocks moved")  # a line of its own
    progress("trial 2/2 · 3/4 · a", done=2, total=4)
    progress.end_line()
    assert reporter.out == [
        ("rewrite", "dpbench: trial 1/2 · 1/4 · a · 0s elapsed"),
        ("rewrite", "dpbench: trial 1/2 · 2/4 · b · 30s elapsed, ~1m30s left"),
        ("write", "\n"),
        ("line", "dpbench: warning: a, trial 1: clocks moved"),
        ("rewrite", "dpbench: trial 2/2 · 3/4 · a · 1m00s elapsed, ~1m00s left"),
        ("write", "\n"),
    ]


def test_into_a_pipe_plain_lines():
    reporter, progress = _session(tty=False)
    progress("trial 1/2 · 1/4 · a", done=0, total=4)
    progress("trial 1/2 · 2/4 · b", done=1, total=4)
    progress.end_line()
    assert reporter.out == [
        ("line", "dpbench: trial 1/2 · 1/4 · a · 0s elapsed"),
        ("line", "dpbench: trial 1/2 · 2/4 · b · 30s elapsed, ~1m30s left"),
    ]


def test_a_warning_printed_while_the_line_updates_ends_the_line_first(monkeypatch):
    """Python prints a warning on stderr wherever the cursor is: into the middle of the updating
    line unless that line is ended first."""
    reporter, progress = _session(tty=True)

    def shown(message, category, filename, lineno, file=None, line=None):
        reporter.out.append(("warning", str(message)))

    monkeypatch.setattr(warnings, "showwarning", shown)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with progress.warnings_on_own_lines():
            progress("trial 1/2 · 1/4 · a", done=0, total=4)
            warnings.warn("a torch warning", UserWarning, stacklevel=1)
            warnings.warn("another", UserWarning, stacklevel=1)  # the line is ended already
            progress("trial 1/2 · 2/4 · b", done=1, total=4)
        assert warnings.showwarning is shown  # put back
    assert reporter.out == [
        ("rewrite", "dpbench: trial 1/2 · 1/4 · a · 0s elapsed"),
        ("write", "\n"),
        ("warning", "a torch warning"),
        ("warning", "another"),
        ("rewrite", "dpbench: trial 1/2 · 2/4 · b · 30s elapsed, ~1m30s left"),
    ]
