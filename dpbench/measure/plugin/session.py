"""The measuring session's hooks and fixtures (registered by :mod:`dpbench.measure.plugin`).

Measuring happens before any test runs: every selected case (and the reference cases they are
judged against) is measured in ``profile.trials`` fresh-process trials, trial 1 of every case,
then trial 2 of every case, … (:class:`dpbench.measure.trials.TrialSession`). Each test then
publishes its case's trials: pytest-benchmark reads them through ``worker_clock``, so its
statistics and terminal table are worker-measured seconds per step, and ``extra_info`` carries
the trials. Saving and signals: :mod:`.storage`, :mod:`.signals`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch
from pytest_benchmark.utils import get_machine_id

from dpbench._children import stop_exit_code, stop_words
from dpbench.measure import TrialSession, resolve_profile, worker_clock
from dpbench.measure.convergence import resolve_convergence
from dpbench.measure.plugin import failures, signals, storage
from dpbench.measure.plugin.selection import suites_dir
from dpbench.measure.plugin.state import DpbenchSession, measuring_session, session_of, start_session
from dpbench.measure.plugin.text import Progress, idle_line, say, table_note
from dpbench.workers.machine import machine_facts

__all__ = ["profile", "timelines", "trials", "unavailable_to_skip"]


def _cuda_count() -> int:
    # device_count() asks the driver how many devices there are; it creates no CUDA context,
    # so spawned workers still own their devices.
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark reads its storage options
def pytest_configure(config):
    state = start_session(config)
    signals.session_signals(state)
    if config.getoption("numprocesses", None) or os.environ.get("PYTEST_XDIST_WORKER"):
        # Every xdist worker would measure its own share of the cases at the same time as the others,
        # on the same cores (and pytest-benchmark disables itself in a worker: nothing would be saved).
        raise pytest.UsageError(
            "the suites measure each case in fresh-process trials that must not share the "
            "machine with other measurements: run them without pytest-xdist's -n/--numprocesses"
        )
    storage.use_results_storage(config)
    # Resolved once: the test modules parametrize from it at collection time.
    try:
        cuda_count = _cuda_count()
        settings = session_settings(config, cuda_count=cuda_count)
        profile = resolve_profile(cuda_count=cuda_count, settings=settings)
        settling = _design(settings)
        state.convergence = resolve_convergence()  # the convergence suite's DPBENCH_* settings
        _memory_check(config)
    except ValueError as exc:  # a bad DPBENCH_* variable or option: one clear line, not a traceback
        raise pytest.UsageError(str(exc)) from None
    state.settings = settings
    if config.getoption("benchmark_disable", False):
        # --benchmark-disable is a smoke run: every case once, one round, no statistics.
        profile = dataclasses.replace(profile, trials=1, rounds=1, warmup_rounds=0)
        settling = None
    elif settling is not None:  # the profile's trials are the design's maximum
        profile = dataclasses.replace(profile, trials=settling.plan.max_trials)
    state.profile = profile
    state.timelines = storage.TimelineStore()
    state.traces = _trace_store(config, run_id=state.timelines.run_id)
    from dpbench.cluster.remote import active_session
    from dpbench.strategies import StrategyUnavailable
    from dpbench.workers.forkserver import fresh_forkserver, worker_start

    # A fresh forkserver helper before each trial pass: the helper's luck is then trial-to-trial
    # spread, not a level that moves the whole session (fresh_forkserver says why).
    # Under torchrun each node's agent forks its ranks from its own helper, kept for the session:
    # only this process's is restarted, so the runs say one helper per session there.
    clustered = active_session() is not None
    state.progress = Progress(config)
    state.trials = TrialSession(
        profile,
        profile.trials,
        timeline=state.timelines.path_for,
        trace=state.traces and state.traces.dir_for,
        unavailable=(StrategyUnavailable,),
        progress=state.progress,
        between_passes=fresh_forkserver,
        worker_start=worker_start(not clustered),
        until_settled=settling,
    )


_OPTIONS = {
    "trials": "dpbench_trials",
    "until_settled": "dpbench_until_settled",
    "max_trials": "dpbench_max_trials",
    "budget": "dpbench_budget",
    "workloads": "dpbench_workloads",
    "strategies": "dpbench_strategies",
}
"""Each setting the suites' options give, and the option's ``dest``."""


def _option(key: str) -> str:
    return "--" + _OPTIONS[key].replace("_", "-").replace("workloads", "workload")


def session_settings(config, *, cuda_count: int = 0):
    """The session's :class:`~dpbench.measure.settings.SessionSettings`: the one value ``dpbench run``
    hands in (``--dpbench-settings``), else the suites' options over the ``DPBENCH_*`` variables."""
    from dpbench.measure.profiles import world_sizes_for
    from dpbench.measure.settings import SessionSettings, build_settings

    given = {key: config.getoption(dest, None) for key, dest in _OPTIONS.items()}
    handed = config.getoption("dpbench_settings", None)
    if handed is not None:
        beside = [_option(key) for key, value in given.items() if value not in (None, False)]
        if beside:
            raise ValueError(f"{beside[0]}: expected it in dpbench run's options, found it beside --dpbench-settings")
        return SessionSettings.from_json(handed)
    if given["workloads"]:
        given["workloads"] = tuple(given["workloads"])
    return build_settings(
        given,
        named=_option,
        environ=os.environ,
        settled_by_default=False,
        max_world=lambda settings: max(world_sizes_for(settings, cuda_count=cuda_count)),
    )


def _design(settings):
    """The sequential design the settings ask for (None: a fixed number of trials)."""
    from dpbench.measure.settle import Settling

    return Settling.design(settings.max_trials, budget_s=settings.budget_s) if settings.until_settled else None


def _settling(config):
    """The sequential design when ``--dpbench-until-settled`` asks for one (None: a fixed design);
    a ValueError for options that contradict it or do not parse."""
    return _design(session_settings(config))


def _memory_check(config):
    """Will it fit? ``dpbench.launch`` reads these before each case starts (dpbench.launcher.fit)."""
    from dpbench.launcher.fit import ENV_DEVICE_MEMORY, ENV_IGNORE, ENV_MODE
    from dpbench.strategies.memory import parse_bytes

    size = config.getoption("dpbench_device_memory", None)
    if size is not None:
        parse_bytes(size, argument="--dpbench-device-memory")  # a ValueError: one line, before any case
        os.environ[ENV_DEVICE_MEMORY] = size
    elif os.environ.get(ENV_DEVICE_MEMORY):
        parse_bytes(os.environ[ENV_DEVICE_MEMORY], argument=ENV_DEVICE_MEMORY)
    if config.getoption("dpbench_ignore_memory_estimate", False):
        os.environ[ENV_IGNORE] = "1"
    # The suites compare the peak, activations included: a case costs far more than its estimate.
    os.environ.setdefault(ENV_MODE, "peak")


def _trace_store(config, *, run_id):
    """The session's TraceStore when tracing is on (--dpbench-trace or DPBENCH_TRACE=1), else None."""
    from dpbench.measure.tracing import trace_env
    from dpbench.traces.store import TraceStore

    try:
        on = config.getoption("dpbench_trace", False) or trace_env(os.environ)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    return TraceStore(run_id) if on else None


def _case_of(item):
    """The case a suite item measures; None for other items and for items marked to skip."""
    if item.get_closest_marker("skip") is not None:
        return None
    case = getattr(item, "callspec", None) and item.callspec.params.get("case")
    return case if hasattr(case, "measure_trial") else None


_UNUSED_FIXTURE = "ignore:Benchmark fixture was not used at all:pytest_benchmark.logger.PytestBenchmarkWarning"


def pytest_collection_modifyitems(config, items):
    state = session_of(config)
    chosen = state.profile.strategies
    if chosen is not None:
        # A case of no strategy (a collective's) is measured whichever strategies are chosen.
        kept = [
            item
            for item in items
            if (case := _case_of(item)) is None or getattr(case, "strategy", None) in (None, *chosen)
        ]
        if len(kept) < len(items):
            kept_ids = {id(item) for item in kept}
            config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept_ids])
            items[:] = kept
    state.files = {item.nodeid: item.path for item in items}  # the saved names: storage.suite_fullnames
    for item in items:
        if "benchmark" in getattr(item, "fixturenames", ()):
            # pytest-benchmark reads the workers' clock, never the parent's (see dpbench.measure.trials).
            item.add_marker(pytest.mark.benchmark(timer=worker_clock))
            # A case that failed or could not run here published nothing, and its report says why.
            item.add_marker(pytest.mark.filterwarnings(_UNUSED_FIXTURE))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """Measure every selected case in interleaved trials, then let the tests publish them."""
    config = session.config
    if config.option.collectonly or config.getoption("benchmark_skip", False):
        return None
    state = session_of(config)
    trials = state.trials
    for item in session.items:
        case = _case_of(item)
        if case is not None:
            trials.add(case)
            if case.reference is not None:
                trials.add(case.reference)
    if len(trials):
        if state.profile.device == "cuda":
            _idle_baseline(config, state)
        else:
            _say_slow_steps(config, state)
        plan = trials.until_settled and trials.until_settled.plan
        many = f"{plan.min_trials}–{plan.max_trials} trials until settled" if plan else f"{trials.trials} trials"
        say(config, f"measuring {len(trials)} cases × {many}, interleaved", progress=state.progress)
        try:
            with state.progress.warnings_on_own_lines():
                trials.run()
        finally:
            state.progress.end_line()
        if not config.getoption("benchmark_disable", False):  # a smoke run keeps no statistics
            from dpbench.measure.remeasure import remeasure
            from dpbench.workers.forkserver import fresh_forkserver

            with state.progress.warnings_on_own_lines():
                done = remeasure(
                    trials,
                    between_passes=fresh_forkserver,
                    progress=lambda text: say(config, text, progress=state.progress),
                )
            state.remeasured = done
            if done.disturbed and trials.reopened():
                # A disturbed trial left out can leave a settled question short of the pairs its
                # claims need: the design goes on for the cases it reopened (their new trials are
                # not re-examined: the median of the pairs bears one wild trial).
                say(config, "disturbed trials left out reopened a question: more passes", progress=state.progress)
                try:
                    with state.progress.warnings_on_own_lines():
                        trials.run(resume=True)
                finally:
                    state.progress.end_line()
            if done.disturbed:
                say(
                    config,
                    f"{done.disturbed} of {done.trials} trials were disturbed (their controls or step times "
                    f"stood out); {done.measured_again} measured again, {done.replaced} replaced, "
                    f"in {done.seconds:.0f} s",
                    progress=state.progress,
                )
            # A busy machine is said once, in the terminal summary (pytest_terminal_summary): above the
            # tables and the decision whose numbers it qualifies.
    return None  # pytest's own loop runs the tests next


def _say_slow_steps(config, state) -> None:
    """Before the trials on a CPU, for the workloads the session was asked for by name: a line for
    each whose ``single`` step is estimated to take long (what dominates it, how to shrink it).
    Said here rather than by ``dpbench run`` before it starts the session: counting a step's FLOPs
    imports torch's compiler stack, which this process loads anyway for the cases' fit check."""
    settings = state.settings
    if settings is None or not settings.workloads_chosen:
        return
    from dpbench.strategies.step_cost import slow_step_line, step_cost
    from dpbench.workloads import resolve_workload

    rate = None  # measured with the first workload's count, then kept for the others
    for spec in settings.workloads:
        batch = state.profile.global_batch_for(spec)
        cost = step_cost(resolve_workload(spec), batch, rate=rate)
        rate = cost.rate if cost is not None else rate
        if cost is not None and (line := slow_step_line(spec, cost, batch)):
            say(config, line, progress=state.progress)


def _idle_baseline(config, state) -> None:
    """The GPUs' draw with nothing running, once per session before any trial (no worker is alive
    then): every case's energy is shown beside it (dpbench.measure.energy)."""
    from dpbench.measure.cases import GPU_WINDOW_MARGIN
    from dpbench.measure.energy import idle_power
    from dpbench.sampler.energy import min_energy_window_s

    seconds = GPU_WINDOW_MARGIN * min_energy_window_s()
    idle = idle_power(seconds=seconds)
    state.trials.idle_power = idle
    say(config, idle_line(idle), progress=state.progress)


def pytest_keyboard_interrupt(excinfo):
    # Recorded for the saving hooks below; pytest itself goes on to finish the session.
    signals.INTERRUPTED["yes"] = True


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    # From here on pytest runs pytest_sessionfinish whatever happens (the save's hooks below).
    state = session_of(session.config)
    state.session_started = True
    if state.profile is not None and state.profile.device == "cuda":
        state.nvml = _hold_nvml()


def _hold_nvml():
    """NVML, initialised for the whole session (None where it cannot start). With persistence mode
    off the driver tears a GPU's state down when its last client leaves, and every fresh-process
    trial would pay the re-initialisation inside its start: this open handle keeps it up."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no nvidia-ml-py, no driver: the trials start as they would anyway
        return None
    return pynvml


def pytest_benchmark_update_machine_info(config, machine_info):
    state = session_of(config)
    facts = machine_facts()
    facts["dpbench"]["profile"] = state.profile.to_dict()
    facts["threads_per_worker"] = "max(1, cpu_count // processes) on CPU; see each benchmark's extra_info"
    facts["dpbench"]["worker_start"] = state.trials.worker_start  # also per case: harness_settings
    if state.trials.until_settled is not None:  # trials until settled: the design and what stopped it
        facts["dpbench"]["until_settled"] = state.trials.settled_info()
    if state.trials.idle_power is not None:  # on CUDA: the GPUs' idle draw every case's energy is shown beside
        facts["dpbench"]["idle_power"] = state.trials.idle_power
    done = state.remeasured
    if done is not None:  # the re-measurement pass: how much was disturbed, what it cost (dpbench.measure.remeasure)
        facts["dpbench"]["remeasure"] = done.to_dict()
    if state.settings.run_config is not None:  # `dpbench run`'s resolved configuration (config file + options)
        facts["dpbench"]["run_config"] = state.settings.run_config
    from dpbench.workers.runtime_env import user_runtime_env

    # The user's OpenMP/MKL settings, passed to the workers unchanged (dpbench adds none).
    facts["runtime_env"] = user_runtime_env(os.environ)
    machine_info.update(facts)
    from dpbench.cluster.head import cluster_facts

    cluster = cluster_facts()  # under torchrun: nodes, processes per node, each node's hostname/GPUs/NCCL_*
    if cluster is not None:
        machine_info["cluster"] = cluster


def pytest_benchmark_update_json(config, benchmarks, output_json):
    """Called just before pytest-benchmark writes the run: the suites' names made the same wherever
    they ran, the timelines published beside it."""
    state = session_of(config)
    storage.suite_fullnames(output_json.get("benchmarks", []), files=state.files, suites=suites_dir())
    if not (config.getoption("benchmark_save", None) or config.getoption("benchmark_autosave", None)):
        return
    if signals.INTERRUPTED["yes"]:
        return  # the run is about to be discarded (see pytest_sessionfinish): publish nothing
    storage.guard_save(config, get_machine_id(), timelines=state.timelines, traces=state.traces)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A case whose workers failed is reported in one line naming the case, the rank, the exception
    and the user's own frame; the workers' whole traceback goes to a file the line names
    (:mod:`~dpbench.measure.plugin.failures`). ``-v``: pytest's traceback as well."""
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.failed or call.excinfo is None:
        return
    from dpbench.workers.base import WorkerError

    case, error = _case_of(item), call.excinfo.value
    if case is None or not isinstance(error, WorkerError):
        return
    state = session_of(item.config)
    label = getattr(case, "label", None) or case.id
    where = _failures_dir(item.config, state.timelines.run_id)
    path = failures.traceback_path(where, case.id)
    shown = Path(os.path.relpath(path)) if path.is_relative_to(Path.cwd()) else path
    line = failures.failure_line(label, error, traceback_file=shown, roots=failures.library_roots())
    # The file starts with the line: `dpbench run` says the first failure's line last, when nothing was saved.
    failures.write_traceback(where, case.id, label, error, line=line)
    if item.config.get_verbosity() > 0:
        report.sections.append(("dpbench", line))
    else:
        report.longrepr = line


def _failures_dir(config, run_id: str) -> Path:
    """Where a session's failure tracebacks go: beside its runs (results/<machine>/failures/<run-id>),
    or under the temporary directory when the runs are not stored in files."""
    where = storage.storage_dir(config)
    if where is None:
        import tempfile

        return Path(tempfile.gettempdir()) / "dpbench-failures" / run_id
    return where / get_machine_id() / "failures" / run_id


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session, exitstatus):
    """An interrupted session saves nothing; a save interrupted mid-write leaves nothing behind.

    pytest-benchmark writes the run in its own sessionfinish; this wrapper removes the file it
    wrote when the session was interrupted (Ctrl-C at any point, the save included) and any run
    file left unparsable. Files that existed before the session are never touched.
    """
    state = session_of(session.config)
    where = storage.storage_dir(session.config)
    before = set(where.glob(storage.RUN_GLOB)) if where and where.exists() else set()
    interrupted = signals.INTERRUPTED["yes"] or exitstatus == pytest.ExitCode.INTERRUPTED
    failed = bool(session.testsfailed)
    verbose = session.config.get_verbosity() > 0
    with storage.no_empty_save_warning(interrupted=interrupted, failed=failed, verbose=verbose):
        outcome = yield
    # From here on the save is over: a SIGINT / SIGTERM landing now (settling the files below, the
    # rest of the shutdown) is noted and said, never raised — raised, it escaped pytest's session
    # as a traceback and a -2 exit beside a complete, saved run.
    signals.late_signals(state)
    interrupted_in_save = outcome.excinfo is not None and isinstance(outcome.excinfo[1], KeyboardInterrupt)
    failed_save = outcome.excinfo is not None and not interrupted_in_save
    interrupted = interrupted or signals.INTERRUPTED["yes"] or outcome.excinfo is not None
    removed = storage.settle(where, before, interrupted=interrupted, timelines=state.timelines, traces=state.traces)
    if not interrupted:
        return
    stopped_by = signals.stopped_by()  # None: Ctrl-C
    why = stop_words(stopped_by)
    if failed_save:  # a full disk, a permission error: one line instead of pytest's INTERNALERROR
        error = outcome.excinfo[1]
        why = f"saving failed ({type(error).__name__}: {error})"
        outcome.force_result(None)
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    elif stopped_by is not None:
        session.exitstatus = stop_exit_code(stopped_by)
    if interrupted_in_save:  # Ctrl-C during the save (or pytest's summary): one line, pytest's exit 2, no traceback
        outcome.force_result(None)
        if stopped_by is None:
            session.exitstatus = pytest.ExitCode.INTERRUPTED
    # The run's last line (printed after pytest's own summary, in pytest_unconfigure).
    state.last_line = (
        f"{why}: nothing was saved"
        + (f" (removed {', '.join(removed)})" if removed else "")
        + "; earlier runs are untouched"
    )


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = measuring_session(config) or DpbenchSession()
    done = state.remeasured
    if done is not None and done.busy:  # first: what every number below is worth
        terminalreporter.write_line(f"dpbench: {done.busy}")
    # The note reads pytest-benchmark's table, which lists the tests that ran: none ran when the
    # session was interrupted while it measured.
    ran = terminalreporter.stats.get("passed")
    shown = not config.getoption("benchmark_quiet", False)  # --benchmark-quiet: no table to read
    if shown and state.profile is not None and state.trials is not None and len(state.trials) and ran:
        plan = state.trials.until_settled and state.trials.until_settled.plan
        many = f"{plan.min_trials}–{plan.max_trials} trials until settled" if plan else None
        terminalreporter.write_line(table_note(state.profile, trials=many))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # An empty state where the session's pytest_configure never ran (another plugin's failed first).
    state = measuring_session(config) or DpbenchSession()
    nvml = state.nvml
    if nvml is not None:
        state.nvml = None
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: S110 - the session is over; a failed shutdown changes nothing
            pass
    last = state.last_line
    # Interrupted while pytest was still configuring: it runs no pytest_sessionfinish then.
    interrupted = signals.INTERRUPTED
    early = last is None and interrupted["yes"] and not state.session_started
    if early:
        last = signals.not_started_line(signals.stopped_by())
    if last is not None:
        say(config, last, progress=state.progress)
    late = state.late_signal
    if late is not None:
        say(
            config,
            f"{late} came after the session had settled its results: ignored, nothing changed on disk",
            progress=state.progress,
        )
    signals.restore(state)
    for store in (state.timelines, state.traces):
        if store is not None:
            store.discard()
    if early and signals.stopped_by() is not None:
        raise SystemExit(
            stop_exit_code(signals.stopped_by())
        )  # pytest would say 2 (interrupted); last of the unconfigure hooks


# ---------------------------------------------------------------- fixtures the suites use
@pytest.fixture(scope="session")
def profile(request):
    """The session's :class:`dpbench.measure.profiles.ProfileConfig`, from its settings."""
    return session_of(request.config).profile


@pytest.fixture(scope="session")
def timelines(request):
    """The session's :class:`~dpbench.measure.plugin.storage.TimelineStore`."""
    return session_of(request.config).timelines


@pytest.fixture(scope="session")
def trials(request):
    """The session's :class:`dpbench.measure.trials.TrialSession`, every selected case measured."""
    return session_of(request.config).trials


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
