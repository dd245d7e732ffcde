"""Were other processes busy while a side's trials ran? The broad verdict's guard.

"Everything slower while the controls held" is a regression of everything only if the controls saw
what the machine did. They are a few short matmul chains after each trial; contention from other
processes that comes and goes (a test suite, a build, another job on a shared runner) can slow the
longer multi-process trials and miss the controls. The sampler measured it anyway: the share of the
CPUs other processes used during each trial (:func:`dpbench.decision.contention.foreign_cpu`). Where a
side's median share is beyond :data:`~dpbench.decision.contention.CONTENDED`, a broad verdict becomes
``unsettled``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from dpbench.decision.contention import contention_text, is_busy
from dpbench.stats import median

__all__ = ["contention_note", "kept", "notes"]


def _share(frame: pd.DataFrame) -> float:
    if "foreign_cpu" not in frame:
        return math.nan
    values = [float(v) for v in frame["foreign_cpu"] if isinstance(v, (int, float)) and not math.isnan(v)]
    return median(values)


def contention_note(baseline: pd.DataFrame, candidate: pd.DataFrame, names: tuple[str, str]) -> str:
    """'' when neither side's trials met other processes' load beyond
    :data:`~dpbench.decision.contention.CONTENDED` (or nothing was sampled); else what they met, e.g.
    "other processes used 78% of the CPUs during the candidate's trials (43% during the baseline's)"."""
    shares = {names[0]: _share(baseline), names[1]: _share(candidate)}
    known = {k: v for k, v in shares.items() if not math.isnan(v)}
    if not known or not is_busy(max(known.values())):
        return ""
    worst = max(known, key=lambda k: known[k])
    other = next((k for k in known if k != worst), None)
    tail = f" ({known[other]:.0%} during the {other}'s)" if other is not None else ""
    return contention_text(known[worst], f"the {worst}'s") + tail


# Disturbed trials on either side of a comparison: what the gate judges, and what its verdicts say.
#
# The frame (:mod:`dpbench.results.disturbed`) already holds each benchmark's trials as the
# estimates use them: a re-measured trial in the slot of the disturbed one it replaced, and NaN
# where a disturbed trial with no replacement is left out. The gate pools what remains
# (:func:`kept`), so it judges re-measured data; a benchmark whose side still holds disturbed trials
# that nothing replaced carries a note saying so (:func:`notes`), since its verdict then rests on
# fewer trials than the run planned.
def kept(values: Sequence[float]) -> list[float]:
    """A run's trial times (or controls) without the slots left out (NaN): the gate pools these."""
    return [v for v in values if isinstance(v, (int, float)) and v > 0]


def _unreplaced(frame: pd.DataFrame) -> dict[str, int]:
    """Per benchmark (full name), the disturbed trials no re-measurement replaced, over the side's runs."""
    if "disturbed_unreplaced" not in frame:
        return {}
    counts = frame.groupby("fullname")["disturbed_unreplaced"].sum()
    return {str(name): int(n) for name, n in counts.items() if n > 0}


def notes(baseline: pd.DataFrame, candidate: pd.DataFrame) -> dict[str, str]:
    """Per benchmark (full name): the note its verdict carries when either side holds disturbed
    trials that no re-measurement replaced."""
    out: dict[str, list[str]] = {}
    for side, frame in (("baseline", baseline), ("candidate", candidate)):
        for name, n in _unreplaced(frame).items():
            trials = "trial" if n == 1 else "trials"
            out.setdefault(name, []).append(
                f"the {side} holds {n} disturbed {trials} not measured again (left out where enough remain)"
            )
    return {name: "; ".join(said) for name, said in out.items()}
