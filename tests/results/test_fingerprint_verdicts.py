"""dpbench.results.fingerprint: each configuration's fingerprint against single's at the same recipe.

Synthetic fingerprints with known differences; the real ones (every strategy, a planted difference,
BatchNorm) are in tests/strategies/test_fingerprint.py.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from validation.synthetic_runs import make_run

from dpbench.results import load_runs
from dpbench.results.fingerprint import (
    TOLERANCES,
    FingerprintStatus,
    compare_fingerprints,
    departures,
    fingerprint_verdicts,
)

LOSSES = [2.3, 2.1, 1.9, 1.8]


def fp(*, scale: float = 1.0, loss_at: int | None = None, precision: str = "fp32", **overrides) -> dict:
    """A fingerprint whose sums are ``scale`` × the reference's and whose loss ``loss_at`` is ``scale`` × it."""
    losses = [x * scale if i == loss_at else x for i, x in enumerate(LOSSES)]
    record = {
        "losses": losses,
        "step": 2,
        "param_sum": 10.0 * (scale if loss_at is None else 1.0),
        "param_abs_sum": 100.0,
        "param_sq_sum": 50.0,
        "param_count": 1000,
        "precision": precision,
        "exempt": None,
        "rank_spread": 0.0,
    }
    return {**record, **overrides}


def test_the_same_fingerprint_matches():
    verdict = compare_fingerprints(fp(), fp(), reference="single w1")
    assert verdict.status is FingerprintStatus.MATCHES and not verdict.flagged
    assert verdict.departure == 0.0 and verdict.compared_steps == 4 and verdict.reference == "single w1"
    assert verdict.reason.startswith("matches single w1 within the fp32 tolerance 0.0001")


def test_a_loss_beyond_the_tolerance_departs_and_says_which_step():
    verdict = compare_fingerprints(fp(scale=1 + 1e-3, loss_at=2), fp(), reference="single w1")
    assert verdict.status is FingerprintStatus.DEPARTS and verdict.flagged
    assert verdict.where == "loss at step 3" and verdict.departure == pytest.approx(1e-3)
    assert verdict.reason == (
        "computes something else: departs from single w1 by 1.0e-03 (loss at step 3), beyond the fp32 tolerance 0.0001"
    )


def test_rounding_within_the_tolerance_matches():
    assert compare_fingerprints(fp(scale=1 + 1e-6, loss_at=1), fp()).status is FingerprintStatus.MATCHES


def test_the_parameter_sum_is_read_against_the_sum_of_magnitudes():
    # Σp moves by 0.05 against Σ|p| = 100: 5e-4, beyond fp32's tolerance though Σp itself moved 0.5%.
    verdict = compare_fingerprints(fp(param_sum=10.05), fp())
    assert verdict.status is FingerprintStatus.DEPARTS and verdict.where == "parameter sum after step 2"
    assert verdict.departure == pytest.approx(5e-4)


def test_sums_taken_after_other_steps_are_not_compared():
    verdict = compare_fingerprints(fp(param_sum=99.0, step=3), fp())
    assert verdict.status is FingerprintStatus.MATCHES and "parameter sums" not in verdict.reason


def test_replicas_that_disagree_depart_however_close_rank_0_is():
    verdict = compare_fingerprints(fp(rank_spread=0.01), fp())
    assert verdict.status is FingerprintStatus.DEPARTS and verdict.where == "ranks' parameters (against rank 0's)"


def test_another_model_departs():
    verdict = compare_fingerprints(fp(param_count=999), fp())
    assert (
        verdict.status is FingerprintStatus.DEPARTS
        and "a model of 999 parameters, single trains 1000" in verdict.reason
    )


def test_the_tolerance_follows_the_coarser_precision():
    difference = fp(scale=1 + 3e-3, loss_at=0)
    assert compare_fingerprints(difference, fp()).status is FingerprintStatus.DEPARTS
    bf16 = compare_fingerprints({**difference, "precision": "bf16"}, fp())
    assert bf16.status is FingerprintStatus.MATCHES
    assert (bf16.tolerance.precision, bf16.tolerance.relative) == ("bf16", TOLERANCES["bf16"])
    fp16 = compare_fingerprints({**difference, "precision": "fp16"}, fp())
    assert fp16.status is FingerprintStatus.DEPARTS and fp16.tolerance.precision == "fp16"
    assert TOLERANCES["fp32"] < TOLERANCES["fp16"] < TOLERANCES["bf16"]


def test_a_convergence_cases_final_accuracy_is_held_to_the_recipes_parity_tolerance():
    # Absolute, in accuracy: 3 of 359 test images (the digits recipe's tolerance).
    single = fp(final_test_accuracy=0.95, accuracy_tolerance=3 / 359)
    within = compare_fingerprints(fp(final_test_accuracy=0.95 + 2 / 359, accuracy_tolerance=3 / 359), single)
    assert within.status is FingerprintStatus.MATCHES and within.where == "final test accuracy"
    assert within.reason == (
        "matches single within the fp32 tolerance 0.0001 (largest relative difference 0.0e+00, loss at step 1; "
        "compared: 4 steps' losses, the parameter sums, the final test accuracy (0.0056 apart, within the "
        "recipe's parity tolerance 0.0084))"
    )
    beyond = compare_fingerprints(fp(final_test_accuracy=0.95 - 4 / 359, accuracy_tolerance=3 / 359), single)
    assert beyond.status is FingerprintStatus.DEPARTS and beyond.departure == pytest.approx(4 / 359)
    assert beyond.reason == (
        "computes something else: departs from single by 1.1e-02 (final test accuracy), "
        "beyond the recipe's parity tolerance 0.0084"
    )
    # A loss past its tolerance departs for that, however close the accuracy.
    loss = compare_fingerprints(fp(scale=1.01, loss_at=1, final_test_accuracy=0.95), single)
    assert loss.status is FingerprintStatus.DEPARTS and loss.where == "loss at step 2"
    # No parity expected (a recipe without a tolerance): the accuracy is not compared.
    free = fp(final_test_accuracy=0.5, accuracy_tolerance=None)
    assert compare_fingerprints(free, {**single, "accuracy_tolerance": None}).status is FingerprintStatus.MATCHES


def test_a_stateful_workload_is_exempt_with_its_reason():
    why = "BatchNorm (BatchNorm2d) normalises each replica's slice with its own statistics"
    verdict = compare_fingerprints(fp(exempt=why, scale=2.0), fp(exempt=why))
    assert verdict.status is FingerprintStatus.EXEMPT and not verdict.flagged
    assert verdict.reason == f"exempt: {why}"


def test_no_fingerprint_is_said():
    assert compare_fingerprints(None, fp()).status is FingerprintStatus.NOT_RECORDED
    assert compare_fingerprints(fp(), None).status is FingerprintStatus.NO_SINGLE


def row(strategy: str, fingerprint, *, run="r1", optimizer="sgd", lr=0.05, batch=64, config=None) -> dict:
    return {
        "run": run,
        "strategy": strategy,
        "workload": "mlp",
        "batch": float(batch),
        "options": {"optimizer": optimizer},
        "lr": lr,
        "seed": 0,
        "config": config or f"{strategy} w2",
        "fingerprint": fingerprint,
    }


def test_each_configuration_is_judged_against_the_single_of_its_own_recipe():
    rows = [
        row("single", fp(), config="single w1"),
        row("ddp", fp()),
        row("fsdp", fp(scale=1.01, loss_at=0)),
        row("ddp", fp(), lr=0.1),  # another learning rate: another recipe
        row("ddp", fp(), optimizer="adamw"),
        row("ddp", fp(), run="r2"),  # single ran in r1 only
        row("zero", None),
    ]
    frame = pd.DataFrame(rows, index=[10, 11, 12, 13, 14, 15, 16])
    verdicts = fingerprint_verdicts(frame)
    assert list(verdicts.index) == list(frame.index)
    statuses = [v.status for v in verdicts]
    assert statuses == [
        FingerprintStatus.REFERENCE,
        FingerprintStatus.MATCHES,
        FingerprintStatus.DEPARTS,
        FingerprintStatus.NO_SINGLE,
        FingerprintStatus.NO_SINGLE,
        FingerprintStatus.NO_SINGLE,
        FingerprintStatus.NOT_RECORDED,
    ]
    assert verdicts[12].reference == "single w1"
    assert (
        verdicts[13].reason
        == "no single at this recipe (mlp, batch 64, sgd, lr 0.1, seed 0) in its run to compare with"
    )


def test_a_single_of_the_same_precision_is_preferred():
    rows = [
        row("single", fp(), config="single w1"),
        row("single", fp(precision="bf16", scale=1.004, loss_at=0), config="single(precision=bf16) w1"),
        row("ddp", fp(precision="bf16", scale=1.004, loss_at=0)),
        row("ddp", fp(precision="fp16", scale=1.0005, loss_at=0)),
    ]
    verdicts = fingerprint_verdicts(pd.DataFrame(rows))
    assert verdicts[2].reference == "single(precision=bf16) w1" and verdicts[2].departure == 0.0
    # No fp16 single: the finest one, fp32, with fp16's tolerance.
    assert verdicts[3].reference == "single w1" and verdicts[3].status is FingerprintStatus.MATCHES


def test_a_saved_run_keeps_the_fingerprint_whole(tmp_path):
    path = make_run(tmp_path, comm=False)
    doc = json.loads(path.read_text())
    for bench in doc["benchmarks"]:
        bench["extra_info"]["fingerprint"] = fp()
    path.write_text(json.dumps(doc))
    frame = load_runs([path])
    assert all(f == fp() for f in frame["fingerprint"])
    verdicts = fingerprint_verdicts(frame)
    singles = frame["strategy"] == "single"
    assert singles.any() and (~singles).any()
    assert {v.status for v in verdicts[singles]} == {FingerprintStatus.REFERENCE}
    assert {v.status for v in verdicts[~singles]} <= {FingerprintStatus.MATCHES, FingerprintStatus.NO_SINGLE}
    assert FingerprintStatus.MATCHES in {v.status for v in verdicts[~singles]}
    # The report's configurations (one row per measured case) carry it too, named as the report names them.
    from dpbench.decision.configs import configurations

    configs = configurations(frame)
    by_config = fingerprint_verdicts(configs)
    matched = [v for v in by_config if v.status is FingerprintStatus.MATCHES]
    assert matched and all(v.reference in set(configs["config"]) for v in matched)


def test_departures_name_each_flagged_configuration_for_the_decision(tmp_path):
    path = make_run(tmp_path, comm=False)
    doc = json.loads(path.read_text())
    for bench in doc["benchmarks"]:
        info = bench["extra_info"]
        planted = info["strategy"] == "ddp" and info["world_size"] == 2
        bench["extra_info"]["fingerprint"] = fp(scale=1.01, loss_at=3) if planted else fp()
    path.write_text(json.dumps(doc))
    from dpbench.decision import decide
    from dpbench.decision.configs import configurations

    configs = configurations(load_runs([path])).pipe(lambda c: c.assign(case=c["config"]))
    found = departures(configs)
    flagged = configs[(configs["strategy"] == "ddp") & (configs["world_size"] == 2)]
    assert found and set(found) == {(r["run"], r["case"]) for _, r in flagged.iterrows()}
    assert all(why.startswith("departs from single") and "(loss at step 4)" in why for why in found.values())
    # The decision leaves them out of the ranking and says why.
    decision = decide(configs, list(dict.fromkeys(configs["run"])), departures=found)
    excluded = [(name, why) for a in decision.answers for name, why in a.excluded]
    assert excluded and all(why.startswith("computes something else than single: departs") for _, why in excluded)
    assert {name for name, _ in excluded} <= {str(c).split(" · batch ")[0] for c in flagged["case"]}
    ranked = {s.entry.name for a in decision.answers for s in a.standings}
    assert not ranked & {name for name, _ in excluded}
