"""Shared test configuration.

* The fast tier's guard: a test not marked ``slow`` whose call takes longer than
  ``--unmarked-limit`` seconds (default 5) fails, naming its time, so the fast tier
  (``scripts/test --fast`` = ``-m "not slow"``) stays fast. Mark tests slower than ~2 s ``slow``.
* Fixtures for the report, results and gate tests: synthetic runs, one real pytest-benchmark
  run, a report.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

UNMARKED_LIMIT_S = 5.0

# Under pytest-xdist (DPBENCH_TEST_WORKERS=N scripts/test, or -n N) each worker has these set; a
# pytest that a test starts would inherit them, and pytest-benchmark disables itself in any process
# that has PYTEST_XDIST_WORKER (it takes it for one of its own xdist workers): nothing would be saved.
XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))  # this run's worker count (1: no xdist)
for _name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
    os.environ.pop(_name, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--unmarked-limit",
        type=float,
        default=float(os.environ.get("DPBENCH_UNMARKED_LIMIT_S", UNMARKED_LIMIT_S)),
        metavar="SECONDS",
        help="fail a test not marked slow whose call phase takes longer than this (0: off; default 5)",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    limit = item.config.getoption("--unmarked-limit")
    if call.when != "call" or not limit or report.outcome != "passed" or item.get_closest_marker("slow") is not None:
        return
    # Wall time stretches with whatever else the machine runs: the limit scales with the load
    # beyond the cores (1× on an otherwise idle machine, as in CI), so a busy laptop does not fail.
    # Under pytest-xdist the other workers' tests share the cores with this one all the time (the
    # load average, a minute's mean, lags behind them): ×workers.
    load = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1), float(XDIST_WORKERS))
    if report.duration > limit * load:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {report.duration:.1f} s but is not marked slow (limit "
            f"{limit:g} s for the fast tier"
            + (f", ×{load:.1f} for the machine's load" if load > 1 else "")
            + "): mark it @pytest.mark.slow or make it faster"
        )


# ---- the serial gate ----
# Under pytest-xdist the workers share the machine's cores all the time. Most tests do not care,
# but a test that measures time side by side (a straggler's skew, a sampler's CPU share) reads the
# other worker's load as its own. Such a test is marked ``serial``: it runs while no other test
# runs, on any worker. A readers-writer lock on two files in the run's shared temp directory: every
# test holds the gate shared, a serial test exclusive; the turnstile stops new tests from starting
# while a serial one waits, so it is not starved. flock, not a library: two lock calls per test.
class _SerialGate:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._turnstile = open(directory / "dpbench-serial.turnstile", "a")  # noqa: SIM115 (held open)
        self._gate = open(directory / "dpbench-serial.gate", "a")  # noqa: SIM115

    @contextlib.contextmanager
    def hold(self, exclusive: bool):
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._gate, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(self._turnstile, fcntl.LOCK_UN)


_SERIAL_GATE = pytest.StashKey[_SerialGate]()


def _serial_gate(config: pytest.Config) -> _SerialGate | None:
    if XDIST_WORKERS <= 1:
        return None
    gate = config.stash.get(_SERIAL_GATE, None)
    if gate is None:
        # Each xdist worker's basetemp is <the run's basetemp>/popen-gwN: the parent is shared.
        shared = config._tmp_path_factory.getbasetemp().parent  # noqa: SLF001 (pytest's own factory)
        gate = config.stash[_SERIAL_GATE] = _SerialGate(shared)
    return gate


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    gate = _serial_gate(item.config)
    if gate is None:
        yield
        return
    with gate.hold(exclusive=item.get_closest_marker("serial") is not None):
        yield


# ---- the order files are handed out in under pytest-xdist ----
# --dist loadfile gives each worker a whole file from the front of the collected order, so the
# run ends when the last long file does. Collected as-is, the longest files (the suites' end-to-end
# tests, the clusters, dpbench ab) come last alphabetically and one worker runs them alone at the
# end. Under xdist the files go heaviest first (longest-processing-time first: the usual greedy
# schedule), weighted by their slow tests; a file's own order is kept. One process: unchanged.
# Before them, the files that hold a serial test, each with its serial tests first: a serial test
# waits for the other worker's running test to end and holds it idle while it runs, which costs
# least at the start, where every worker runs such short files (the serial tests are kept in files
# of their own or of short tests: a serial test after a long one would make the other worker wait).
SLOW_WEIGHT_S, FAST_WEIGHT_S = 5.0, 0.1  # a slow test takes ≥ 2 s, often 10-30; a fast one well under 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if XDIST_WORKERS <= 1:
        return
    weight: dict[str, float] = {}
    has_serial: set[str] = set()
    for item in items:
        path = str(item.path)
        weight[path] = weight.get(path, 0.0) + (SLOW_WEIGHT_S if item.get_closest_marker("slow") else FAST_WEIGHT_S)
        if item.get_closest_marker("serial"):
            has_serial.add(path)
    first_seen = {path: i for i, path in enumerate(dict.fromkeys(str(item.path) for item in items))}
    items.sort(  # stable: a file's tests keep their order beyond the serial ones leading
        key=lambda item: (
            str(item.path) not in has_serial,
            -weight[str(item.path)],
            first_seen[str(item.path)],
            item.get_closest_marker("serial") is None,
        )
    )


# ---- report fixtures ----
# Below the marker that test_fast_tier.py cuts this file at: what it copies needs none of these.
from validation import synthetic_runs  # noqa: E402
from validation.synthetic_runs import XSS  # noqa: E402


@pytest.fixture
def short_tmp() -> Path:
    """A fresh temp directory with a short path, for a child's TMPDIR: multiprocessing puts its
    forkserver's Unix socket under TMPDIR, and a socket path has at most 107 bytes, which
    ``tmp_path`` under pytest-xdist's basetemp (``.../popen-gw0/<test name>0``) can exceed."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="dpt-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """An empty pytest-benchmark storage directory."""
    path = tmp_path / "results"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results file written by pytest-benchmark itself, with dpbench-style extra_info."""
    root = tmp_path_factory.mktemp("real")
    (root / "test_tiny.py").write_text(
        textwrap.dedent("""
        import time
        import pytest

        @pytest.mark.parametrize("k", [1, 2])
        def test_step(benchmark, k):
            benchmark.extra_info.update(schema=1, kind="training", strategy="single", options={},
                                        workload="tiny", world_size=1, steps_per_round=k, global_batch=8)
            benchmark.pedantic(lambda: time.sleep(0.001 * k), rounds=6, warmup_rounds=1)

        def test_plain(benchmark):
            benchmark.pedantic(sum, args=(range(1000),), rounds=5, iterations=3)
    """)
    )
    storage = root / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "test_tiny.py",
            "--benchmark-save=tiny",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save-data",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = list(storage.glob("*/0001_tiny.json"))
    assert len(files) == 1, f"expected one saved run, found {files}"
    return files[0]


@pytest.fixture(scope="session")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A baseline and a candidate where ``test_throughput[ddp-mlp-w2]`` is 40% slower; the
    candidate carries hostile strings in a benchmark name, a param and machine_info."""
    root = tmp_path_factory.mktemp("two") / "results"
    base = synthetic_runs.make_run(root, number=1, name="base", seed=1)
    hostile = synthetic_runs.make_doc(seed=9, cases=[synthetic_runs.TRAINING_CASES[0]], comm=False)["benchmarks"][0]
    hostile.update(name=f"test_x[{XSS}]", fullname=f"suites/test_x.py::test_x[{XSS}]", param=XSS, params={"p": XSS})
    hostile["extra_info"].update(workload=XSS, options={"mode": XSS}, requested_options={"mode": XSS}, suite=XSS)
    cand = synthetic_runs.make_run(
        root,
        number=2,
        name="cand",
        seed=2,
        slowdown={"test_throughput[ddp-mlp-w2]": 1.4},
        machine=synthetic_runs.default_machine(node=XSS, torch="2.14.0"),
        extra_benchmarks=[hostile],
    )
    return base, cand


@pytest.fixture(scope="session")
def report_html(two_runs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report over :func:`two_runs`, rendered once for the html and browser tests."""
    from dpbench.report import write_report

    out = tmp_path_factory.mktemp("report") / "report.html"
    return write_report(list(two_runs), out)


@pytest.fixture(scope="session")
def many_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two runs of over 70 benchmarks each in six suites (timelines in the dp_phases suite)."""
    root = tmp_path_factory.mktemp("many") / "results"
    return tuple(
        synthetic_runs.make_run(
            root,
            number=n,
            name=f"many{n}",
            seed=n,
            cases=synthetic_runs.many_cases(),
            trials=4,
            rounds=3,
            timeline_suites=("dp_phases",),
        )
        for n in (1, 2)
    )


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this process for the test, as in a terminal: a shell's
    background job (and some CI runners) start pytest with SIGINT ignored, and Python keeps an
    ignored SIGINT, so a test that Ctrl-C's itself would wait for its timeout instead."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# ---- Hugging Face models in the test process's workers ----
# A worker that builds an ``hf:`` model imports transformers' modeling code (~1.2 s of CPU here);
# a file that launches dozens of them pays it per worker. Its module-scoped fixture restarts this
# process's forkserver helper with that code preloaded, so the workers inherit it, and restores
# the plain helper afterwards. Only the test process's helper: the suites and `dpbench run` that a
# test starts keep dpbench's own preload (what a run measures is unchanged).
HF_PRELOAD = "transformers.modeling_utils"


@pytest.fixture(scope="module")
def hf_preloaded_helper():
    from dpbench.workers import forkserver
    from dpbench.workloads.hf import _transformers

    _transformers("the test process's helper")  # offline, as dpbench imports it: the helper inherits it
    forkserver.fresh_forkserver()
    forkserver.PRELOAD.append(HF_PRELOAD)
    try:
        yield
    finally:
        forkserver.PRELOAD.remove(HF_PRELOAD)
        forkserver.fresh_forkserver()
