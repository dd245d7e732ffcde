"""Judge every benchmark of a comparison together (see :mod:`dpbench.gate.judge` for the model).

:func:`judge_family` is the one function both ``dpbench compare`` and the simulation
(``scripts/simulate_gate.py``) call: the simulated error rates are those of this code.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from dpbench.gate.judge import (MIN_PAIRS, MIN_TRIALS, Evidence, Method, Pooled, between_run_variance, evidence,
                                fit_prior, holm, moderate)
from dpbench.gate.verdicts import BenchmarkComparison, Family, Verdict
from dpbench.results.units import fmt_ratio
from dpbench.stats import median

__all__ = ["Item", "choose_method", "judge_family"]


@dataclass(kw_only=True)
class Item:
    """One benchmark present on both sides."""

    name: str
    base: Pooled
    cand: Pooled


def choose_method(items: Sequence[Item], paired: bool) -> Method:
    if paired:
        return Method.PAIRED
    several = any(len(run) >= 2 for item in items for side in (item.base, item.cand) for run in side.runs)
    return Method.TRIALS if several else Method.RUNS


def _incomparable(item: Item) -> str | None:
    b, c = item.base, item.cand
    if b.incomparable:
        return f"baseline: {b.incomparable}"
    if c.incomparable:
        return f"candidate: {c.incomparable}"
    if b.unit != c.unit:
        return f"baseline measures {b.unit}, candidate {c.unit}"
    if not b.times or not c.times:
        return "no trial times"
    return None


def _too_few(item: Item, method: Method) -> str | None:
    nb, nc = len(item.base.times), len(item.cand.times)
    if method == Method.PAIRED:
        pairs = sum(min(len(x), len(y)) for x, y in zip(item.base.runs, item.cand.runs))
        if len(item.base.runs) != len(item.cand.runs) or pairs < MIN_PAIRS:
            return (f"needs ≥ {MIN_PAIRS} pairs of runs (found {len(item.base.runs)} baseline and "
                    f"{len(item.cand.runs)} candidate runs of this benchmark)")
        return None
    if min(nb, nc) < MIN_TRIALS:
        return f"needs ≥ {MIN_TRIALS} trials a side (found {nb} vs {nc}); the rounds of one process are no sample"
    return None


def _control_log_ratio(item: Item) -> float:
    b, c = item.base.controls, item.cand.controls
    return math.log(median(c) / median(b)) if b and c else math.nan


def _t_p(excess: float, bound: float, se: float, df: float, upper: bool) -> float:
    """One-sided p of Student's t (scipy.special.stdtr: the t CDF, ~100× faster than scipy.stats.t)."""
    from scipy.special import stdtr

    if not se > 0:
        return math.nan
    t = (excess - bound) / se
    return float(stdtr(df, -t) if upper else stdtr(df, t))


def _aa_between(prior, base: dict[str, Pooled], aa: Sequence[dict[str, Pooled]]) -> tuple[float, dict[str, float]]:
    """tau² from baseline vs each --aa run (robust, over benchmarks), and each benchmark's own."""
    pooled, own = [], {}
    for other in aa:
        names = [n for n in base if n in other and len(base[n].times) >= 1 and len(other[n].times) >= 1]
        evs = {n: evidence(base[n], other[n], Method.TRIALS) for n in names}
        within = {n: (moderate(e.s2, e.df, prior)[0] if e.df or prior.df else 0.0) * e.a for n, e in evs.items()}
        within = {n: (v if math.isfinite(v) else 0.0) for n, v in within.items()}
        centre = median([e.diff for e in evs.values()])
        pooled.append(between_run_variance([e.diff - centre for e in evs.values()], list(within.values()),
                                           [e.b for e in evs.values()]))
        for n, e in evs.items():
            own.setdefault(n, []).append(max(0.0, (e.diff - centre) ** 2 - within[n]) / e.b)
    return (max(pooled) if pooled else math.nan), {n: statistics.fmean(v) for n, v in own.items()}


def judge_family(items: Sequence[Item], *, threshold: float, alpha: float, paired: bool = False,
                 aa: Sequence[dict[str, Pooled]] = (), aa_base: dict[str, Pooled] | None = None,
                 ) -> tuple[list[BenchmarkComparison], Family]:
    """The verdict on every item; benchmarks sharing a ``case_key`` are tested once."""
    method = choose_method(items, paired)
    out: dict[str, BenchmarkComparison] = {}
    testable: dict[tuple, Item] = {}  # one representative per case
    duplicates: dict[str, list[str]] = {}
    for item in items:
        result = BenchmarkComparison(name=item.name, verdict=Verdict.UNCHANGED, unit=item.cand.unit,
                                     case_key=item.cand.case_key or item.base.case_key, threshold=threshold,
                                     baseline_trials=len(item.base.times), candidate_trials=len(item.cand.times))
        out[item.name] = result
        reason = _incomparable(item)
        if reason:
            result.verdict, result.note = Verdict.INCOMPARABLE, reason
            continue
        result.baseline_s, result.candidate_s = median(item.base.times), median(item.cand.times)
        result.ratio = result.candidate_s / result.baseline_s
        control = _control_log_ratio(item)
        result.control_ratio = math.exp(control) if not math.isnan(control) else math.nan
        # One measurement published by two suites (same case_key, the same trials) is one test.
        key = (result.case_key or item.name, tuple(item.base.times), tuple(item.cand.times))
        if key in testable:
            duplicates.setdefault(testable[key].name, []).append(item.name)
            continue
        testable[key] = item
    evs: dict[str, Evidence] = {}
    for item in testable.values():
        few = _too_few(item, method)
        if few:
            out[item.name].verdict, out[item.name].note = Verdict.INCONCLUSIVE, few
        else:
            evs[item.name] = evidence(item.base, item.cand, method)
    family = _family(method, evs, [testable[k] for k in testable], aa, aa_base or {})
    _test(out, evs, family, threshold=threshold, alpha=alpha, method=method)
    for first, others in duplicates.items():
        for name in others:
            copy = out[first]
            out[name].verdict, out[name].p_value, out[name].p_adjusted = copy.verdict, copy.p_value, copy.p_adjusted
            out[name].excess, out[name].test, out[name].pairs = copy.excess, copy.test, copy.pairs
            out[name].note = "; ".join(filter(None, [copy.note, f"the same case as {first}: judged once"]))
    return list(out.values()), family.public


@dataclass(kw_only=True)
class _FamilyState:
    public: Family
    prior: object
    tau2: float
    own_tau2: dict[str, float]
    up: float  # log shift a slowdown is excused by (the controls' median, when it went up)
    down: float
    # Test against no change (True) or against the threshold (False): see _null_bounds.
    against_no_change: bool = False


def _family(method: Method, evs: dict[str, Evidence], items: list[Item], aa, aa_base) -> _FamilyState:
    prior = fit_prior([e.s2 for e in evs.values()], [e.df for e in evs.values()])
    tau2, tau2_aa, own = 0.0, math.nan, {}
    if method == Method.TRIALS and evs:
        within = [moderate(e.s2, e.df, prior)[0] * e.a for e in evs.values()]
        within = [v if math.isfinite(v) else 0.0 for v in within]
        centre = median([e.diff for e in evs.values()])
        tau2 = between_run_variance([e.diff - centre for e in evs.values()], within, [e.b for e in evs.values()])
        if aa:
            tau2_aa, own = _aa_between(prior, aa_base, aa)
            tau2 = max(tau2, tau2_aa)
    controls = [c for c in (_control_log_ratio(i) for i in items) if not math.isnan(c)]
    shift = median(controls) if controls else 0.0
    public = Family(method=method.value, size=len(evs), prior_df=prior.df,
                    prior_sd=math.expm1(math.sqrt(prior.s2)) if prior.s2 > 0 else math.nan,
                    between_run_sd=math.expm1(math.sqrt(tau2)),
                    between_run_sd_aa=math.expm1(math.sqrt(tau2_aa)) if tau2_aa >= 0 else math.nan,
                    control_shift=math.exp(shift) if controls else math.nan,
                    median_shift=math.exp(median([e.diff for e in evs.values()])) if evs else math.nan)
    return _FamilyState(public=public, prior=prior, tau2=tau2, own_tau2=own, up=max(shift, 0.0), down=min(shift, 0.0),
                        against_no_change=method == Method.TRIALS and math.isfinite(tau2_aa))


def _null_bounds(fam: _FamilyState, threshold: float) -> tuple[float, float]:
    """The log change the one-sided tests are against: (slower, faster).

    Against no change (the threshold then a separate effect-size bar, as in pyperf and asv) only where
    ``--aa`` runs measured each case's between-run offset. Without them one comparison cannot tell
    which cases a fresh session moves more than the rest, and simulate_gate.py measured the no-change
    test failing 11% (offsets alike) to 32% (offsets differing by case) of A/A jobs of 70 cases, and
    6% of paired ones; testing against the threshold itself keeps those at 0.3% / 5% / 0.8% (README),
    at the price of power."""
    if fam.against_no_change:
        return 0.0, 0.0
    return math.log1p(threshold), math.log1p(-threshold) if threshold < 1 else -math.inf


def _test(out: dict[str, BenchmarkComparison], evs: dict[str, Evidence], fam: _FamilyState, *, threshold: float,
          alpha: float, method: Method) -> None:
    up_bound, down_bound = _null_bounds(fam, threshold)
    p_up, p_down = {}, {}
    for name, e in evs.items():
        s2, df = moderate(e.s2, e.df, fam.prior)
        tau2 = max(fam.tau2, fam.own_tau2.get(name, 0.0))
        within = s2 * e.a
        var = within + tau2 * e.b
        if not (var > 0 and df > 0):
            out[name].verdict = Verdict.INCONCLUSIVE
            out[name].note = f"no trial spread to test against: needs ≥ {MIN_TRIALS} trials a side in some benchmark"
            continue
        df_eff = var * var / (within * within / df) if within > 0 else df  # Satterthwaite (tau² taken as known)
        se = math.sqrt(var)
        p_up[name] = _t_p(e.diff - fam.up, up_bound, se, df_eff, upper=True)
        p_down[name] = _t_p(e.diff - fam.down, down_bound, se, df_eff, upper=False)
        out[name].test = {Method.PAIRED: "moderated t on paired log ratios", Method.RUNS: "moderated t on log trials",
                          Method.TRIALS: "moderated t on log trials + between-run"}[method]
        out[name].pairs = e.pairs
    names = list(p_up)
    adj_up = dict(zip(names, holm([p_up[n] for n in names])))
    adj_down = dict(zip(names, holm([p_down[n] for n in names])))
    for name in names:
        _verdict(out[name], p_up[name], adj_up[name], p_down[name], adj_down[name], fam, threshold=threshold,
                 alpha=alpha, family_size=len(names))


def _verdict(b: BenchmarkComparison, p_up: float, adj_up: float, p_down: float, adj_down: float, fam: _FamilyState,
             *, threshold: float, alpha: float, family_size: int) -> None:
    slower_raw = b.ratio > 1 + threshold
    faster_raw = b.ratio < 1 - threshold
    excess_up, excess_down = b.ratio / math.exp(fam.up), b.ratio / math.exp(fam.down)
    control = fmt_ratio(fam.public.control_shift)
    if b.ratio >= 1:
        b.excess, b.p_value, b.p_adjusted = excess_up, p_up, adj_up
    else:
        b.excess, b.p_value, b.p_adjusted = excess_down, p_down, adj_down
    notes = []
    beyond = f"beyond the machine (controls moved {control})"
    null_up, null_down = ("no change", "no change") if fam.against_no_change else \
        (fmt_ratio(1 + threshold), fmt_ratio(1 - threshold))
    if excess_up > 1 + threshold:
        b.verdict = Verdict.REGRESSED if adj_up < alpha else Verdict.INCONCLUSIVE
        significance = f"p = {p_up:.2g} against {null_up}, {adj_up:.2g} after Holm over {family_size} cases"
        notes.append(f"slower by {fmt_ratio(excess_up)} {beyond}, {significance}" if b.verdict == Verdict.REGRESSED
                     else f"slower by {fmt_ratio(excess_up)} {beyond} but not significant: {significance}, "
                          f"with {_sample(b)}")
    elif slower_raw:
        b.verdict = Verdict.INCONCLUSIVE
        notes.append(f"slower by {fmt_ratio(b.ratio)}, but the controls moved {control}: the machine changed, "
                     f"not (only) the code ({fmt_ratio(excess_up)} beyond it)")
    elif excess_down < 1 - threshold:
        b.verdict = Verdict.IMPROVED if adj_down < alpha else Verdict.UNCHANGED
        significance = f"p = {p_down:.2g} against {null_down}, {adj_down:.2g} after Holm over {family_size} cases"
        notes.append(f"faster by {fmt_ratio(excess_down)} {beyond}, {significance}" if b.verdict == Verdict.IMPROVED
                     else f"faster by {fmt_ratio(excess_down)} {beyond} but not significant: {significance}")
    elif faster_raw:
        b.verdict = Verdict.INCONCLUSIVE  # an "improvement" the machine made is no claim either
        notes.append(f"faster by {fmt_ratio(b.ratio)}, but the controls moved {control}: the machine changed")
    else:
        b.verdict = Verdict.UNCHANGED
    if b.pairs:
        notes.append(f"{b.pairs} base/head pairs in schedule order")
    b.note = "; ".join(n for n in notes if n)


def _sample(b: BenchmarkComparison) -> str:
    if b.pairs:
        return f"{b.pairs} pairs"
    return f"{b.baseline_trials} vs {b.candidate_trials} trials"
