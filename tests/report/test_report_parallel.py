"""The figures drawn by forked workers: the same page as drawn in one process, errors raised as
the serial build raises them, a dead worker's figure drawn here, serial when threads run."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from dpbench.report import load_runs
from dpbench.report import sections as sections_mod
from dpbench.report.data import report_data
from dpbench.report.figures import Part
from dpbench.report.sections import build_sections, figure_section
from validation import synthetic_runs

pytestmark = pytest.mark.skipif(
    "fork" not in __import__("multiprocessing").get_all_start_methods(),
    reason="the report draws in forked workers only where fork exists",
)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("parallel") / "results"
    return load_runs(
        [synthetic_runs.make_run(root, number=i, name=f"r{i}", seed=i, trials=3, rounds=3) for i in (1, 2)]
    )


@pytest.fixture
def no_other_threads(monkeypatch):
    """An earlier test of a full run may have left an idle daemon thread in this process, which
    would make the build serial: these tests are about the workers, so they do not count it."""
    monkeypatch.setattr(sections_mod.threading, "active_count", lambda: 1)


def _flat(built):
    """Every part's images (their bytes) and tables (their cells), in page order."""
    return [
        (s.key, p.key, [i.data for i in p.images], [(t.columns, t.rows) for t in p.tables], p.note)
        for s in built
        for p in s.parts
    ]


@pytest.mark.slow  # two whole builds, ~2.3 s
def test_workers_draw_the_same_page_as_one_process(two_runs, no_other_threads):
    serial = _flat(build_sections(report_data(two_runs), workers=1))
    parallel = _flat(build_sections(report_data(two_runs), workers=2))
    images = sum(len(images) for _, _, images, _, _ in serial)
    assert images >= 6  # throughput, scaling, step times, phases, memory, timelines at least
    assert parallel == serial


def _pid_part(configs, runs):
    return Part(key="pid", title="pid", description="", note=str(os.getpid()))


def _one(builder):
    return [figure_section("x", "x", [builder])]


def test_a_figure_is_drawn_in_a_worker_process(two_runs, monkeypatch, no_other_threads):
    monkeypatch.setattr(sections_mod, "FIGURES", [_pid_part])
    [section] = build_sections(report_data(two_runs), _one(_pid_part), workers=2)
    assert section.parts[0].note != str(os.getpid())
    [section] = build_sections(report_data(two_runs), _one(_pid_part), workers=1)
    assert section.parts[0].note == str(os.getpid())


def test_serial_while_another_thread_runs(two_runs, monkeypatch):
    monkeypatch.setattr(sections_mod, "FIGURES", [_pid_part])
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    try:
        [section] = build_sections(report_data(two_runs), _one(_pid_part), workers=2)
    finally:
        stop.set()
        thread.join()
    assert section.parts[0].note == str(os.getpid())


def _boom(configs, runs):
    raise ValueError("figure boom")


def test_a_workers_error_is_raised_by_the_build(two_runs, monkeypatch, no_other_threads):
    monkeypatch.setattr(sections_mod, "FIGURES", [_boom])
    with pytest.raises(ValueError, match="figure boom"):
        build_sections(report_data(two_runs), _one(_boom), workers=2)


PARENT = os.getpid()


def _dies_in_a_worker(configs, runs):
    if os.getpid() != PARENT:
        os.kill(os.getpid(), signal.SIGKILL)
    return Part(key="here", title="here", description="", note=str(os.getpid()))


def test_a_killed_workers_figure_is_drawn_here(two_runs, monkeypatch, no_other_threads):
    monkeypatch.setattr(sections_mod, "FIGURES", [_dies_in_a_worker])
    [section] = build_sections(report_data(two_runs), _one(_dies_in_a_worker), workers=2)
    assert section.parts[0].note == str(PARENT)


def test_default_workers_follow_this_process_affinity():
    assert sections_mod.default_workers() == max(1, min(4, len(os.sched_getaffinity(0))))
