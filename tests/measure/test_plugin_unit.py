"""The measuring plugin's pure parts: when a session measures, how suite benchmarks are named, and
where the session's state lives."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from dpbench.measure.plugin import measuring_session, session_of
from dpbench.measure.plugin.selection import measures, suites_dir
from dpbench.measure.plugin.state import start_session
from dpbench.measure.plugin.storage import suite_fullnames

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkout_suites_are_the_package_suites():
    assert suites_dir() == ROOT / "suites"


def test_a_session_measures_the_suites_or_when_asked(tmp_path):
    suites = tmp_path / "suites"
    (suites / "sub").mkdir(parents=True)
    here = dict(invocation_dir=tmp_path, suites=suites)
    assert measures(["suites"], asked=False, **here)
    assert measures(["suites/test_x.py::test_y[a-b]"], asked=False, **here)
    assert measures(["suites/sub"], asked=False, **here)
    assert measures(["dpbench.suites"], asked=False, **here) and measures(
        ["dpbench.suites.test_x"], asked=False, **here
    )
    assert measures([], asked=False, invocation_dir=suites, suites=suites)  # run inside the suites directory
    assert not measures(["tests"], asked=False, **here)
    assert not measures([], asked=False, **here)  # the invocation directory holds the suites, is not in them
    assert not measures(["dpbench.suitesx"], asked=False, **here)
    assert measures(["tests"], asked=True, **here)  # --dpbench: a suite of one's own
    assert not measures(["suites"], asked=False, invocation_dir=tmp_path, suites=None)


def test_suite_benchmarks_are_named_as_in_a_checkout_wherever_they_ran(tmp_path):
    suites = tmp_path / "site" / "dpbench" / "suites"
    suites.mkdir(parents=True)
    files = {
        "test_throughput.py::test_throughput[ddp-mlp-w2]": suites / "test_throughput.py",  # --pyargs, rootdir elsewhere
        "suites/test_scaling.py::test_scaling[x]": suites / "test_scaling.py",  # a checkout
        "tests/test_other.py::test_x": tmp_path / "tests" / "test_other.py",
    }
    benches = [{"fullname": name} for name in [*files, "never/collected.py::test_y"]]
    suite_fullnames(benches, files=files, suites=suites)
    assert [b["fullname"] for b in benches] == [
        "suites/test_throughput.py::test_throughput[ddp-mlp-w2]",
        "suites/test_scaling.py::test_scaling[x]",
        "tests/test_other.py::test_x",
        "never/collected.py::test_y",
    ]
    unchanged = [{"fullname": "test_throughput.py::test_throughput[ddp-mlp-w2]"}]
    suite_fullnames(unchanged, files=files, suites=None)
    assert unchanged == [{"fullname": "test_throughput.py::test_throughput[ddp-mlp-w2]"}]


def test_the_session_state_is_one_object_on_the_config_stash():
    config = SimpleNamespace(stash=pytest.Stash())  # a session the plugin does not measure
    assert measuring_session(config) is None
    with pytest.raises(LookupError, match="config: expected a pytest session the dpbench plugin measures"):
        session_of(config)
    state = start_session(config)
    assert session_of(config) is state and measuring_session(config) is state
    assert state.profile is None and state.files == {} and not state.session_started


def test_sigterm_and_sighup_interrupt_the_session_once_and_are_put_back_after_it():
    """SIGTERM and SIGHUP are Ctrl-C from the session's start; a second one while it stops (``dpbench
    run`` passes on what reached both) is only noted; after the save all three are only noted; and the
    session puts back every handler it found."""
    import signal

    from dpbench.measure.plugin import signals
    from dpbench.measure.plugin.state import DpbenchSession

    def mine(signum, frame):  # noqa: ARG001 - signal handler signature
        raise AssertionError("the caller's handler")

    found = {sig: signal.signal(sig, mine) for sig in (signal.SIGTERM, signal.SIGHUP)}
    state = DpbenchSession()
    try:
        signals.session_signals(state)
        with pytest.raises(KeyboardInterrupt, match="SIGHUP"):
            signal.raise_signal(signal.SIGHUP)
        assert signals.INTERRUPTED == {"yes": True, "signal": "SIGHUP"}
        assert signals.stopped_by() == signal.SIGHUP
        signal.raise_signal(signal.SIGTERM)  # stopping already: noted, not raised
        signals.late_signals(state)
        signal.raise_signal(signal.SIGTERM)
        assert state.late_signal == "SIGTERM"
        signals.restore(state)
        assert [signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)] == [mine, mine]
    finally:
        signals.INTERRUPTED.update(yes=False, signal=None)
        for sig, handler in found.items():
            signal.signal(sig, handler)


def test_a_session_whose_cases_failed_is_not_warned_that_it_saves_nothing_unless_verbose():
    import warnings

    from pytest_benchmark.logger import PytestBenchmarkWarning

    from dpbench.measure.plugin.storage import no_empty_save_warning

    def warned(**how) -> list[str]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with no_empty_save_warning(**how):  # what pytest-benchmark says when nothing was measured
                warnings.warn(PytestBenchmarkWarning("Not saving anything, no benchmarks have been run!"), stacklevel=1)
        return [str(w.message) for w in seen]

    assert warned(interrupted=False, failed=True) == []  # the run's last line says what failed
    assert warned(interrupted=True) == []
    assert warned(interrupted=False, failed=True, verbose=True) == ["Not saving anything, no benchmarks have been run!"]
    assert warned(interrupted=False) == ["Not saving anything, no benchmarks have been run!"]  # nothing failed: say it


def test_the_max_trials_help_states_the_designs_default_and_minimum():
    # The plugin stays light (every pytest session loads it): its help is checked here, not imported.
    from dpbench.decision.sequential import DEFAULT_MAX_TRIALS, fewest_max_trials
    from dpbench.measure import plugin

    options: dict[str, dict] = {}
    group = SimpleNamespace(addoption=lambda *names, **attrs: options.update(dict.fromkeys(names, attrs)))
    plugin.pytest_addoption(SimpleNamespace(getgroup=lambda *_: group))
    help_text = options["--dpbench-max-trials"]["help"]
    assert help_text.endswith(f"(default {DEFAULT_MAX_TRIALS}; at least {fewest_max_trials()[0]})"), help_text
