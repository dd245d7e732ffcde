"""Judge every benchmark of a comparison together (see :mod:`dpbench.gate.judge` for the model).

:func:`judge_family` is the one function both ``dpbench compare`` and the simulation
(``python -m validation.simulate_gate``) call: the simulated error rates are those of this code.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from dpbench.gate.broad import broad_judgement, broad_pvalues
from dpbench.gate.judge import (
    MIN_OTHERS,
    MIN_PAIRS,
    MIN_TRIALS,
    Evidence,
    Method,
    Pooled,
    Posterior,
    Prior,
    between_distribution,
    fit_prior,
    holm,
    posterior,
    tail_p,
)
from dpbench.gate.machine import MachineMove, aa_between, control_move, machine_shift, reference_cases
from dpbench.gate.verdicts import BenchmarkComparison, Family, Verdict
from dpbench.results.units import fmt_ratio
from dpbench.stats import Threshold, median

__all__ = ["Item", "choose_method", "evidence", "judge_family"]

BROAD_TEST = "the broad tests"  # their key among the cases' p-values in the Holm families (never a case's name)


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
            return (
                f"needs ≥ {MIN_PAIRS} pairs of runs (found {len(item.base.runs)} baseline and "
                f"{len(item.cand.runs)} candidate runs of this benchmark)"
            )
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


def judge_family(
    items: Sequence[Item],
    *,
    threshold: float,
    alpha: float,
    paired: bool = False,
    aa: Sequence[dict[str, Pooled]] = (),
    aa_base: dict[str, Pooled] | None = None,
    null: str | None = None,
    contention: str = "",
) -> tuple[list[BenchmarkComparison], Family]:
    """The verdict on every item; benchmarks sharing a ``case_key`` are tested once.

    ``null`` overrides what the tests are against (``"no change"`` or ``"threshold"``; None: the gate's
    rule, :func:`_null_bounds`) — for ``python -m validation.simulate_gate --null``, which weighs the rule the
    gate does not use; ``dpbench compare`` never passes it. ``contention``: what other processes did
    during the trials (:func:`dpbench.gate.sides.contention_note`; '' for nothing), which leaves
    a broad verdict unsettled."""
    if null not in (None, "no change", "threshold"):
        raise ValueError(f"null must be 'no change' or 'threshold', not {null!r}")
    method = choose_method(items, paired)
    out: dict[str, BenchmarkComparison] = {}
    testable: dict[tuple, Item] = {}  # one representative per case
    duplicates: dict[str, list[str]] = {}
    for item in items:
        result = BenchmarkComparison(
            name=item.name,
            verdict=Verdict.UNCHANGED,
            unit=item.cand.unit,
            case_key=item.cand.case_key or item.base.case_key,
            threshold=threshold,
            baseline_trials=len(item.base.times),
            candidate_trials=len(item.cand.times),
            runs=min(len(item.base.runs), len(item.cand.runs)),
        )
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
    family = _family(method, evs, [testable[k] for k in testable], aa, aa_base or {}, threshold=threshold, alpha=alpha)
    if null is not None:
        family.against_no_change = null == "no change"
    _test(out, evs, family, threshold=threshold, alpha=alpha, method=method)
    broad, note = broad_judgement(
        [out[n] for n in evs],
        control=family.control,
        gap=family.move.gap,
        slower_adjusted=family.slower_adjusted,
        faster_adjusted=family.faster_adjusted,
        threshold=threshold,
        alpha=alpha,
        interleaved=method == Method.PAIRED,
        contention=contention,
    )
    family.public.broad, family.public.broad_note = broad.value, note
    for first, others in duplicates.items():
        for name in others:
            copy = out[first]
            out[name].verdict, out[name].p_value, out[name].p_adjusted = copy.verdict, copy.p_value, copy.p_adjusted
            out[name].excess, out[name].test, out[name].pairs = copy.excess, copy.test, copy.pairs
            out[name].trial_var, out[name].fixed_var = copy.trial_var, copy.fixed_var
            out[name].session_var, out[name].runs = copy.session_var, copy.runs
            out[name].note = "; ".join(filter(None, [copy.note, f"the same case as {first}: judged once"]))
    return list(out.values()), family.public


@dataclass(kw_only=True)
class _FamilyState:
    public: Family
    posts: dict[str, Posterior | None]  # per case: its trial variance's posterior (None: no prior)
    between: dict[str, Posterior]  # per case (trials method): its between-run variance τ², as a distribution
    move: MachineMove  # per case the log shift of the machine it is judged beyond, and the broad test
    control: float  # the controls' median log move (NaN without controls)
    # The broad tests' p-values after Holm (dpbench.gate.broad.broad_pvalues; 1: not tested).
    slower_adjusted: float = 1.0
    faster_adjusted: float = 1.0
    # Test against no change (True) or against the threshold (False): see _null_bounds.
    against_no_change: bool = True

    @property
    def shift(self) -> dict[str, float]:
        return self.move.shift

    @property
    def shift_var(self) -> float:
        return self.move.shift_var if math.isfinite(self.move.shift_var) else 0.0


def _spread(trial_var: float, between: Posterior | None, b: float) -> Posterior:
    """A case's variance of its log ratio as a distribution: its trial part plus its between-run offset's."""
    import numpy as np

    trial = trial_var if math.isfinite(trial_var) else 0.0
    if between is None or b == 0:
        return Posterior(variances=np.array([trial]), weights=np.array([1.0]))
    return Posterior(variances=trial + between.variances * b, weights=between.weights)


def _family(
    method: Method, evs: dict[str, Evidence], items: list[Item], aa, aa_base, *, threshold: float, alpha: float
) -> _FamilyState:
    prior = fit_prior([e.s2 for e in evs.values()], [e.df for e in evs.values()], [e.level for e in evs.values()])
    aa_fit = Prior(sd=math.nan, spread=math.nan)
    between: dict[str, Posterior] = {}
    posts = {n: posterior(e.s2, e.df, prior, e.level) for n, e in evs.items()}  # None: no prior
    # Each case's expected trial variance of its log difference (its own estimate where there is no prior).
    trial_var = {n: (posts[n].mean if posts[n] is not None else e.s2) * e.a for n, e in evs.items()}
    tested = {i.name for i in items if i.name in evs}
    controls = [c for c in (_control_log_ratio(i) for i in items if i.name in tested) if not math.isnan(c)]
    runs = min((len(i.base.runs) for i in items if i.name in tested), default=1)
    control, sampling_c, own_c = control_move(controls, runs)
    reference = reference_cases(
        evs,
        trial_var,
        control=control,
        control_var=sampling_c + own_c,
        fit_between_runs=method == Method.TRIALS,
        threshold=threshold,
    )
    own = reference.between  # the comparison's own fit of the between-run offsets, on the reference cases
    if method == Method.TRIALS and evs:
        shared = between_distribution(own)
        between = {n: shared for n in evs}
        if aa:
            aa_fit, measured = aa_between(prior, aa_base, aa)
            between.update({n: post for n, post in measured.items() if n in evs and post is not None})
    spreads = {n: _spread(trial_var[n], between.get(n), e.b) for n, e in evs.items()}
    if method == Method.PAIRED:
        # Run i of one side ran beside run i of the other (dpbench ab's ABBA order): both sides shared
        # the machine's every state, so no machine move is taken out. A move of everything, the
        # controls too, is then the sides' own doing (another torch, BLAS, allocator), not the machine.
        move = MachineMove(shift={n: 0.0 for n in evs}, shift_var=0.0, basis="interleaved")
    else:
        move = machine_shift(evs, spreads, reference, controls, threshold=threshold, alpha=alpha, runs=runs)
    public = Family(
        method=method.value,
        size=len(evs),
        prior_spread=prior.spread,
        prior_sd=math.expm1(prior.sd),
        prior_slope=prior.slope,
        between_run_sd=math.expm1(own.sd),
        between_run_spread=own.spread,
        between_run_sd_aa=math.expm1(aa_fit.sd),
        between_run_spread_aa=aa_fit.spread,
        control_shift=math.exp(median(controls)) if controls else math.nan,
        median_shift=math.exp(median([e.diff for e in evs.values()])) if evs else math.nan,
        shift_basis=move.basis,
        broad_change=math.exp(move.gap) if math.isfinite(move.gap) else math.nan,
        reference_size=len(reference.names),
        reference_anchored=reference.anchored,
        broad_gap=math.exp(move.gap) if math.isfinite(move.gap) else math.nan,
        broad_p=move.gap_p,
    )
    return _FamilyState(public=public, posts=posts, between=between, move=move, control=control)


def _null_bounds(fam: _FamilyState, threshold: float) -> tuple[float, float]:
    """The log change the one-sided tests are against: (slower, faster).

    Against no change (the threshold then a separate effect-size bar, as in pyperf and asv): the test's
    variance carries how far a fresh session moves each case (``dpbench ab``'s pairs and one-trial runs
    span sessions; one run of several trials a side carries the between-run offset fitted from the
    comparison, log-normal across cases with at least BETWEEN_SPREAD_FLOOR of spread, or measured per
    case by ``--aa`` runs). Against the threshold only where ``judge_family(null="threshold")`` asks —
    the gate's former rule, kept for comparison (``python -m validation.simulate_gate --null threshold`` weighs it;
    docs/calibration.md#gate-rule-history)."""
    if fam.against_no_change:
        return 0.0, 0.0
    return Threshold(threshold).log_up, Threshold(threshold).log_down


def _test(
    out: dict[str, BenchmarkComparison],
    evs: dict[str, Evidence],
    fam: _FamilyState,
    *,
    threshold: float,
    alpha: float,
    method: Method,
) -> None:
    up_bound, down_bound = _null_bounds(fam, threshold)
    p_up, p_down = {}, {}
    for name, e in evs.items():
        between = fam.between.get(name)
        extra = fam.shift_var
        up, down = max(fam.shift[name], 0.0), min(fam.shift[name], 0.0)
        post = fam.posts[name]
        if post is not None:
            p_up[name] = tail_p(e.diff - up, up_bound, e.a, extra, post, upper=True, between=between, b=e.b)
            p_down[name] = tail_p(e.diff - down, down_bound, e.a, extra, post, upper=False, between=between, b=e.b)
        else:  # fewer than three benchmarks with a spread: the case's own variance, Student's t
            within = e.s2 * e.a if math.isfinite(e.s2) else math.nan
            var = within + extra + (between.mean * e.b if between is not None else 0.0)
            if not (var > 0 and e.df > 0):
                out[name].verdict = Verdict.INCONCLUSIVE
                out[name].note = f"no trial spread to test against: needs ≥ {MIN_TRIALS} trials a side"
                continue
            df_eff = var * var / (within * within / e.df) if within > 0 else e.df  # Satterthwaite (extra known)
            p_up[name] = _t_p(e.diff - up, up_bound, math.sqrt(var), df_eff, upper=True)
            p_down[name] = _t_p(e.diff - down, down_bound, math.sqrt(var), df_eff, upper=False)
        out[name].test = {
            Method.PAIRED: "moderated test on paired log ratios",
            Method.RUNS: "moderated test on log trials",
            Method.TRIALS: "moderated test on log trials + between-run",
        }[method]
        out[name].pairs = e.pairs
        out[name].trial_var = post.mean if post is not None else e.s2
        out[name].session_var = between.mean * e.b if between is not None else 0.0
        out[name].fixed_var = extra + out[name].session_var
    names = list(p_up)
    # The broad tests (everything slower, everything faster: dpbench.gate.broad) are two more hypotheses of
    # the job, in the same Holm families as the cases', so the job's false-alarm rate stays alpha.
    broad = BROAD_TEST if names and math.isfinite(fam.control) and len(names) > MIN_OTHERS else None
    if broad:
        shift = fam.shift
        slower, faster = broad_pvalues(
            [
                (
                    p_up[n],
                    p_down[n],
                    out[n].ratio / math.exp(max(shift[n], 0.0)),
                    out[n].ratio / math.exp(min(shift[n], 0.0)),
                )
                for n in names
            ],
            gap=fam.move.gap,
            gap_p=fam.move.gap_p,
            threshold=threshold,
        )
        p_up, p_down = {**p_up, broad: slower}, {**p_down, broad: faster}
    adj_up = dict(zip(p_up, holm(list(p_up.values()))))
    adj_down = dict(zip(p_down, holm(list(p_down.values()))))
    if broad:
        fam.public.broad_p = min(p_up[broad], p_down[broad])
        fam.slower_adjusted, fam.faster_adjusted = adj_up[broad], adj_down[broad]
        fam.public.broad_p_adjusted = min(adj_up[broad], adj_down[broad])
    for name in names:
        _verdict(
            out[name],
            p_up[name],
            adj_up[name],
            p_down[name],
            adj_down[name],
            fam,
            threshold=threshold,
            alpha=alpha,
            family_size=f"{len(names)} cases" + (" and the broad tests" if broad else ""),
        )


def _verdict(
    b: BenchmarkComparison,
    p_up: float,
    adj_up: float,
    p_down: float,
    adj_down: float,
    fam: _FamilyState,
    *,
    threshold: float,
    alpha: float,
    family_size: str,
) -> None:
    slower_raw = Threshold(threshold).slower(b.ratio)
    faster_raw = Threshold(threshold).faster(b.ratio)
    shift = fam.shift[b.name]
    excess_up, excess_down = b.ratio / math.exp(max(shift, 0.0)), b.ratio / math.exp(min(shift, 0.0))
    control = _machine_words(fam, shift)
    if b.ratio >= 1:
        b.excess, b.p_value, b.p_adjusted = excess_up, p_up, adj_up
    else:
        b.excess, b.p_value, b.p_adjusted = excess_down, p_down, adj_down
    notes = []
    beyond = f"beyond the machine ({control})"
    null_up, null_down = (
        ("no change", "no change") if fam.against_no_change else (fmt_ratio(1 + threshold), fmt_ratio(1 - threshold))
    )
    if Threshold(threshold).slower(excess_up):
        b.verdict = Verdict.REGRESSED if adj_up < alpha else Verdict.INCONCLUSIVE
        significance = f"p = {p_up:.2g} against {null_up}, {adj_up:.2g} after Holm over {family_size}"
        notes.append(
            f"slower by {fmt_ratio(excess_up)} {beyond}, {significance}"
            if b.verdict == Verdict.REGRESSED
            else f"slower by {fmt_ratio(excess_up)} {beyond} but not significant: {significance}, with {_sample(b)}"
        )
    elif slower_raw:
        b.verdict = Verdict.INCONCLUSIVE
        notes.append(
            f"slower by {fmt_ratio(b.ratio)}, but {control}: the machine changed, "
            f"not (only) the code ({fmt_ratio(excess_up)} beyond it)"
        )
    elif Threshold(threshold).faster(excess_down):
        b.verdict = Verdict.IMPROVED if adj_down < alpha else Verdict.UNCHANGED
        significance = f"p = {p_down:.2g} against {null_down}, {adj_down:.2g} after Holm over {family_size}"
        notes.append(
            f"faster by {fmt_ratio(excess_down)} {beyond}, {significance}"
            if b.verdict == Verdict.IMPROVED
            else f"faster by {fmt_ratio(excess_down)} {beyond} but not significant: {significance}"
        )
    elif faster_raw:
        b.verdict = Verdict.INCONCLUSIVE  # an "improvement" the machine made is no claim either
        notes.append(f"faster by {fmt_ratio(b.ratio)}, but {control}: the machine changed")
    else:
        b.verdict = Verdict.UNCHANGED
    if b.pairs:
        notes.append(f"{b.pairs} base/head pairs in schedule order")
    b.note = "; ".join(n for n in notes if n)


def _machine_words(fam: _FamilyState, shift: float) -> str:
    """What the machine did, as the verdict names it: the estimate it was judged by, and the controls."""
    f = fam.public
    controls = f"controls {fmt_ratio(f.control_shift)}" if math.isfinite(f.control_shift) else "no controls"
    if f.shift_basis == "benchmarks":
        return f"the other benchmarks moved {fmt_ratio(math.exp(shift))}, {controls}"
    if f.shift_basis == "controls":
        return f"controls moved {fmt_ratio(f.control_shift)}"
    if f.shift_basis == "interleaved":
        return f"the sides ran interleaved on one machine, {controls}"
    return "the machine's move unknown: too few benchmarks and no controls"


def _sample(b: BenchmarkComparison) -> str:
    if b.pairs:
        return f"{b.pairs} pairs"
    return f"{b.baseline_trials} vs {b.candidate_trials} trials"


# One benchmark's evidence: its two sides' trial times turned into what the family's test needs.
#
# :func:`evidence` takes a benchmark's baseline and candidate (:class:`~dpbench.gate.judge.Pooled`)
# and, under the comparison's design (:class:`~dpbench.gate.judge.Method`), returns its
# :class:`~dpbench.gate.judge.Evidence`: the log difference, the benchmark's own variance estimate
# with its degrees of freedom, and how much of the trial and between-run variances the difference
# carries (see :mod:`dpbench.gate.judge` for the model). Nothing here looks at the other benchmarks:
# :func:`dpbench.gate.family.judge_family` weighs every benchmark's evidence together afterwards.
def _logs(run: Sequence[float]) -> list[float]:
    return [math.log(t) for t in run]


def _mean_log(side: Pooled) -> float:
    return statistics.fmean(_logs(side.times))


def _share(side: Pooled) -> float:
    """Σ n_r² / N²: how much of one run's offset a side's mean carries (1 for one run)."""
    counts = [len(run) for run in side.runs if run]
    return sum(n * n for n in counts) / sum(counts) ** 2


def _within(sides: Sequence[Pooled]) -> tuple[float, int]:
    """Pooled variance of log trials around their own run's mean, and its degrees of freedom."""
    ss, df = 0.0, 0
    for side in sides:
        for run in side.runs:
            if len(run) >= 2:
                logs = _logs(run)
                mean = statistics.fmean(logs)
                ss += sum((v - mean) ** 2 for v in logs)
                df += len(logs) - 1
    return (ss / df if df else math.nan), df


def _across(sides: Sequence[Pooled]) -> tuple[float, int]:
    """Pooled variance of log trials around their side's mean (every trial its own run)."""
    ss, df = 0.0, 0
    for side in sides:
        logs = _logs(side.times)
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            ss += sum((v - mean) ** 2 for v in logs)
            df += len(logs) - 1
    return (ss / df if df else math.nan), df


def evidence(base: Pooled, cand: Pooled, method: Method) -> Evidence:
    """The log difference and its variance terms for one benchmark under ``method``."""
    if method == Method.PAIRED:
        ratios = [math.log(c) - math.log(b) for b_run, c_run in zip(base.runs, cand.runs) for b, c in zip(b_run, c_run)]
        s2 = statistics.variance(ratios) if len(ratios) >= 2 else math.nan
        return Evidence(
            diff=statistics.fmean(ratios),
            s2=s2,
            df=max(0, len(ratios) - 1),
            a=1 / len(ratios),
            b=0.0,
            pairs=len(ratios),
            level=_mean_log(base),
        )
    nb, nc = len(base.times), len(cand.times)
    diff = _mean_log(cand) - _mean_log(base)
    if method == Method.RUNS:
        s2, df = _across((base, cand))
        return Evidence(diff=diff, s2=s2, df=df, a=1 / nb + 1 / nc, b=0.0, level=_mean_log(base))
    s2, df = _within((base, cand))
    return Evidence(diff=diff, s2=s2, df=df, a=1 / nb + 1 / nc, b=_share(base) + _share(cand), level=_mean_log(base))
