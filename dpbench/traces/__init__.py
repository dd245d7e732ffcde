"""Profiler traces: what the per-rank Kineto traces of a case say about *why* it is slow.

:mod:`dpbench.traces.analysis` reads the gzipped Chrome/Kineto JSON traces the workers wrote
(``rank<r>.json.gz``) with the standard library only and returns, per rank and step, compute,
communication, their overlap, exposed communication and idle time, and per collective the
arrival skew across ranks with the straggler (:mod:`dpbench.traces.skew`);
:mod:`dpbench.traces.intervals` is the interval arithmetic behind it. HolisticTraceAnalysis's
definitions are the reference, not its code (it reads CUDA kernels only and finds nothing in a
CPU/gloo trace). :mod:`dpbench.traces.store`
stages trace files during a session and publishes them beside the saved run.

Pure: no torch. Used by ``dpbench.measure`` (extra_info) and ``dpbench.report``.
May import: ``dpbench.schema``, ``dpbench.stats``, ``dpbench._atomic`` (nothing from launcher, measure or above).
"""

from __future__ import annotations

from dpbench.traces.analysis import (
    AGREEMENT_TOLERANCE,
    TraceProblem,
    analyse_case,
    analyse_rank,
    read_trace,
)

__all__ = ["AGREEMENT_TOLERANCE", "TraceProblem", "analyse_case", "analyse_rank", "read_trace"]
