"""Does each configuration train the same model as ``single``? Its fingerprint against single's.

Every case records ``extra_info["fingerprint"]`` (:func:`dpbench.measure.cases.fingerprint_record`):
the global-batch loss of each of its first steps and float64 sums of its full parameters after the
probe's steps, computed the same way under every strategy (a convergence case takes them after
its first epoch's probe steps too, and adds its final test accuracy and the recipe's parity tolerance:
:func:`dpbench.measure.convergence.convergence_fingerprint`). Every case of a run starts from the
same initial weights and global batches, so a configuration at the same *recipe* as a ``single``
of the same run — workload, global batch, optimizer, learning rate and seed — must reproduce
single's fingerprint within float rounding. How much rounding follows the precision the steps
computed in (the coarser of the two fingerprints' ``precision``), relative to single's values:

======  ==========  ==================================================================================
fp32    ``1e-4``    reduction order alone moves fp32 fingerprints by about 1e-7 over the first steps
fp16    ``2e-3``    two fp16 epsilons (2**-10 ≈ 9.8e-4): a loss computed in fp16 is itself rounded
bf16    ``1.6e-2``  two bf16 epsilons (2**-7 ≈ 7.8e-3): fsdp's bf16 parameters move losses by ~5e-3
======  ==========  ==================================================================================

A difference below the tolerance is rounding as far as the fingerprint can tell: at bf16, a
change that moves the losses by less than 1.6e-2 is not caught.

A difference is read as: for step i's loss, ``|loss - single's| / |single's|``; for the parameter
sums, ``|Σp - single's Σp| / single's Σ|p|`` and ``|Σp² - single's Σp²| / single's Σp²`` (only where
both were taken after the same step); and the configuration's own ``rank_spread`` (its ranks'
sums against rank 0's: replicas that disagree compute something else however close rank 0 is).
A convergence case's final test accuracy is compared with single's within the recipe's parity
tolerance (absolute): after thousands of steps float-sized differences have grown past any of the
tolerances above in the parameters, and what a clean configuration keeps is its accuracy.

In fp16 a loss scaler skips the update of a step whose gradients overflowed, and a rank's
per-sample gradients are larger than single's (its slice's mean is taken over fewer samples), so an
overflow can come in one configuration and not the other: a configuration whose scaler skipped
other steps than single's (``skipped_steps``) trained other steps, and departs for that reason.

A stateful workload (BatchNorm normalising each replica's slice, dropout drawing a mask per replica)
is exempt: its fingerprint says why, and so does the verdict. Pure: pandas rows in, typed verdicts
out; the report's decision view and ``dpbench run`` render them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pandas as pd

from dpbench.schema import DEFAULT_OPTIMIZER, DEFAULT_PRECISION, PRECISIONS_FINEST_FIRST, coarsest_precision

__all__ = [
    "TOLERANCES",
    "FingerprintStatus",
    "FingerprintVerdict",
    "Tolerance",
    "compare_fingerprints",
    "departures",
    "fingerprint_verdicts",
]

SINGLE = "single"
DEPARTS_PREFIX = "computes something else: "
# Relative tolerance by the precision the steps computed in (see the table above).
TOLERANCES = {"fp32": 1e-4, "fp16": 2e-3, "bf16": 1.6e-2}
_TINY = 1e-300  # a relative difference's floor for a scale of zero


class FingerprintStatus(str, Enum):
    """What a configuration's fingerprint says about what it computes (a saved identifier)."""

    REFERENCE = "reference"  # single itself: what the others at its recipe are compared with
    MATCHES = "matches"  # single's fingerprint within the tolerance of its precision
    DEPARTS = "departs"  # beyond it: the configuration computes something else
    EXEMPT = "exempt"  # a stateful workload: not expected to match (the reason says why)
    NO_SINGLE = "no-single"  # no single of the same run at the same recipe to compare with
    NOT_RECORDED = "not-recorded"  # no fingerprint: a run saved before them, a collective


@dataclass(kw_only=True, frozen=True)
class Tolerance:
    """The largest relative difference from single's fingerprint that float rounding explains."""

    precision: str
    """The coarser of the two fingerprints' precisions ("fp32", "fp16", "bf16")."""
    relative: float
    """:data:`TOLERANCES` of that precision."""


@dataclass(kw_only=True, frozen=True)
class FingerprintVerdict:
    """One configuration's fingerprint against single's at the same recipe."""

    status: FingerprintStatus
    """Matches, departs, exempt, no single, not recorded, or the reference itself."""
    reason: str
    """The whole claim in one line (what the decision view and ``dpbench run`` print)."""
    reference: str | None = None
    """The single it was compared with, by its configuration name; None where there was none."""
    tolerance: Tolerance | None = None
    """The tolerance applied; None where nothing was compared."""
    departure: float | None = None
    """The difference nearest its bound, or furthest past it (losses, parameter sums and the ranks'
    spread relative to single's; a convergence case's final accuracy in accuracy)."""
    where: str | None = None
    """Which quantity differed most: ``"loss at step 3"``, ``"parameter sum"``, ``"ranks' parameters"``."""
    compared_steps: int | None = None
    """How many steps' losses were compared (the shorter of the two records)."""

    @property
    def flagged(self) -> bool:
        """True where the configuration computes something else than single: never rank it silently."""
        return self.status is FingerprintStatus.DEPARTS


def _relative(value: Any, reference: Any, scale: Any) -> float:
    try:
        diff = abs(float(value) - float(reference))
        return diff / max(abs(float(scale)), _TINY)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True)
class _Difference:
    value: float  # how far from single's, in the bound's units
    bound: float  # the largest difference rounding explains
    where: str
    bound_text: str  # the bound in words: "the fp32 tolerance 0.0001"

    @property
    def share(self) -> float:
        """``value / bound``; NaN (a value missing or unreadable) counts as departing: nothing proves the match."""
        return math.inf if math.isnan(self.value) else self.value / self.bound


_FINAL_ACCURACY = "final test accuracy"


def _accuracy_difference(fingerprint: Mapping[str, Any], single: Mapping[str, Any]) -> _Difference | None:
    """A convergence case's final test accuracy against single's, within the recipe's parity
    tolerance single recorded (absolute, in accuracy); None where either has no such record."""
    tolerance = single.get("accuracy_tolerance")
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not tolerance > 0:
        return None
    if "final_test_accuracy" not in single or "final_test_accuracy" not in fingerprint:
        return None
    gap = _relative(fingerprint.get("final_test_accuracy"), single.get("final_test_accuracy"), 1.0)
    return _Difference(gap, float(tolerance), _FINAL_ACCURACY, f"the recipe's parity tolerance {tolerance:.4f}")


def _differences(fingerprint: Mapping[str, Any], single: Mapping[str, Any], tolerance: Tolerance) -> list[_Difference]:
    """Every difference of ``fingerprint`` from ``single``'s with its bound: the relative ones within
    the precision's ``tolerance``, a convergence case's final accuracy within the recipe's."""
    out = []
    losses, ref_losses = list(fingerprint.get("losses") or []), list(single.get("losses") or [])
    for i, (loss, ref) in enumerate(zip(losses, ref_losses)):
        out.append((_relative(loss, ref, ref), f"loss at step {i + 1}"))
    if fingerprint.get("step") is not None and fingerprint.get("step") == single.get("step"):
        step = fingerprint["step"]
        out.append(
            (
                _relative(fingerprint.get("param_sum"), single.get("param_sum"), single.get("param_abs_sum")),
                f"parameter sum after step {step}",
            )
        )
        out.append(
            (
                _relative(fingerprint.get("param_sq_sum"), single.get("param_sq_sum"), single.get("param_sq_sum")),
                f"parameter sum of squares after step {step}",
            )
        )
    spread = fingerprint.get("rank_spread")
    if isinstance(spread, (int, float)) and not isinstance(spread, bool):
        out.append((float(spread), "ranks' parameters (against rank 0's)"))
    words = f"the {tolerance.precision} tolerance {tolerance.relative:g}"
    found = [_Difference(value, tolerance.relative, where, words) for value, where in out]
    accuracy = _accuracy_difference(fingerprint, single)
    return found if accuracy is None else [*found, accuracy]


def _skipped_steps(
    fingerprint: Mapping[str, Any], single: Mapping[str, Any], steps: int
) -> tuple[list[int], list[int]] | None:
    """``(the configuration's, single's)`` skipped steps where they differ among the steps both
    fingerprints cover (the losses compared, the step the sums follow); None where they agree or
    either record has none (a run saved before they were recorded)."""
    mine, theirs = fingerprint.get("skipped_steps"), single.get("skipped_steps")
    if not isinstance(mine, list) or not isinstance(theirs, list):
        return None
    step = fingerprint.get("step")
    covered = max(steps, step if isinstance(step, int) and step == single.get("step") else 0)
    mine, theirs = sorted(i for i in mine if i <= covered), sorted(i for i in theirs if i <= covered)
    return None if mine == theirs else (mine, theirs)


def _step_list(steps: list[int]) -> str:
    """``"no step"``, ``"step 1"``, ``"steps 1, 3"``."""
    if not steps:
        return "no step"
    return f"step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))}"


def compare_fingerprints(
    fingerprint: Mapping[str, Any] | None, single: Mapping[str, Any] | None, *, reference: str = SINGLE
) -> FingerprintVerdict:
    """``fingerprint`` (a configuration's ``extra_info["fingerprint"]``) against ``single``'s at the same
    recipe; ``reference`` names that single in the verdict's sentence."""
    if not isinstance(fingerprint, Mapping):
        return FingerprintVerdict(status=FingerprintStatus.NOT_RECORDED, reason="no fingerprint recorded")
    exempt = fingerprint.get("exempt") or (single.get("exempt") if isinstance(single, Mapping) else None)
    if exempt:
        named = reference if isinstance(single, Mapping) else None
        return FingerprintVerdict(status=FingerprintStatus.EXEMPT, reason=f"exempt: {exempt}", reference=named)
    if not isinstance(single, Mapping):
        return FingerprintVerdict(
            status=FingerprintStatus.NO_SINGLE, reason=f"{reference} recorded no fingerprint to compare with"
        )
    precision = coarsest_precision(
        str(fingerprint.get("precision") or DEFAULT_PRECISION), str(single.get("precision") or DEFAULT_PRECISION)
    )
    tolerance = Tolerance(precision=precision, relative=TOLERANCES.get(precision, TOLERANCES["fp32"]))
    steps = min(len(fingerprint.get("losses") or []), len(single.get("losses") or []))
    common = {"reference": reference, "tolerance": tolerance, "compared_steps": steps}
    if fingerprint.get("param_count") != single.get("param_count"):
        return FingerprintVerdict(
            status=FingerprintStatus.DEPARTS,
            reason=f"{DEPARTS_PREFIX}a model of {fingerprint.get('param_count')} parameters, "
            f"{reference} trains {single.get('param_count')}",
            where="parameter count",
            **common,
        )
    skipped = _skipped_steps(fingerprint, single, steps)
    if skipped is not None:
        return FingerprintVerdict(
            status=FingerprintStatus.DEPARTS,
            reason=f"{DEPARTS_PREFIX}its loss scaler skipped the update of {_step_list(skipped[0])}, {reference}'s "
            f"{_step_list(skipped[1])}: they trained different steps (nothing else compared)",
            where="skipped steps",
            **common,
        )
    found = _differences(fingerprint, single, tolerance)
    judged = max(found, key=lambda d: d.share, default=None)  # the nearest to its bound, or furthest past it
    if judged is not None and judged.share <= 1:
        relative = [d for d in found if d.where != _FINAL_ACCURACY]
        worst = max(relative, key=lambda d: d.value, default=None)
        largest = "" if worst is None else f"largest relative difference {worst.value:.1e}, {worst.where}; "
        compared = [f"{steps} steps' losses"] + (["the parameter sums"] if any("sum" in d.where for d in found) else [])
        compared += [
            f"the {d.where} ({d.value:.4f} apart, within {d.bound_text})" for d in found if d.where == _FINAL_ACCURACY
        ]
        return FingerprintVerdict(
            status=FingerprintStatus.MATCHES,
            reason=f"matches {reference} within the {precision} tolerance {tolerance.relative:g} "
            f"({largest}compared: {', '.join(compared)})",
            departure=judged.value,
            where=judged.where,
            **common,
        )
    if judged is None:
        return FingerprintVerdict(
            status=FingerprintStatus.DEPARTS,
            reason=f"{DEPARTS_PREFIX}departs from {reference} by nothing to compare (no values), "
            f"beyond the {precision} tolerance {tolerance.relative:g}",
            **common,
        )
    unreadable = math.isnan(judged.value)
    return FingerprintVerdict(
        status=FingerprintStatus.DEPARTS,
        reason=f"{DEPARTS_PREFIX}departs from {reference} by {'unreadable' if unreadable else f'{judged.value:.1e}'} "
        f"({judged.where}), beyond {judged.bound_text}",
        departure=None if unreadable else judged.value,
        where=judged.where,
        **common,
    )


# ---------------------------------------------------------------- over a run's configurations
def _cell(row: pd.Series, column: str) -> Any:
    value = row.get(column) if column in row.index else None
    return None if isinstance(value, float) and math.isnan(value) else value


def _recipe(row: pd.Series) -> tuple[Any, ...]:
    """What must be equal for a configuration to train single's model: run, workload, global batch,
    optimizer, learning rate, seed."""
    batch = _cell(row, "batch")
    batch = _cell(row, "global_batch") if batch is None else batch
    options = _cell(row, "options")
    optimizer = options.get("optimizer") if isinstance(options, Mapping) else _cell(row, "options.optimizer")
    return (
        str(_cell(row, "run")),
        str(_cell(row, "workload")),
        None if batch is None else float(batch),
        optimizer or DEFAULT_OPTIMIZER,
        _cell(row, "lr"),
        _cell(row, "seed"),
    )


def _name(row: pd.Series) -> str:
    for column in ("case", "config", "label", "strategy"):
        value = _cell(row, column)
        if isinstance(value, str) and value:
            return value
    return SINGLE


def _precision(row: pd.Series) -> str:
    fingerprint = _cell(row, "fingerprint")
    return (
        str(fingerprint.get("precision") or DEFAULT_PRECISION)
        if isinstance(fingerprint, Mapping)
        else DEFAULT_PRECISION
    )


def _recipe_text(key: tuple[Any, ...]) -> str:
    _, workload, batch, optimizer, lr, seed = key
    batch_text = "?" if batch is None else f"{batch:g}"
    return f"{workload}, batch {batch_text}, {optimizer}, lr {lr}, seed {seed}"


def fingerprint_verdicts(configs: pd.DataFrame) -> pd.Series:
    """Per row of ``configs`` (the configurations of one or more runs, e.g.
    ``dpbench.report.configs.configurations(frame)`` or the raw frame of ``dpbench.results.load_runs``:
    columns ``run``, ``strategy``, ``workload``, ``batch`` or ``global_batch``, ``options``, ``lr``,
    ``seed``, ``fingerprint`` and a name in ``config`` or ``label``), its :class:`FingerprintVerdict`
    against the ``single`` of the same run at the same recipe — the one with the same precision where
    there is one, else the finest. A Series aligned with ``configs.index``."""
    singles: dict[tuple[Any, ...], list[pd.Series]] = {}
    for _, row in configs.iterrows():
        if _cell(row, "strategy") == SINGLE:
            singles.setdefault(_recipe(row), []).append(row)
    verdicts = []
    for _, row in configs.iterrows():
        fingerprint = _cell(row, "fingerprint")
        if _cell(row, "strategy") == SINGLE:
            verdicts.append(
                FingerprintVerdict(
                    status=FingerprintStatus.REFERENCE,
                    reason="the reference: every configuration at its recipe is compared with it",
                )
                if isinstance(fingerprint, Mapping)
                else compare_fingerprints(None, None)
            )
            continue
        if not isinstance(fingerprint, Mapping):
            verdicts.append(compare_fingerprints(None, None))
            continue
        key = _recipe(row)
        candidates = singles.get(key, [])
        if not candidates:
            verdicts.append(
                FingerprintVerdict(
                    status=FingerprintStatus.NO_SINGLE,
                    reason=f"no single at this recipe ({_recipe_text(key)}) in its run to compare with",
                )
            )
            continue
        same = [c for c in candidates if _precision(c) == _precision(row)]
        finest = sorted(candidates, key=lambda c: PRECISIONS_FINEST_FIRST.index(coarsest_precision(_precision(c))))
        single = (same or finest)[0]
        verdicts.append(compare_fingerprints(fingerprint, _cell(single, "fingerprint"), reference=_name(single)))
    return pd.Series(verdicts, index=configs.index, dtype=object)


def departures(configs: pd.DataFrame) -> dict[tuple[str, str], str]:
    """``(run, configuration name) → why`` for every configuration of ``configs`` whose fingerprint
    departs from single's (:func:`fingerprint_verdicts`; the name as ``case``, ``config`` or ``label``
    holds it): ``"departs from single w1 by 2.8e-03 (loss at step 4), beyond the fp32 tolerance
    0.0001"`` — what :func:`dpbench.decision.decide` takes as ``departures``."""
    out = {}
    for (_, row), verdict in zip(configs.iterrows(), fingerprint_verdicts(configs)):
        if verdict.flagged:
            out[(str(_cell(row, "run")), _name(row))] = verdict.reason.removeprefix(DEPARTS_PREFIX)
    return out
