"""Suite — time to accuracy (opt-in): d2l's multi-GPU experiment under every strategy.

Each case trains a recipe (:mod:`dpbench.workloads.recipes`: ``digits-mlp``, ``d2l-lenet``,
``d2l-resnet18``) for E epochs and evaluates test accuracy after every epoch on rank 0
(:mod:`dpbench.measure.convergence`). Off unless ``DPBENCH_CONVERGENCE`` names recipes (or
``all``): it trains whole epochs, more than the quick profile's five minutes allow.

Checked here: the accuracy curve is the same in every trial (CPU; cuDNN's kernels are not
deterministic), the final accuracy reaches the recipe's documented floor (at the recipe's own
number of epochs), and the final accuracy of every strategy is within the recipe's parity
tolerance of ``single``'s (same seed, same global batches: float noise only). On CUDA, where a run
does not reproduce, both are held with the margin a perturbed run needs (:func:`asserted_bounds`),
and whether the documented floor itself was met is recorded (``floor_met``).
"""

from __future__ import annotations

import math

import pytest

from dpbench.measure import measure_training, reference_result
from dpbench.measure.convergence import convergence_cases, convergence_info
from dpbench.measure.plugin import session_of
from dpbench.workloads.recipes import get_recipe, recipe_unavailable

OPT_IN = (
    "the convergence suite is opt-in: set DPBENCH_CONVERGENCE=digits-mlp (or d2l-lenet, d2l-resnet18, "
    "a comma-separated list, all)"
)


def asserted_bounds(
    floor: float | None, tolerance: float | None, *, reproducible: bool
) -> tuple[float | None, float | None]:
    """The final accuracy's floor and the parity tolerance a trial is held to. Where a run
    reproduces (CPU) they are the recipe's. Where it does not (CUDA: cuBLAS and cuDNN reduce in
    orders of their own), each run is perturbed like another seed: it lands within one tolerance
    (two standard deviations across seeds) of where the seeds land, so the floor is held less one
    tolerance, and the gap between two such runs, √2 tolerances."""
    if reproducible or tolerance is None:
        return floor, tolerance
    return (None if floor is None else floor - tolerance), tolerance * math.sqrt(2)


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    # Resolved (and a bad DPBENCH_* value refused as a usage error, before any process) by the plugin.
    settings = session_of(metafunc.config).convergence
    cases = convergence_cases(settings)
    if not cases:
        metafunc.parametrize("case", [pytest.param(None, marks=pytest.mark.skip(reason=OPT_IN))], ids=["off"])
        return
    reasons = {
        name: recipe_unavailable(get_recipe(name), fashion_mnist_root=settings.fashion_mnist)
        for name in settings.recipes
    }
    params = [
        pytest.param(c, marks=pytest.mark.skip(reason=reasons[c.recipe])) if reasons[c.recipe] else c for c in cases
    ]
    metafunc.parametrize("case", params, ids=[c.id for c in cases])


def test_convergence(benchmark, case, profile, trials, unavailable_to_skip):
    benchmark.group = f"convergence-{case.recipe}"
    with unavailable_to_skip:
        info, result = measure_training(benchmark, case, session=trials, profile=profile, suite="convergence")
    convergence = convergence_info(case, result, reference_result(trials, case))
    benchmark.extra_info["convergence"] = convergence
    curve = convergence["test_accuracy"]
    assert len(curve) == case.epochs and all(0.0 <= acc <= 1.0 for acc in curve)
    if profile.device == "cpu":
        # Same seed, same batches, same threads: the curve may not move from trial to trial.
        assert convergence["deterministic"], convergence["test_accuracy_trials"]
    documented, gap = convergence["expected_accuracy"], convergence["accuracy_gap_to_reference"]
    floor, tolerance = asserted_bounds(
        documented, convergence["parity_tolerance"], reproducible=profile.device == "cpu"
    )
    if floor is not None and case.epochs == get_recipe(case.recipe).epochs:
        # The recipe's documented accuracy, at its own length (DPBENCH_EPOCHS shortens the run: no floor).
        convergence["floor_met"] = curve[-1] >= documented
        assert curve[-1] >= floor, f"{case.id}: final test accuracy {curve[-1]:.4f} is below {floor:.4f}"
    if tolerance is not None and gap is not None:
        assert abs(gap) <= tolerance, (
            f"{case.id}: final test accuracy {curve[-1]:.4f} is {gap:+.4f} from "
            f"{convergence['reference']}'s, beyond float noise ({tolerance:.4f})"
        )
