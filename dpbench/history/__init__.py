"""history: a benchmark as a series over commits — saved runs ordered by git
(:mod:`~dpbench.history.git`), each series' change points confirmed by a test between its
segments (:mod:`~dpbench.history.changepoints`), the changes a team accepted
(:mod:`~dpbench.history.accepted`), and ``dpbench history``'s JSON and Markdown
(:mod:`~dpbench.history.formats`). Synthetic series for the checks of the detection rates
are drawn outside the package, by the ``validation`` package's noise model.

May import: ``dpbench.results`` (reading saved runs), ``dpbench.stats``, ``dpbench.schema``.
Never torch, the gate (which reads accepted levels from here for ``compare --history``) or the
report (which renders ``dpbench history``'s page).
"""

from __future__ import annotations

from dpbench._lazy import lazy_attributes

__all__ = ["History", "Series", "build_history", "load_history"]

_LAZY = {
    "History": "dpbench.history.series",
    "Series": "dpbench.history.series",
    "build_history": "dpbench.history.series",
    "load_history": "dpbench.history.series",
}

__getattr__, __dir__ = lazy_attributes("dpbench.history", _LAZY, __all__, globals())
