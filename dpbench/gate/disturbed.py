"""Disturbed trials on either side of a comparison: what the gate judges, and what its verdicts say.

The frame (:mod:`dpbench.results.disturbed`) already holds each benchmark's trials as the
estimates use them: a re-measured trial in the slot of the disturbed one it replaced, and NaN
where a disturbed trial with no replacement is left out. The gate pools what remains
(:func:`kept`), so it judges re-measured data; a benchmark whose side still holds disturbed trials
that nothing replaced carries a note saying so (:func:`notes`), since its verdict then rests on
fewer trials than the run planned.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

__all__ = ["kept", "notes"]


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
