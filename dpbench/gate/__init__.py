"""gate: the CI verdicts on saved runs — ``dpbench compare`` (is the candidate slower than the
baseline, judged across fresh-process trials, with the control in view), its text/Markdown/JSON
output, and ``dpbench ab`` (base and head measured alternately in one job: two revisions in
worktrees, or two environments — :mod:`~dpbench.gate.environments` — running one revision, each
side's provenance probed in its own interpreter by :mod:`~dpbench.gate.provenance`; an ordered list
of environments bisected by :mod:`~dpbench.gate.bisect`).
:mod:`~dpbench.gate.simulation` holds the noise model the gate is calibrated against, for the
scripts and tests that simulate it (:mod:`~dpbench.gate.simulation_disturbed`: A/A jobs with
disturbed trials); nothing at run time imports them. :mod:`~dpbench.gate.disturbed`: what the gate
pools of a side's disturbed trials, and the note a verdict carries about them.

May import: ``dpbench.results`` (reading saved runs), ``dpbench.history`` (the accepted levels
``compare --history`` judges against), ``dpbench.stats``, ``dpbench.schema``, and
``dpbench.workers.machine`` for its file only (ab's probe loads it by path in a side's interpreter).
Never torch (``ab`` runs the suites of each revision in subprocesses) and never the report,
which sits above the gate and shows its verdicts. Names load lazily: pandas only when used.
"""

from __future__ import annotations

from dpbench._lazy import lazy_attributes

__all__ = ["Comparison", "Verdict", "compare_frames", "compare_runs", "run_ab"]

_LAZY = {
    "Comparison": "dpbench.gate.compare",
    "Verdict": "dpbench.gate.compare",
    "compare_frames": "dpbench.gate.compare",
    "compare_runs": "dpbench.gate.compare",
    "run_ab": "dpbench.gate.ab",
}

__getattr__, __dir__ = lazy_attributes("dpbench.gate", _LAZY, __all__, globals())
