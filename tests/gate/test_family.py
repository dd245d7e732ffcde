"""The gate's statistics with exact values where they are known.

The noise model and the rates against the simulation are tested in ``test_family_simulation.py``.
"""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats

from dpbench.gate.family import Item, evidence, judge_family
from dpbench.gate.judge import (
    Method,
    Pooled,
    Prior,
    between_run_variance,
    fit_prior,
    holm,
    posterior,
    posterior_variance,
    tail_p,
)
from dpbench.gate.verdicts import Verdict


def pooled(times: list[float], *, key: str, controls: float = 0.004) -> Pooled:
    return Pooled(unit="s/step", runs=[list(times)], control_runs=[[controls] * len(times)], case_key=key)


# ---------------------------------------------------------------- the pieces, exact
def test_holm_matches_the_step_down_definition():
    assert holm([0.01, 0.04, 0.03, math.nan]) == pytest.approx([0.03, 0.06, 0.06, math.nan], nan_ok=True)
    assert holm([0.5, 0.2]) == [0.5, 0.4]  # monotone: never below an earlier adjusted p


def test_prior_of_identical_variances_has_no_spread_and_is_their_pooled_variance():
    """Variances that differ no more than sampling explains: one variance for all, exactly Σ s²·df / Σ df."""
    prior = fit_prior([0.01] * 5, [4] * 5)
    assert prior.spread == 0.0 and prior.slope == 0.0
    assert prior.sd == pytest.approx(0.1, rel=1e-12)
    post = posterior(0.04, 4, prior)
    assert list(post.variances) == [pytest.approx(0.01, rel=1e-12)] and list(post.weights) == [1.0]
    assert math.isnan(fit_prior([0.01, 0.02], [4, 4]).sd)  # fewer than three: no prior
    assert posterior(0.04, 4, fit_prior([0.01, 0.02], [4, 4])) is None


def _mixture_p(excess: float, a: float, extra: float, s2: float, df: float, prior: Prior) -> float:
    """The same p by scipy's quadrature over log sd: prior × chi-square likelihood × the normal tail."""
    from scipy import integrate

    centre, spread = math.log(prior.sd), prior.spread

    def weight(x: float) -> float:
        v = math.exp(2 * x)
        return stats.norm.pdf(x, centre, spread) * stats.chi2.pdf(s2 * df / v, df) / v

    norm = integrate.quad(weight, centre - 10 * spread, centre + 10 * spread, limit=200)[0]
    tail = integrate.quad(
        lambda x: weight(x) * stats.norm.sf(excess / math.sqrt(math.exp(2 * x) * a + extra)),
        centre - 10 * spread,
        centre + 10 * spread,
        limit=200,
    )[0]
    return tail / norm


def test_the_p_value_is_the_normal_tail_averaged_over_the_posterior_variance():
    """A case of own sd 5% (8 df) among cases of median 15% spreading 0.4 (log): the grid's p is the
    quadrature's; its posterior sd stays near its own (log-normal pooling), not near the family's."""
    prior = Prior(sd=0.15, spread=0.4)
    for excess in (0.1, 0.2, 0.3):
        assert tail_p(excess, 0.0, 0.4, 0.0002, posterior(0.0025, 8, prior), upper=True) == pytest.approx(
            _mixture_p(excess, 0.4, 0.0002, 0.0025, 8, prior), rel=2e-3
        )
    assert tail_p(-0.2, 0.0, 0.4, 0.0, posterior(0.0025, 8, prior), upper=False) == pytest.approx(
        _mixture_p(0.2, 0.4, 0.0, 0.0025, 8, prior), rel=2e-3
    )
    # Pooled in logs: the posterior's typical sd (exp E[log sd], by quadrature) is 7.7%, between its own 5%
    # and the family's 15%; limma's additive pooling (its prior df for a spread of 0.4: ~4.2) lent this
    # case (4.2·0.15² + 8·0.05²)/12.2 → sd 9.7%.
    import numpy as np
    from scipy import integrate

    post = posterior(0.0025, 8, prior)
    typical = math.exp(float(post.weights @ (0.5 * np.log(post.variances))))

    def weight(x: float) -> float:
        return stats.norm.pdf(x, math.log(0.15), 0.4) * stats.chi2.pdf(0.02 / math.exp(2 * x), 8) / math.exp(2 * x)

    lo, hi = math.log(0.15) - 4, math.log(0.15) + 4
    exact = integrate.quad(lambda x: x * weight(x), lo, hi)[0] / integrate.quad(weight, lo, hi)[0]
    assert typical == pytest.approx(math.exp(exact), rel=1e-3) and typical < 0.08
    assert posterior_variance(0.0025, 8, prior) == pytest.approx(float(post.weights @ post.variances), rel=1e-12)


def test_the_prior_follows_the_cases_level_and_reads_each_case_on_its_trend():
    """400 cases whose log sd falls 0.3 per unit of log time (spread 0.2 around it), 8 df each."""
    import numpy as np

    rng = np.random.default_rng(11)
    levels = rng.normal(-4.0, 1.5, 400)
    true_sd = 0.12 * np.exp(-0.3 * (levels + 4.0) + rng.normal(0, 0.2, 400))
    s2 = true_sd**2 * rng.chisquare(8, 400) / 8
    prior = fit_prior(list(s2), [8] * 400, list(levels))
    assert prior.slope == pytest.approx(-0.3, abs=0.05) and prior.spread == pytest.approx(0.2, abs=0.06)
    assert prior.centre == pytest.approx(float(np.mean(levels)), rel=1e-12)
    # Without levels, the same variances spread more widely (the trend's share counted as spread).
    assert fit_prior(list(s2), [8] * 400).spread > prior.spread + 0.2
    # A case's prior centre is read at its level: a long step's prior is quieter than a short one's.
    quiet, noisy = posterior(math.nan, 0, prior, -1.0), posterior(math.nan, 0, prior, -7.0)
    assert quiet.mean < noisy.mean


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
    p = evidence(
        Pooled(unit="s/step", runs=[[0.010], [0.011], [0.012]]),
        Pooled(unit="s/step", runs=[[0.012], [0.0125], [0.013]]),
        Method.PAIRED,
    )
    ratios = [math.log(c / b) for b, c in ((0.010, 0.012), (0.011, 0.0125), (0.012, 0.013))]
    assert p.diff == pytest.approx(statistics.fmean(ratios)) and p.s2 == pytest.approx(statistics.variance(ratios))
    assert (p.df, p.pairs, p.b) == (2, 3, 0.0)


def _twenty(effects: dict[int, float], spread=(0.95, 1.0, 1.05)) -> list[Item]:
    """Twenty cases with the same trial spread (prior known exactly), no scatter between them (tau = 0)."""
    return [
        Item(
            name=f"b{i}",
            base=pooled([0.01 * f for f in spread], key=f"k{i}"),
            cand=pooled([0.01 * f * effects.get(i, 1.0) for f in spread], key=f"k{i}"),
        )
        for i in range(20)
    ]


def _z(change: float, against: float = 1.0, spread=(0.95, 1.0, 1.05), cases: int = 20) -> float:
    s2 = statistics.variance([math.log(f) for f in spread])  # the prior's one variance (no spread; tested above)
    # The machine's move is the median of the reference cases (all 0 here; the changed case, 2.6+ of its sds
    # from the controls' move, is not one of them: dpbench.gate.machine); the median of `cases` log ratios
    # of variance v has variance (pi/2) v / cases, which each case's variance carries too.
    v = s2 * 2 / 3
    return (math.log(change) - math.log(against)) / math.sqrt(v * (1 + math.pi / 2 / cases))


def _judge_with_aa(items: list[Item]):
    """The baseline's own trials as an --aa run: the measured between-run spread is exactly 0."""
    base = {i.name: i.base for i in items}
    return judge_family(items, threshold=0.1, alpha=0.05, aa=[dict(base)], aa_base=base)


def test_with_aa_runs_a_regression_gets_the_p_value_of_its_moderated_test_against_no_change_corrected_by_holm():
    """+20%: p = the normal tail of log(1.2) / se (z = 4.29: the 19 other cases' median in the se),
    times 21 (Holm over the cases and the broad tests, which say nothing here: p = 1)."""
    judged, family = _judge_with_aa(_twenty({0: 1.2}))
    b = judged[0]
    z = _z(1.2, cases=19)
    assert z == pytest.approx(4.288, abs=1e-3)
    assert family.reference_size == 19 and family.broad == "none" and family.broad_p == 1.0
    assert family.between_run_sd < 1e-5 and family.between_run_sd_aa < 1e-5 and family.size == 20
    assert family.prior_spread == 0.0
    assert b.verdict == Verdict.REGRESSED and b.ratio == pytest.approx(1.2)
    assert b.p_value == pytest.approx(stats.norm.sf(z), rel=1e-3)
    assert b.p_adjusted == pytest.approx(21 * b.p_value, rel=1e-12)
    assert b.note == (
        f"slower by +20.0% beyond the machine (the other benchmarks moved +0.0%, controls +0.0%), "
        f"p = {b.p_value:.2g} against no change, {b.p_adjusted:.2g} after Holm over 20 cases and the broad tests"
    )
    assert all(x.verdict == Verdict.UNCHANGED for x in judged[1:])


def test_without_aa_runs_the_test_is_against_no_change_and_carries_the_fitted_between_run_offset():
    """No --aa, no scatter between the cases: the between-run offset fitted is ~0, and +20% gets the same
    p as with --aa (z = 4.30, against no change). Against +10% (the rule until 2026-12-03, the
    simulation's --null threshold) it would be z = 2.05, p = 0.020, 0.40 after Holm: inconclusive."""
    judged, family = judge_family(_twenty({0: 1.2}), threshold=0.1, alpha=0.05)
    b = judged[0]
    assert family.between_run_sd < 1e-5 and family.between_run_spread == pytest.approx(0.7)
    assert math.isnan(family.between_run_sd_aa)
    assert b.verdict == Verdict.REGRESSED and b.p_value == pytest.approx(stats.norm.sf(_z(1.2, cases=19)), rel=1e-3)
    assert b.p_adjusted == pytest.approx(21 * b.p_value, rel=1e-12)
    assert b.note == (
        f"slower by +20.0% beyond the machine (the other benchmarks moved +0.0%, controls +0.0%), "
        f"p = {b.p_value:.2g} against no change, {b.p_adjusted:.2g} after Holm over 20 cases and the broad tests"
    )
    b = judge_family(_twenty({0: 1.2}), threshold=0.1, alpha=0.05, null="threshold")[0][0]
    assert _z(1.2, 1.1) == pytest.approx(2.050, abs=1e-3)
    assert b.verdict == Verdict.INCONCLUSIVE and b.p_value == pytest.approx(
        stats.norm.sf(_z(1.2, 1.1, cases=19)), rel=1e-3
    )
    assert b.note == (
        f"slower by +20.0% beyond the machine (the other benchmarks moved +0.0%, controls +0.0%) "
        f"but not significant: "
        f"p = {b.p_value:.2g} against +10.0%, {b.p_adjusted:.2g} after Holm over 20 cases and the broad tests, "
        f"with 3 vs 3 trials"
    )


def test_the_between_run_offset_is_a_log_normal_mixture_in_the_p_value():
    """tail_p with a between-run distribution is the double integral of the normal tail over the trial
    variance's posterior and the log-normal of τ (median 3%, spread 0.7), by quadrature."""
    import numpy as np
    from scipy import integrate

    from dpbench.gate.judge import between_distribution

    prior = Prior(sd=0.05, spread=0.0)  # the trial variance known: 5%
    between = between_distribution(Prior(sd=0.03, spread=0.7))
    for excess in (0.1, 0.2):
        got = tail_p(excess, 0.0, 0.4, 0.0, posterior(0.0025, 8, prior), upper=True, between=between, b=2.0)

        def tail(x: float, excess: float = excess) -> float:  # x = log τ
            return stats.norm.pdf(x, math.log(0.03), 0.7) * stats.norm.sf(
                excess / math.sqrt(0.0025 * 0.4 + 2.0 * math.exp(2 * x))
            )

        exact = integrate.quad(tail, math.log(0.03) - 6, math.log(0.03) + 6, limit=200)[0]
        assert got == pytest.approx(exact, rel=2e-3)
    # Heavier than a normal of the same median: a case 3.5 times the typical offset is not rare.
    median_only = float(stats.norm.sf(0.2 / math.sqrt(0.0025 * 0.4 + 2.0 * 0.03**2)))
    assert got > 100 * median_only
    assert float(np.sum(between.weights)) == pytest.approx(1.0, rel=1e-12)


def test_fit_between_recovers_the_median_offset_and_holds_the_spread_within_its_bounds():
    """400 cases, offsets log-normal (median 4%, spread 0.3), trial part known: without the floor the
    median is recovered; with it the spread is put at 0.7 and the median refitted for it."""
    import numpy as np

    from dpbench.gate.judge import BETWEEN_SPREAD_FLOOR, fit_between

    rng = np.random.default_rng(3)
    tau = 0.04 * np.exp(rng.normal(0, 0.3, 400))
    within = np.full(400, 0.02**2)
    residuals = rng.normal(0, np.sqrt(within + 2 * tau**2))
    fitted = fit_between(list(residuals), list(within), [2.0] * 400)
    assert fitted.spread == BETWEEN_SPREAD_FLOOR == 0.7
    # Refitted for the wider spread, the median falls about as far as keeping the mean τ (3.4% here).
    assert fitted.sd == pytest.approx(0.04 * math.exp(-0.5 * (0.7**2 - 0.3**2)), rel=0.1)
    free = fit_between(list(residuals), list(within), [2.0] * 400, floor=0.0)
    assert free.sd == pytest.approx(0.04, rel=0.15) and free.spread < 0.6
    assert fit_between([0.1, -0.1], [0.01, 0.01], [2.0, 2.0]).sd == 0.0  # fewer than three: none


def test_the_simulations_null_override_swaps_the_two_tests_and_nothing_else():
    """validation.simulate_gate --null: the same +20% against no change without --aa (z = 4.30), and against +10%
    with --aa (z = 2.05); an unknown null is refused."""
    b = judge_family(_twenty({0: 1.2}), threshold=0.1, alpha=0.05, null="no change")[0][0]
    assert b.p_value == pytest.approx(stats.norm.sf(_z(1.2, cases=19)), rel=1e-3) and b.verdict == Verdict.REGRESSED
    items = _twenty({0: 1.2})
    base = {i.name: i.base for i in items}
    b = judge_family(items, threshold=0.1, alpha=0.05, aa=[dict(base)], aa_base=base, null="threshold")[0][0]
    assert b.p_value == pytest.approx(stats.norm.sf(_z(1.2, 1.1, cases=19)), rel=1e-3)
    assert b.verdict == Verdict.INCONCLUSIVE
    with pytest.raises(ValueError, match="null must be 'no change' or 'threshold', not 'zero'"):
        judge_family(items, threshold=0.1, alpha=0.05, null="zero")


def test_significant_but_below_the_threshold_is_unchanged_and_beyond_it_but_not_significant_inconclusive():
    # +8% with a tight spread: z = 9.1 against no change (significant) but below the 10% bar → unchanged.
    tight = (0.99, 1.0, 1.01)
    judged, _ = _judge_with_aa(_twenty({0: 1.08}, tight))
    assert _z(1.08, spread=tight) > 5 and judged[0].p_adjusted < 1e-5 and judged[0].verdict == Verdict.UNCHANGED
    # +12% with the wide spread: z = 2.67, p = 0.0038, 0.08 after Holm over 21 → inconclusive, and says so.
    judged, _ = _judge_with_aa(_twenty({0: 1.12}))
    b = judged[0]
    assert b.p_value == pytest.approx(stats.norm.sf(_z(1.12, cases=19)), rel=1e-3) and b.verdict == Verdict.INCONCLUSIVE
    assert b.note.startswith(
        "slower by +12.0% beyond the machine (the other benchmarks moved +0.0%, controls +0.0%) but not significant: "
    )
    # -20%: improved, with the same kind of note.
    judged, _ = _judge_with_aa(_twenty({0: 1 / 1.2}))
    assert judged[0].verdict == Verdict.IMPROVED and judged[0].p_value == pytest.approx(
        stats.norm.sf(_z(1.2, cases=19)), rel=1e-3
    )
    assert judged[0].note.startswith(
        "faster by -16.7% beyond the machine (the other benchmarks moved +0.0%, controls +0.0%), p = "
    )
    assert "against no change" in judged[0].note


def test_a_case_published_twice_is_judged_once():
    times = [0.010, 0.0105, 0.0098]
    items = [
        Item(name=n, base=pooled(times, key="same"), cand=pooled([t * 1.5 for t in times], key="same"))
        for n in ("suite_a::x", "suite_b::x")
    ]
    items += [Item(name=f"o{i}", base=pooled(times, key=f"o{i}"), cand=pooled(times, key=f"o{i}")) for i in range(3)]
    judged, family = judge_family(items, threshold=0.1, alpha=0.05)
    assert family.size == 4
    a, b = judged[0], judged[1]
    assert a.verdict == b.verdict == Verdict.REGRESSED and a.p_adjusted == b.p_adjusted
    assert b.note.endswith("the same case as suite_a::x: judged once")


def test_each_case_is_judged_beyond_the_other_cases_median_move_never_its_own():
    """Every case 8% slower with steady controls (within the threshold of them: the machine), case 0 40%
    on top of that: case 0 is judged beyond the others' median, exactly +40%; the rest are unchanged."""
    effects = {i: 1.08 for i in range(20)}
    effects[0] = 1.08 * 1.4
    judged, family = judge_family(_twenty(effects), threshold=0.1, alpha=0.05)
    assert family.shift_basis == "benchmarks" and family.broad_change == pytest.approx(1.08, rel=1e-12)
    b = judged[0]
    assert b.ratio == pytest.approx(1.512, rel=1e-12) and b.excess == pytest.approx(1.4, rel=1e-12)
    assert b.verdict == Verdict.REGRESSED
    assert b.note.startswith("slower by +40.0% beyond the machine (the other benchmarks moved +8.0%, controls +0.0%)")
    assert all(x.verdict == Verdict.UNCHANGED and x.excess == pytest.approx(1.0, rel=1e-12) for x in judged[1:])


def test_everything_moving_beyond_the_controls_is_judged_against_the_controls():
    """All 20 cases +40%, controls steady: (log 1.4 - log 1.1) / sd of the common move against the controls
    (the median's (pi/2) v / 20 plus the controls' own run offset, 2 x CONTROL_RUN_SD²) = 4.08 > 1.645: the
    code moved everything, each case is judged beyond the controls and regressed."""
    from dpbench.gate.judge import CONTROL_RUN_SD

    judged, family = judge_family(_twenty({i: 1.4 for i in range(20)}), threshold=0.1, alpha=0.05)
    v = statistics.variance([math.log(f) for f in (0.95, 1.0, 1.05)]) * 2 / 3
    z = (math.log(1.4) - math.log(1.1)) / math.sqrt(math.pi / 2 * v / 20 + 2 * CONTROL_RUN_SD**2)
    assert z == pytest.approx(4.08, abs=0.01)
    assert family.shift_basis == "controls" and family.broad_change == pytest.approx(1.4, rel=1e-12)
    assert all(x.verdict == Verdict.REGRESSED and x.excess == pytest.approx(1.4, rel=1e-12) for x in judged)
    assert judged[0].note.startswith("slower by +40.0% beyond the machine (controls moved +0.0%), p = ")
    # +12% everywhere, the controls +12% too: the machine; nothing is flagged (beyond the threshold by the raw
    # ratio, within it beyond the machine: inconclusive, "the machine changed").
    items = [
        Item(
            name=i.name,
            base=i.base,
            cand=pooled([t * 1.12 for t in i.cand.times], key=i.cand.case_key, controls=0.004 * 1.12),
        )
        for i in _twenty({})
    ]
    judged, family = judge_family(items, threshold=0.1, alpha=0.05)
    assert family.shift_basis == "benchmarks" and family.control_shift == pytest.approx(1.12, rel=1e-12)
    assert all(x.verdict == Verdict.INCONCLUSIVE and x.excess == pytest.approx(1.0, rel=1e-12) for x in judged)
    assert judged[0].note == (
        "slower by +12.0%, but the other benchmarks moved +12.0%, controls +12.0%: the machine "
        "changed, not (only) the code (+0.0% beyond it)"
    )


def test_too_few_cases_for_a_median_are_judged_against_the_controls_or_nothing():
    """With 4 cases (3 others, MIN_OTHERS = 4) the machine is the controls' median; without controls, nothing."""
    from dpbench.gate.judge import MIN_OTHERS

    assert MIN_OTHERS == 4
    items = _twenty({0: 1.5, 1: 1.5})[:4]
    judged, family = judge_family(items, threshold=0.1, alpha=0.05)
    assert family.shift_basis == "controls" and judged[0].excess == pytest.approx(1.5, rel=1e-12)
    bare = [
        Item(
            name=i.name,
            base=Pooled(unit="s/step", runs=i.base.runs, case_key=i.base.case_key),
            cand=Pooled(unit="s/step", runs=i.cand.runs, case_key=i.cand.case_key),
        )
        for i in items
    ]
    judged, family = judge_family(bare, threshold=0.1, alpha=0.05)
    assert family.shift_basis == "none" and judged[0].excess == pytest.approx(1.5, rel=1e-12)
    assert "the machine's move unknown" in judged[0].note
