"""The gate's statistics with exact values where they are known, and rates against the simulation.

The simulation here is the one ``scripts/simulate_gate.py`` runs at full size (1,000 jobs of 70
benchmarks; README), kept small and seeded: a rate check that fails when the gate changes.
"""
from __future__ import annotations

import math
import random
import statistics

import pytest
from scipy import special, stats

from dpbench.gate.family import Item, judge_family
from dpbench.gate.judge import (BIG_DF, Method, Pooled, between_run_variance, evidence, fit_prior, holm, moderate,
                                trigamma_inverse)
from dpbench.gate.noise import CLEAN, NoiseModel, draw_case_params, draw_side, fit_noise_model
from dpbench.gate.verdicts import Verdict

UNIFORM = NoiseModel(**{**CLEAN.to_dict(), "case_run_sd_spread": 0.0})


def pooled(times: list[float], *, key: str, controls: float = 0.004) -> Pooled:
    return Pooled(unit="s/step", runs=[list(times)], control_runs=[[controls] * len(times)], case_key=key)


# ---------------------------------------------------------------- the pieces, exact
def test_holm_matches_the_step_down_definition():
    assert holm([0.01, 0.04, 0.03, math.nan]) == pytest.approx([0.03, 0.06, 0.06, math.nan], nan_ok=True)
    assert holm([0.5, 0.2]) == [0.5, 0.4]  # monotone: never below an earlier adjusted p


def test_trigamma_inverse_inverts_scipys_trigamma():
    for y in (0.3, 1.0, 3.0, 40.0):
        assert trigamma_inverse(float(special.polygamma(1, y))) == pytest.approx(y, rel=1e-7)


def test_prior_of_identical_variances_is_known_exactly_and_moderation_is_the_weighted_mean():
    prior = fit_prior([0.01] * 5, [4] * 5)
    # limma's fitFDist: variances that differ less than sampling explains → d0 = ∞ and
    # s0² = exp(mean(log s² − digamma(d/2) + log(d/2))).
    assert prior.df == BIG_DF
    assert prior.s2 == pytest.approx(0.01 * math.exp(math.log(2) - float(special.digamma(2))), rel=1e-12)
    s2, df = moderate(0.04, 4, fit_prior([0.01, 0.02, 0.005, 0.04, 0.03], [4] * 5))
    assert df > 4 and 0.005 < s2 < 0.04


def test_between_run_variance_is_zero_when_trial_spread_explains_the_scatter_and_exact_when_it_does_not():
    assert between_run_variance([0.01, -0.01, 0.0, 0.005], [1.0] * 4, [1.0] * 4) == 0.0
    # Within variance 0: tau² = the median of r² / chi-square(1)'s median, before the cut.
    residuals = [0.1, -0.2, 0.05, 0.15, -0.1, 0.0, 0.12]
    tau2 = between_run_variance(residuals, [0.0] * 7, [1.0] * 7, quantile=0.5, cut=1e9)
    assert tau2 == pytest.approx(statistics.median(r * r for r in residuals) / stats.chi2.ppf(0.5, 1), rel=1e-9)


def test_evidence_of_each_method():
    base, cand = pooled([0.010, 0.011, 0.012], key="k"), pooled([0.013, 0.0125, 0.014], key="k")
    e = evidence(base, cand, Method.TRIALS)
    logs_b, logs_c = [math.log(t) for t in base.times], [math.log(t) for t in cand.times]
    assert e.diff == pytest.approx(statistics.fmean(logs_c) - statistics.fmean(logs_b), rel=1e-12)
    assert e.s2 == pytest.approx((statistics.variance(logs_b) + statistics.variance(logs_c)) / 2, rel=1e-12)
    assert (e.df, e.a, e.b) == (4, pytest.approx(2 / 3), 2.0)
    p = evidence(Pooled(unit="s/step", runs=[[0.010], [0.011], [0.012]]),
                 Pooled(unit="s/step", runs=[[0.012], [0.0125], [0.013]]), Method.PAIRED)
    ratios = [math.log(c / b) for b, c in ((0.010, 0.012), (0.011, 0.0125), (0.012, 0.013))]
    assert p.diff == pytest.approx(statistics.fmean(ratios)) and p.s2 == pytest.approx(statistics.variance(ratios))
    assert (p.df, p.pairs, p.b) == (2, 3, 0.0)


def _twenty(effects: dict[int, float], spread=(0.95, 1.0, 1.05)) -> list[Item]:
    """Twenty cases with the same trial spread (prior known exactly), no scatter between them (tau = 0)."""
    return [Item(name=f"b{i}", base=pooled([0.01 * f for f in spread], key=f"k{i}"),
                 cand=pooled([0.01 * f * effects.get(i, 1.0) for f in spread], key=f"k{i}")) for i in range(20)]


def _z(change: float, against: float = 1.0, spread=(0.95, 1.0, 1.05)) -> float:
    s2 = statistics.variance([math.log(f) for f in spread])
    s2 *= 2 / math.exp(float(special.digamma(2)))  # the prior's variance (limma, d0 = ∞; tested above)
    return (math.log(change) - math.log(against)) / math.sqrt(s2 * 2 / 3)


def _judge_with_aa(items: list[Item]):
    """The baseline's own trials as an --aa run: the measured between-run spread is exactly 0."""
    base = {i.name: i.base for i in items}
    return judge_family(items, threshold=0.1, alpha=0.05, aa=[dict(base)], aa_base=base)


def test_with_aa_runs_a_regression_gets_the_p_value_of_its_moderated_t_against_no_change_corrected_by_holm():
    """+20%: p = the normal tail of log(1.2) / se (z = 3.90), times 20 (Holm) = 0.001: regressed."""
    judged, family = _judge_with_aa(_twenty({0: 1.2}))
    b = judged[0]
    z = _z(1.2)
    assert z == pytest.approx(3.898, abs=1e-3)
    assert family.between_run_sd == 0.0 and family.between_run_sd_aa == 0.0 and family.size == 20
    assert family.prior_df == BIG_DF
    assert b.verdict == Verdict.REGRESSED and b.ratio == pytest.approx(1.2)
    assert b.p_value == pytest.approx(stats.norm.sf(z), rel=1e-3)
    assert b.p_adjusted == pytest.approx(20 * b.p_value, rel=1e-12)
    assert b.note == (f"slower by +20.0% beyond the machine (controls moved +0.0%), p = {b.p_value:.2g} against "
                      f"no change, {b.p_adjusted:.2g} after Holm over 20 cases")
    assert all(x.verdict == Verdict.UNCHANGED for x in judged[1:])


def test_without_aa_runs_the_test_is_against_the_threshold():
    """No --aa: the same +20% is tested against +10% (z = 1.86, p = 0.031, 0.63 after Holm): inconclusive;
    +50% (z = 8.2) is regressed with that p."""
    judged, family = judge_family(_twenty({0: 1.2}), threshold=0.1, alpha=0.05)
    b = judged[0]
    assert _z(1.2, 1.1) == pytest.approx(1.860, abs=1e-3) and math.isnan(family.between_run_sd_aa)
    assert b.verdict == Verdict.INCONCLUSIVE and b.p_value == pytest.approx(stats.norm.sf(_z(1.2, 1.1)), rel=1e-3)
    assert b.p_adjusted == pytest.approx(20 * b.p_value, rel=1e-12)
    assert b.note == (f"slower by +20.0% beyond the machine (controls moved +0.0%) but not significant: "
                      f"p = {b.p_value:.2g} against +10.0%, {b.p_adjusted:.2g} after Holm over 20 cases, "
                      f"with 3 vs 3 trials")
    b = judge_family(_twenty({0: 1.5}), threshold=0.1, alpha=0.05)[0][0]
    assert b.verdict == Verdict.REGRESSED and b.p_value == pytest.approx(stats.norm.sf(_z(1.5, 1.1)), rel=1e-3)


def test_significant_but_below_the_threshold_is_unchanged_and_beyond_it_but_not_significant_inconclusive():
    # +8% with a tight spread: z = 5.6 against no change (significant) but below the 10% bar → unchanged.
    tight = (0.99, 1.0, 1.01)
    judged, _ = _judge_with_aa(_twenty({0: 1.08}, tight))
    assert _z(1.08, spread=tight) > 5 and judged[0].p_adjusted < 1e-5 and judged[0].verdict == Verdict.UNCHANGED
    # +12% with the wide spread: z = 2.42, p = 0.0077, 0.15 after Holm over 20 → inconclusive, and says so.
    judged, _ = _judge_with_aa(_twenty({0: 1.12}))
    b = judged[0]
    assert b.p_value == pytest.approx(stats.norm.sf(_z(1.12)), rel=1e-3) and b.verdict == Verdict.INCONCLUSIVE
    assert b.note.startswith("slower by +12.0% beyond the machine (controls moved +0.0%) but not significant: ")
    # -20%: improved, with the same kind of note.
    judged, _ = _judge_with_aa(_twenty({0: 1 / 1.2}))
    assert judged[0].verdict == Verdict.IMPROVED and judged[0].p_value == pytest.approx(stats.norm.sf(_z(1.2)), rel=1e-3)
    assert judged[0].note.startswith("faster by -16.7% beyond the machine (controls moved +0.0%), p = ")
    assert "against no change" in judged[0].note


def test_a_case_published_twice_is_judged_once():
    times = [0.010, 0.0105, 0.0098]
    items = [Item(name=n, base=pooled(times, key="same"), cand=pooled([t * 1.5 for t in times], key="same"))
             for n in ("suite_a::x", "suite_b::x")]
    items += [Item(name=f"o{i}", base=pooled(times, key=f"o{i}"), cand=pooled(times, key=f"o{i}")) for i in range(3)]
    judged, family = judge_family(items, threshold=0.1, alpha=0.05)
    assert family.size == 4
    a, b = judged[0], judged[1]
    assert a.verdict == b.verdict == Verdict.REGRESSED and a.p_adjusted == b.p_adjusted
    assert b.note.endswith("the same case as suite_a::x: judged once")


# ---------------------------------------------------------------- the noise model
@pytest.mark.slow
def test_the_fit_recovers_the_model_it_was_drawn_from():
    """Many cases, many runs: the fitted within-run spread and run-wide offset are the drawn ones."""
    import pandas as pd

    model = NoiseModel(trial_sd=0.05, trial_sd_spread=0.0, case_run_sd=0.04, case_run_sd_spread=0.0, run_sd=0.03,
                       control_sd=0.01, control_run_sd=0.0)
    rng = random.Random(3)
    cases = draw_case_params(model, rng, 200)
    runs = [draw_side(model, cases, rng, runs=1, trials=6) for _ in range(6)]
    frames = [pd.DataFrame({"run_id": [f"r{r}"] * 200, "fullname": [f"b{i}" for i in range(200)],
                            "case_key": [f"k{i}" for i in range(200)], "trial_times": [p.times for p in side],
                            "trial_controls": [p.controls for p in side], "incomparable": [None] * 200})
              for r, side in enumerate(runs)]
    fitted = fit_noise_model(frames)
    assert fitted.trial_sd == pytest.approx(0.05, rel=0.1)
    assert fitted.case_run_sd == pytest.approx(0.04, rel=0.25)
    assert fitted.control_sd == pytest.approx(0.01, rel=0.2)
    assert fitted.fitted["runs"] == 6 and fitted.fitted["cases"] == 200


# ---------------------------------------------------------------- rates, against the simulation
def _jobs(model: NoiseModel, *, jobs: int, seed: int, benchmarks: int, trials: int, paired: bool,
          effect: float = 1.0, target_sd: float | None = None, machine: float = 1.0, aa_runs: int = 0
          ) -> tuple[int, int]:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("simulate_gate", Path(__file__).parents[2] / "scripts" /
                                                  "simulate_gate.py")
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)
    failed, caught, _ = sim.rate(model, jobs=jobs, seed=seed, benchmarks=benchmarks, trials=trials, paired=paired,
                                 target_effect=effect, target_sd=target_sd, machine=machine, aa_runs=aa_runs)
    return failed, caught


@pytest.mark.parametrize("paired", [False, True])
def test_simulated_aa_jobs_do_not_fail(paired):
    failed, _ = _jobs(UNIFORM, jobs=20, seed=1, benchmarks=30, trials=5, paired=paired)
    assert failed == 0


@pytest.mark.parametrize("paired", [False, True])
def test_simulated_large_slowdown_of_a_steady_case_is_caught(paired):
    _, caught = _jobs(UNIFORM, jobs=20, seed=2, benchmarks=30, trials=5, paired=paired, effect=2.0, target_sd=0.02)
    assert caught >= 19


def test_simulated_machine_slowdown_alone_fails_no_job_and_a_real_one_beyond_it_is_caught():
    failed, _ = _jobs(UNIFORM, jobs=15, seed=3, benchmarks=30, trials=5, paired=False, machine=1.12)
    assert failed == 0
    _, caught = _jobs(UNIFORM, jobs=15, seed=4, benchmarks=30, trials=5, paired=False, effect=2.0, target_sd=0.02,
                      machine=1.12)
    assert caught >= 14


@pytest.mark.slow
def test_with_aa_runs_a_25pc_slowdown_of_a_steady_case_is_caught_far_more_often_and_aa_jobs_still_pass():
    """The two nulls side by side (README: compare, 1,000 jobs of 70 cases): with 3 --aa runs the test is
    against no change; without, against +10%. 20 seeded jobs of 30 cases, a +25% slowdown at CV 2%."""
    without = _jobs(UNIFORM, jobs=20, seed=6, benchmarks=30, trials=5, paired=False, effect=1.25, target_sd=0.02)[1]
    with_aa = _jobs(UNIFORM, jobs=20, seed=6, benchmarks=30, trials=5, paired=False, effect=1.25, target_sd=0.02,
                    aa_runs=3)[1]
    assert with_aa >= 14 and with_aa >= without + 6
    failed, _ = _jobs(UNIFORM, jobs=20, seed=5, benchmarks=30, trials=5, paired=False, aa_runs=3)
    assert failed <= 1  # the full simulation's A/A rate with --aa is ~0.3-1.3%: 2 of 20 would be p < 0.03
