"""gate: the CI verdicts on saved runs — is the candidate slower than the baseline, judged across
fresh-process trials, with the machine's own move taken out. Read top to bottom:

- :mod:`~dpbench.gate.judge`: the noise model (trial spread within a run, the between-run offset of a
  fresh session, log-normal across cases) and the moderated one-sided test.
- :mod:`~dpbench.gate.machine`: how the machine moved — the reference cases that moved as the
  controls did, each case's shift, and the between-run offsets measured by ``--aa`` runs.
- :mod:`~dpbench.gate.family`: one case's evidence and every case judged together (Holm);
  :mod:`~dpbench.gate.broad`: the job-level verdict when many cases move at once.
- :mod:`~dpbench.gate.sides`: each side's quality — other processes' CPU share, disturbed trials.
- :mod:`~dpbench.gate.verdicts`: the typed result every view reads (verdicts, the threshold rule,
  the job's exit code).
- :mod:`~dpbench.gate.compare`: the orchestration (runs → frames → verdicts).
- Output, reading only the typed result: :mod:`~dpbench.gate.text` (the terminal, ``-k``),
  :mod:`~dpbench.gate.formats` (rows, Markdown, JSON), :mod:`~dpbench.gate.next_step` (what an
  inconclusive case needs).
- Calibration lives outside the package: the ``validation`` package's noise model, fitted to real
  runs, and the simulated jobs drawn from it go through this package's real judging.

``dpbench ab`` (:mod:`dpbench.ab`) sits above the gate and reaches it through ``dpbench compare``.

May import: ``dpbench.results`` (reading saved runs), ``dpbench.history`` (the accepted levels
``compare --history`` judges against), ``dpbench.stats``, ``dpbench.schema``. Never torch and never
the report, which sits above the gate and shows its verdicts. Names load lazily: pandas only when used.
"""

from __future__ import annotations

from dpbench._lazy import lazy_attributes

__all__ = ["GateComparison", "Verdict", "compare_frames", "compare_runs"]

_LAZY = {
    "GateComparison": "dpbench.gate.compare",
    "Verdict": "dpbench.gate.compare",
    "compare_frames": "dpbench.gate.compare",
    "compare_runs": "dpbench.gate.compare",
}

__getattr__, __dir__ = lazy_attributes("dpbench.gate", _LAZY, __all__, globals())
