"""Where a measuring session's files go, and what happens to them when it is interrupted.

Runs are stored by pytest-benchmark (``--benchmark-storage``; a checkout's pyproject.toml sets
``file://./results``, and :func:`use_results_storage` gives a session without a setting the same
place). Sampler timelines (and traces, when on) are written to a staging directory while the
session runs and moved into ``results/<machine-id>/timelines/<run-id>/`` only when
pytest-benchmark saves the run. An interrupted session saves nothing: no run file, no timelines;
earlier runs are left exactly as they were. Staged timelines and a save in progress are registered
with the workers' reaper (:mod:`dpbench.workers.lifeline`), so even a SIGKILL of pytest leaves
neither behind.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_benchmark.logger import PytestBenchmarkWarning

from dpbench.workers.lifeline import reaper

if TYPE_CHECKING:
    from dpbench.traces.store import TraceStore

__all__ = [
    "RUN_GLOB",
    "TimelineStore",
    "guard_save",
    "no_empty_save_warning",
    "settle",
    "storage_dir",
    "suite_fullnames",
    "use_results_storage",
]

TIMELINES = "timelines"
RUN_GLOB = "*/[0-9][0-9][0-9][0-9]_*.json"
# pytest-benchmark's own default storage; a session that kept it saves where dpbench reads.
_BENCHMARK_DEFAULT_STORAGE = "file://./.benchmarks"


class TimelineStore:
    """Stages timeline files during the session; publishes them when the run is saved."""

    def __init__(self) -> None:
        self.staging = Path(tempfile.mkdtemp(prefix="dpbench-timelines-"))
        reaper().register(self.staging)  # removed even if pytest is SIGKILLed
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.run_id = f"{stamp}-{os.getpid()}"
        self.published: Path | None = None

    def path_for(self, name: str) -> tuple[Path, str]:
        safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)
        return self.staging / f"{safe}.csv", f"{TIMELINES}/{self.run_id}/{safe}.csv"

    def publish(self, machine_dir: Path) -> Path | None:
        if self.published is not None or not any(self.staging.iterdir()):
            return self.published
        final = machine_dir / TIMELINES / self.run_id
        partial = machine_dir / TIMELINES / f".{self.run_id}.partial"
        partial.parent.mkdir(parents=True, exist_ok=True)
        reaper().register(partial)
        try:
            shutil.copytree(self.staging, partial)
            os.replace(partial, final)  # atomic: the directory appears complete or not at all
        except shutil.Error as exc:  # copytree gathers the errors: the first one says why (a full disk)
            shutil.rmtree(partial, ignore_errors=True)
            raise OSError(f"copying the timelines to {partial} failed: {exc.args[0][0][2]}") from None
        except BaseException:  # a full disk, Ctrl-C: no half-copied directory stays
            shutil.rmtree(partial, ignore_errors=True)
            raise
        finally:
            reaper().release(partial)
        self.published = final
        return final

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        reaper().release(self.staging)


def use_results_storage(config: Any) -> None:
    """A session that left pytest-benchmark's storage at its default saves in ``./results``
    with the per-round data, as a checkout's pyproject.toml sets it (an installed package has no
    such file): ``dpbench report`` and ``dpbench compare`` read runs there."""
    if getattr(config.option, "benchmark_storage", None) == _BENCHMARK_DEFAULT_STORAGE:
        config.option.benchmark_storage = "file://./results"
        config.option.benchmark_save_data = True


def storage_dir(config: Any) -> Path | None:
    storage = config.getoption("benchmark_storage", None) or ""
    if not storage.startswith("file://"):
        return None
    return Path(storage[len("file://") :]).expanduser().resolve()


def guard_save(config: Any, machine_id: str, *, timelines: TimelineStore, traces: TraceStore | None) -> None:
    """Just before pytest-benchmark writes the run: publish the session's ``timelines`` (and
    ``traces``, None when tracing is off) beside it, and have the reaper remove a half-written run
    file and what was published for it should pytest die during the write (SIGKILL)."""
    storage = storage_dir(config)
    if storage is None:
        return
    before = sorted(map(str, storage.glob(RUN_GLOB)))
    machine_dir = storage / machine_id
    timelines.publish(machine_dir)
    if traces is not None:
        traces.publish(machine_dir)
    published = [timelines.published, getattr(traces, "published", None)]
    reaper().guard_save(
        str(storage),
        root=storage,
        pattern=RUN_GLOB,
        before=before,
        also=[str(p) for p in published if p],
        keep_complete=True,
    )


@contextlib.contextmanager
def no_empty_save_warning(*, interrupted: bool, failed: bool = False, verbose: bool = False) -> Iterator[None]:
    """Around pytest-benchmark's save: a session that was interrupted, or whose cases failed, is not
    warned that it saves nothing (with ``verbose``, ``-v``, a failed one still is).

    pytest-benchmark warns "Not saving anything, no benchmarks have been run!" when a session told
    to save ends with no benchmark, which is what Ctrl-C during the first trials leaves, and every
    case failing; the session's own last line (or ``dpbench run``'s) already says that nothing was
    saved, and why."""
    with warnings.catch_warnings():
        if interrupted or (failed and not verbose):
            warnings.filterwarnings("ignore", message="Not saving anything", category=PytestBenchmarkWarning)
        yield


def settle(
    storage: Path | None,
    before: set[Path],
    *,
    interrupted: bool,
    timelines: TimelineStore,
    traces: TraceStore | None,
) -> list[str]:
    """After pytest-benchmark's save: an interrupted session's files are removed (only those this
    session wrote: what ``timelines`` and ``traces`` published), and so is any run file left
    unparsable. → the names of the run files removed."""
    for published in (timelines.published, getattr(traces, "published", None)):
        if interrupted and published is not None:
            shutil.rmtree(published, ignore_errors=True)  # published by this session only
    removed = []
    if storage is not None and storage.exists():
        for path in set(storage.glob(RUN_GLOB)) - before:
            try:
                if interrupted:
                    raise ValueError("interrupted")
                json.loads(path.read_text())
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
                removed.append(path.name)
        reaper().release(str(storage))  # the save is settled: nothing left for the reaper
    return removed


def suite_fullnames(benchmarks: list[dict[str, Any]], *, files: dict[str, Path], suites: Path | None) -> None:
    """Name every suite benchmark ``suites/<file>::<test>`` however pytest was pointed at the
    suites (``pytest suites/`` in a checkout, ``--pyargs dpbench.suites`` from a wheel, another
    rootdir): runs are matched by that name (``dpbench compare``), so the same suite must save the
    same name wherever it ran. ``files``: each collected node id's file. Other benchmarks keep
    pytest's node id."""
    if suites is None:
        return
    for bench in benchmarks:
        name = str(bench.get("fullname", ""))
        where = files.get(name)
        if where is not None and suites in Path(where).resolve().parents:
            bench["fullname"] = (
                f"suites/{Path(where).resolve().relative_to(suites).as_posix()}::{name.partition('::')[2]}"
            )
