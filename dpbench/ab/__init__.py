"""ab: ``dpbench ab`` — base and head measured alternately in one job and judged as pairs. The sides
are two revisions in worktrees (:mod:`~dpbench.ab.revisions`), or two environments running one
revision (:mod:`~dpbench.ab.environments`: an interpreter, or a venv made from a requirements file);
each side's provenance is probed in its own interpreter (:mod:`~dpbench.ab.provenance`,
:mod:`~dpbench.ab.side_probe`); an ordered list of environments is bisected by
:mod:`~dpbench.ab.bisect`. :mod:`~dpbench.ab.job` runs one job: prepare the sides, the ABBA
schedule of fresh pytest sessions, then the verdict through the judge the command line hands it
(``dpbench compare --paired`` on the saved pairs); :mod:`~dpbench.ab.settle` measures the cases still
inconclusive in more rounds until settled, judged by the look the command line hands it (the gate's
comparison, in process): ab never computes a statistic of its own.

May import: ``dpbench.results`` (console helpers), ``dpbench.measure.settings`` (the trial-count and
budget rules, and the duration text, shared with ``dpbench run``), ``dpbench.schema``, and ``dpbench.workers.machine``
and ``dpbench.sampler.cpu`` for their files only (the probe loads them by path in a side's
interpreter). Never torch (each side's suites run in subprocesses), never the gate's internals, and
never the command line, which sits above it.
"""

from __future__ import annotations

from dpbench._lazy import lazy_attributes

__all__ = ["run_ab"]

_LAZY = {"run_ab": "dpbench.ab.job"}

__getattr__, __dir__ = lazy_attributes("dpbench.ab", _LAZY, __all__, globals())
