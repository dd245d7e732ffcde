"""The suites interrupted as a user interrupts them: Ctrl-C in the middle of a later case, during
the save and after it, and a SIGINT or SIGTERM while the suites start — nothing half-saved, earlier
runs untouched, one line saying what happened, and no process left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest
from _suites_helpers import ROOT, _env, _interrupted_run, _leftovers, _sigint_when

pytestmark = pytest.mark.slow


def test_ctrl_c_in_a_later_case_saves_nothing_and_keeps_earlier_runs(tmp_path):
    marker = uuid.uuid4().hex
    # Interrupt in the second trial pass, at its second case: three cases were complete.
    out = _interrupted_run(
        tmp_path,
        marker,
        when=r"trial 2/2 · .*ddp-mlp-w2",
        args=["suites/", "-k", "test_throughput and mlp and (single or ddp)"],
    )
    assert "interrupted: nothing was saved" in out, out[-3000:]
    # No test ran: nothing else to say (pytest-benchmark's warning that it saves nothing, the note
    # on how to read a table it does not show).
    assert "Not saving anything" not in out and "PytestBenchmarkWarning" not in out, out[-3000:]
    assert "table shows" not in out, out[-3000:]


def test_a_closed_terminal_sighup_in_a_case_is_ctrl_c_exit_129(tmp_path):
    """SIGHUP (the terminal closed, the ssh session dropped) stops the session as SIGTERM does:
    workers stopped, nothing saved, exit 129 and a line saying so. Before, pytest died of it at
    once with no line, and its workers were left for the lifeline to end."""
    out = _interrupted_run(
        tmp_path,
        uuid.uuid4().hex,
        when=r"trial 1/1 · .*single-mlp-w1",
        args=["suites/", "-k", "test_throughput and mlp and single"],
        trials=1,
        sig=signal.SIGHUP,
    )
    # In the output, not necessarily last: a worker still starting when the session stopped may print
    # its own traceback (a broken pipe to its gone parent) after it, as it may after Ctrl-C.
    assert "dpbench: terminated (SIGHUP): nothing was saved; earlier runs are untouched\n" in out, out[-3000:]


def test_ctrl_c_during_the_save_leaves_no_file(tmp_path):
    marker = uuid.uuid4().hex
    # A plugin that makes the save slow enough to be interrupted, announcing when it is in it.
    (tmp_path / "slow_save.py").write_text(
        textwrap.dedent("""
        import sys, time
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_benchmark_update_json(config, benchmarks, output_json):
            print("SAVING NOW", flush=True)
            sys.stdout.flush()
            time.sleep(20)
    """)
    )
    _interrupted_run(
        tmp_path,
        marker,
        when="SAVING NOW",
        extra_plugin="slow_save",
        args=["suites/", "-k", "test_throughput and single"],
        trials=1,  # the save is what is interrupted: one pass before it is enough
    )


def test_ctrl_c_after_the_save_keeps_the_complete_run_and_exits_cleanly(tmp_path):
    """A SIGINT once the run is saved (here: during pytest's unconfigure) changes nothing on disk:
    the run is complete, pytest exits 0 and says the signal came late. Before, it escaped pytest
    as a KeyboardInterrupt traceback (exit -2) beside the saved run: the fault soak's one finding."""
    marker = uuid.uuid4().hex
    (tmp_path / "late_plugin.py").write_text(
        textwrap.dedent("""
        import sys, time
        import pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_unconfigure(config):
            print("UNCONFIGURE NOW", flush=True)
            time.sleep(3)
    """)
    )
    storage = tmp_path / "results"
    # One pass before the save: what is interrupted is what follows it.
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = _env(marker, PYTHONPATH=path, DPBENCH_TRIALS="1")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "late_plugin",
        "suites/",
        "-q",
        "-k",
        "test_throughput and single",
        f"--benchmark-storage=file://{storage}",
        "--benchmark-save=late",
    ]
    code, out = _sigint_when(cmd, env, "UNCONFIGURE NOW")
    assert code == 0, out[-3000:]
    assert "KeyboardInterrupt" not in out, out[-3000:]
    assert "SIGINT came after the session had settled its results: ignored" in out, out[-3000:]
    (saved,) = storage.glob("*/0001_late.json")
    names = {b["name"] for b in json.loads(saved.read_text())["benchmarks"]}
    assert names == {"test_throughput[single-mlp-w1]"}, names
    assert not _leftovers(marker, grace=10)


_EARLY_HOOKS = {
    # While the measuring plugin imports torch (the first import of torch in this pytest): noted,
    # acted on once the imports are done (unwinding through torch's import aborted Python).
    "torch-import": """
        import sys

        class _Finder:
            def find_spec(self, name, path=None, target=None):
                if name == "torch":
                    sys.meta_path.remove(self)
                    os.kill(os.getpid(), SIG)
                return None

        sys.meta_path.insert(0, _Finder())
    """,
    # The measuring session is registered once imported, before any pytest_configure.
    "import": """
        def pytest_plugin_registered(plugin, manager):
            if getattr(plugin, "__name__", "") == "dpbench.measure.plugin.session":
                os.kill(os.getpid(), SIG)
    """,
    # In the suites' own pytest_configure (before pytest's terminal is set up, which configures
    # after it): exit 2 with no line at all for a SIGINT, -15 for a SIGTERM (found by the soak).
    "suites-configure": """
        def pytest_plugin_registered(plugin, manager):
            if getattr(plugin, "__name__", "") == "dpbench.measure.plugin.session":
                original = plugin.resolve_profile

                def resolve_profile(*args, **kwargs):
                    os.kill(os.getpid(), SIG)
                    return original(*args, **kwargs)

                plugin.resolve_profile = resolve_profile
    """,
    # After the suites' own pytest_configure, before the session starts (pytest then calls no
    # pytest_sessionfinish: found by python -m tools.soak_faults with a fault in the first 4 s).
    "configure": """
        import pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_sessionstart(session):
            os.kill(os.getpid(), SIG)
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["torch-import", "import", "suites-configure", "configure"])
@pytest.mark.parametrize(
    "sig, code, why",
    [(signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGINT, 2, "interrupted")],
    ids=["sigterm", "sigint"],
)
def test_a_signal_while_the_suites_start_says_so_in_one_line(tmp_path, sig, code, why, moment):
    """The measuring plugin imports torch and dpbench for seconds, then pytest configures the
    session: a SIGTERM or SIGINT in either ends the run with dpbench's one line and the exit status
    of an interrupted run, not a bare -15, pytest's KeyboardInterrupt traceback or exit 2 for a
    SIGTERM (found by python -m tools.soak_faults)."""
    (tmp_path / "early_plugin.py").write_text(f"import os\nSIG = {int(sig)}\n" + textwrap.dedent(_EARLY_HOOKS[moment]))
    storage = tmp_path / "results"
    env = _env(
        uuid.uuid4().hex, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    )
    # One stream, in the order it was written (the environment has PYTHONUNBUFFERED=1), as a terminal shows it.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "early_plugin",
            "suites/",
            "-q",
            "-k",
            "test_throughput and single",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save=early",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        # A test runner started in the background may have SIGINT ignored; the child must not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    out = proc.stdout
    assert proc.returncode == code, out[-3000:]
    assert out.strip().splitlines()[-1] == (
        f"dpbench: {why}: nothing was saved (the run had not started); earlier runs are untouched"
    ), out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert not list(storage.rglob("*.json"))  # no run saved (pytest-benchmark may have made the directory)
