"""Time to accuracy: a convergence case trains a recipe for E epochs and evaluates after each one.

One trial = fresh workers (:func:`dpbench.launch`), then per epoch: ``run.step(S)`` (S full
global batches, each step timed in the workers after device synchronisation, slowest rank),
then ``run.evaluate(test)`` (rank 0, a fresh model loaded with the gathered parameters; never
inside a step time). No untimed warm-up: time to accuracy counts from the first step, as
MLPerf's does (start-up, model build and evaluation are excluded). ``epoch_time_s`` of an epoch
is the sum of its step times; a trial's ``sec_per_epoch`` is d2l's ``timer.avg()``, the mean
over its epochs. Cases run as trials of the session like every other case
(:class:`dpbench.measure.trials.TrialSession`), so several trials interleave with the others.

Settings (``DPBENCH_*``; a bad value is a ValueError naming the variable, before any process):
``DPBENCH_CONVERGENCE`` (recipes, comma-separated, or ``all``; unset: the suite is off),
``DPBENCH_EPOCHS`` (≥ 1, overrides every recipe's), ``DPBENCH_TARGET_ACCURACY`` (in (0, 1],
overrides the recipes' targets), ``DPBENCH_FASHION_MNIST`` (the IDX directory).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from dpbench.measure.cases import PROBE_STEPS, TrainingDetail, fingerprint_record
from dpbench.measure.trials import CaseResult, TrialResult
from dpbench.schema import BASELINE_STRATEGY
from dpbench.stats import log_t_interval

__all__ = [
    "ConvergenceSettings",
    "ConvergenceCase",
    "ConvergenceDetail",
    "resolve_convergence",
    "convergence_cases",
    "convergence_fingerprint",
    "convergence_info",
    "check_epochs",
    "check_target_accuracy",
]

ENV_RECIPES = "DPBENCH_CONVERGENCE"
ENV_EPOCHS = "DPBENCH_EPOCHS"
ENV_TARGET = "DPBENCH_TARGET_ACCURACY"
ENV_FASHION = "DPBENCH_FASHION_MNIST"


def check_epochs(what: str, raw: Any) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1 or str(value) != str(raw).strip():
        raise ValueError(f"{what} must be an integer >= 1 (training epochs), got {raw!r}")
    return value


def check_target_accuracy(what: str, raw: Any) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:  # also refuses NaN
        raise ValueError(f"{what} must be a test accuracy in (0, 1] (e.g. 0.84), got {raw!r}")
    return value


@dataclass(kw_only=True, frozen=True)
class ConvergenceSettings:
    """What the convergence suite runs: the recipes, optional epoch and target overrides, the data."""

    recipes: tuple[str, ...] = ()
    epochs: int | None = None
    target_accuracy: float | None = None
    fashion_mnist: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "recipes": list(self.recipes)}


@dataclass(kw_only=True, frozen=True)
class ConvergenceDetail(TrainingDetail):
    """What one convergence trial records beside its times: a launched case's, plus its epochs."""

    epochs: list[dict[str, Any]]
    """Per epoch: ``time_s`` (its step times summed), ``wall_s``, ``train_loss``, ``test_accuracy``,
    ``test_loss``, ``eval_s``, ``eval_device``."""
    train_samples: int
    """Samples in the recipe's training split."""
    test_samples: int
    """Samples in the recipe's test split."""


def resolve_convergence(environ: dict[str, str] | None = None) -> ConvergenceSettings:
    from dpbench.workloads.recipes import RECIPES

    env = os.environ if environ is None else environ
    raw = env.get(ENV_RECIPES, "").strip()
    names = tuple(RECIPES) if raw == "all" else tuple(n.strip() for n in raw.split(",") if n.strip())
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        raise ValueError(
            f"{ENV_RECIPES} names unknown recipe(s) {', '.join(map(repr, unknown))}. "
            f"Known names: {', '.join(RECIPES)} (or all)"
        )
    epochs = check_epochs(ENV_EPOCHS, env[ENV_EPOCHS]) if env.get(ENV_EPOCHS, "").strip() else None
    target = check_target_accuracy(ENV_TARGET, env[ENV_TARGET]) if env.get(ENV_TARGET, "").strip() else None
    return ConvergenceSettings(
        recipes=names, epochs=epochs, target_accuracy=target, fashion_mnist=env.get(ENV_FASHION) or None
    )


@dataclass(kw_only=True, frozen=True)
class ConvergenceCase:
    """One recipe under one strategy at one world size, trained ``epochs`` epochs per trial."""

    recipe: str
    strategy: str
    world_size: int
    global_batch: int
    lr: float
    epochs: int
    target_accuracy: float | None = None
    fashion_mnist: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    reference: ConvergenceCase | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_epochs("epochs", self.epochs)
        if self.target_accuracy is not None:
            check_target_accuracy("target_accuracy", self.target_accuracy)

    @property
    def workload(self) -> str:
        return self.recipe

    @property
    def id(self) -> str:
        return f"{self.strategy}-{self.recipe}-w{self.world_size}"

    @property
    def label(self) -> str:
        return f"{self.id} (batch {self.global_batch}, lr {self.lr:g}, {self.epochs} epochs)"

    @property
    def key(self) -> str:
        return json.dumps(
            [
                "convergence",
                self.recipe,
                self.strategy,
                self.world_size,
                self.global_batch,
                self.lr,
                self.epochs,
                self.seed,
                self.fashion_mnist,
                {str(k): repr(v) for k, v in sorted(self.options.items())},
            ]
        )

    def measure_trial(
        self, profile: Any, *, trial: int, steps_per_round: int | None, timeline: Any, first: bool
    ) -> TrialResult:
        from dpbench.launcher import launch
        from dpbench.launcher.step_stats import merge_step_stats
        from dpbench.measure.cases import _finish_sampler, _sampled
        from dpbench.workloads.recipes import get_recipe
        from dpbench.workloads.splits import steps_per_epoch

        workload, test = get_recipe(self.recipe).build(fashion_mnist_root=self.fashion_mnist)
        per_epoch = steps_per_epoch(workload.params["train_samples"], self.global_batch)
        epochs, stats = [], []
        # Evaluating a large test split on a CPU rank may take minutes: the evaluation heartbeats.
        with launch(
            self.strategy,
            workload,
            world_size=self.world_size,
            global_batch=self.global_batch,
            device=profile.device,
            seed=self.seed,
            lr=self.lr,
            timeout=300.0,
            **self.options,
        ) as run:
            devices = [d for d in run.info.devices if str(d).startswith("cuda")]
            sums = None
            with _sampled(run.pids, devices, profile) as sampler:
                for number in range(self.epochs):
                    # The first trial's fingerprint sums follow the probe's steps, as a throughput
                    # case's do: after thousands of SGD steps, float-sized differences between
                    # clean configurations have grown past any tolerance, after 2 they have not.
                    probe = min(PROBE_STEPS, per_epoch) if first and number == 0 else 0
                    epoch, wall, taken = _epoch(run, per_epoch, probe)
                    sums = taken or sums
                    evaluation = run.evaluate(test)
                    stats.append(epoch)
                    epochs.append(
                        {
                            "time_s": epoch.total_time,
                            "wall_s": wall,
                            "train_loss": statistics.fmean(epoch.losses),
                            "test_accuracy": evaluation["accuracy"],
                            "test_loss": evaluation["loss"],
                            "eval_s": evaluation["eval_s"],
                            "eval_device": evaluation["device"],
                        }
                    )
            control = run.control()
            info = run.info
        summary, recorded = _finish_sampler(sampler, timeline, f"{self.id}-t{trial + 1}")
        merged = merge_step_stats(stats)
        return TrialResult(
            trial=trial,
            order=-1,
            started_at=math.nan,
            steps_per_round=per_epoch,
            round_times=[e["time_s"] / per_epoch for e in epochs],
            unit_times=list(merged.step_times),
            control_s=control,
            sampler=summary,
            timeline=recorded,
            case_metrics=None
            if sums is None
            else {
                "fingerprint": convergence_fingerprint(
                    sums,
                    stats,
                    final_test_accuracy=epochs[-1]["test_accuracy"],
                    accuracy_tolerance=get_recipe(self.recipe).parity_tolerance,
                )
            },
            detail=ConvergenceDetail(
                run_info=info,
                step_stats=merged,
                epochs=epochs,
                train_samples=workload.params["train_samples"],
                test_samples=workload.params["test_samples"],
            ),
        )


def _epoch(run: Any, steps: int, probe: int) -> tuple[Any, float, dict[str, Any] | None]:
    """One epoch of ``steps`` steps: ``(its StepStats, the parent's wall seconds, the fingerprint's
    sums)``. With ``probe`` > 0 the sums are taken after that many of its steps (untimed, between
    step calls; :meth:`dpbench.launcher.Run.fingerprint`), else None."""
    from dpbench.launcher.step_stats import merge_step_stats

    parts, wall, sums = [], 0.0, None
    for count in (probe, steps - probe):
        if count:
            started = time.perf_counter()
            parts.append(run.step(count))
            wall += time.perf_counter() - started  # parent side: adds batch assembly and the round trip
        if probe and sums is None:
            sums = run.fingerprint()
    return merge_step_stats(parts), wall, sums


def convergence_fingerprint(
    sums: dict[str, Any],
    stats: list[Any],
    *,
    final_test_accuracy: float,
    accuracy_tolerance: float | None,
) -> dict[str, Any]:
    """A convergence case's ``extra_info["fingerprint"]``: a training case's
    (:func:`dpbench.measure.cases.fingerprint_record`: the first steps' losses, the sums after the
    probe's steps) and what a whole training run keeps equal at its end: the final test accuracy,
    with the recipe's parity tolerance it is compared within (None: no parity expected)."""
    return {
        **fingerprint_record(sums, stats),
        "final_test_accuracy": float(final_test_accuracy),
        "accuracy_tolerance": accuracy_tolerance,
    }


def convergence_cases(settings: ConvergenceSettings) -> list[ConvergenceCase]:
    """Every (strategy, world size) of every selected recipe; each judged against its ``single``."""
    from dpbench.workloads.recipes import get_recipe

    cases = []
    for name in settings.recipes:
        recipe = get_recipe(name)
        made = []
        for strategy, size in recipe.runs():
            batch, lr = recipe.batch_and_lr(size)
            made.append(
                ConvergenceCase(
                    recipe=name,
                    strategy=strategy,
                    world_size=size,
                    global_batch=batch,
                    lr=lr,
                    epochs=settings.epochs or recipe.epochs,
                    target_accuracy=settings.target_accuracy or recipe.target_accuracy,
                    fashion_mnist=settings.fashion_mnist,
                    options=dict(recipe.options),
                )
            )
        single = next((c for c in made if c.strategy == BASELINE_STRATEGY), None)
        cases += [c if c is single else _with_reference(c, single) for c in made]
    return cases


def _with_reference(case: ConvergenceCase, single: ConvergenceCase | None) -> ConvergenceCase:
    import dataclasses

    return dataclasses.replace(case, reference=single)


def _interval(values: list[float]) -> list[float] | None:
    lo, hi = log_t_interval(values)
    return None if math.isnan(lo) else [lo, hi]


def _convergence_detail(trial: TrialResult) -> ConvergenceDetail:
    if not isinstance(trial.detail, ConvergenceDetail):
        raise TypeError(f"trial.detail: expected a ConvergenceDetail, found {type(trial.detail).__name__}")
    return trial.detail


def _first_at_least(curve: list[float], target: float | None) -> int | None:
    if target is None:
        return None
    return next((i + 1 for i, acc in enumerate(curve) if acc >= target), None)


def convergence_info(case: ConvergenceCase, result: CaseResult, reference: CaseResult | None = None) -> dict[str, Any]:
    """``extra_info["convergence"]``: the accuracy curve, seconds per epoch, time to target, parity."""
    from dpbench.workloads.recipes import get_recipe

    recipe = get_recipe(case.recipe)
    per_trial = [_convergence_detail(t).epochs for t in result.trials]
    first = per_trial[0]
    curve = [e["test_accuracy"] for e in first]
    times = [[e["time_s"] for e in epochs] for epochs in per_trial]
    sec_per_epoch = [statistics.fmean(t) for t in times]
    samples_per_epoch = result.trials[0].steps_per_round * case.global_batch
    reached = _first_at_least(curve, case.target_accuracy)
    to_target = [sum(t[:reached]) for t in times] if reached else []
    info = {
        "recipe": case.recipe,
        "dataset": recipe.dataset,
        "source": recipe.source,
        "train_samples": _convergence_detail(result.trials[0]).train_samples,
        "test_samples": _convergence_detail(result.trials[0]).test_samples,
        "epochs": case.epochs,
        "steps_per_epoch": result.trials[0].steps_per_round,
        "samples_per_epoch": samples_per_epoch,
        "test_accuracy": curve,
        "test_loss": [e["test_loss"] for e in first],
        "train_loss": [e["train_loss"] for e in first],
        "test_accuracy_trials": [[e["test_accuracy"] for e in epochs] for epochs in per_trial],
        "deterministic": all([e["test_accuracy"] for e in epochs] == curve for epochs in per_trial),
        "final_test_accuracy": curve[-1],
        "expected_accuracy": recipe.expected_accuracy,
        "epoch_time_s": [statistics.median(column) for column in zip(*times)],
        "epoch_time_s_trials": times,
        "epoch_wall_s": [statistics.median(column) for column in zip(*[[e["wall_s"] for e in ep] for ep in per_trial])],
        "sec_per_epoch": statistics.median(sec_per_epoch),
        "sec_per_epoch_ci95": _interval(sec_per_epoch),
        "sec_per_epoch_trials": sec_per_epoch,
        "epoch_samples_per_s": samples_per_epoch / statistics.median(sec_per_epoch),
        "target_accuracy": case.target_accuracy,
        "epochs_to_target": reached,
        "time_to_target_s": statistics.median(to_target) if to_target else None,
        "time_to_target_ci95": _interval(to_target) if to_target else None,
        "time_to_target_trials": to_target,
        "eval_rank": 0,
        "eval_device": first[0]["eval_device"],
        "eval_s": statistics.median(e["eval_s"] for epochs in per_trial for e in epochs),
        "parity_tolerance": recipe.parity_tolerance,
    }
    info.update(_parity(case, curve, reference))
    return info


def _parity(case: ConvergenceCase, curve: list[float], reference: CaseResult | None) -> dict[str, Any]:
    if case.reference is None or reference is None or not reference.trials:
        return {"reference": None, "accuracy_gap_to_reference": None}
    ref_curve = [e["test_accuracy"] for e in _convergence_detail(reference.trials[0]).epochs]
    return {
        "reference": case.reference.id,
        "accuracy_gap_to_reference": curve[-1] - ref_curve[-1],
        "max_curve_gap_to_reference": max(abs(a - b) for a, b in zip(curve, ref_curve)),
    }
