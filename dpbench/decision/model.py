"""The decision model: per question, the leader by the one estimator and a claim about every other
configuration. Every view — the terminal, the HTML decision blocks, ``--json``, ``dpbench run`` —
renders an :class:`Answer`; none ranks or tests on its own.

A *question* is a workload at one training recipe (optimizer, precision, global batch): the user's
recipe is fixed, the strategy is the choice, so configurations are only ever ranked against others
trained the same way. Its configurations are strategies with their options at a world size.

The estimator is the paired ratio of throughputs (:func:`dpbench.stats.paired_ratio`), the one the
heatmaps and the gate use. The leader is the configuration with the highest ratio over the
question's reference (``single`` where measured, else the configuration with the most trials); a
configuration that a claim finds *faster* than that leader takes its place, so the leader is never
beaten by anything the view claims. Each other configuration is then judged against the leader
(:mod:`dpbench.decision.claims`), and the answer is:

- ``fastest``: every other configuration is slower than the leader;
- ``level``: the leader and some others are level (within the margin), the rest slower;
- ``unsettled``: some comparison with the leader is neither, and the answer says what would settle
  it. A comparison is never claimed where either side's trials were *contended*: other processes
  took a large share of the machine while they ran (``busy``), or they spread further than a quiet
  machine's noise allows (:data:`~dpbench.decision.contention.SPREAD_LIMIT`: contention the sampler
  missed). Such a comparison is unsettled with that reason — against the leader and against
  ``single`` alike, wherever the configuration ranks — and the answer states the reason;
- ``alone``: one configuration, nothing to rank.

Beside the ranking, never in it: where the configurations read the GPUs' energy counter, the one with
the least energy per sample (``frugal``) when it is not the leader, with the leader's energy per
sample over its own as a claim on the same paired ratio (:class:`Frugal`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from dpbench.decision.claims import (
    CLAIM_LEVEL,
    LEVEL_MARGIN,
    Claim,
    claim_of,
    comparison_level,
    family_size,
    trials_to_settle,
)
from dpbench.decision.contention import SPREAD_LIMIT, contention_text, is_busy, spread_text, trial_spread
from dpbench.schema import BASELINE_STRATEGY, DEFAULT_OPTIMIZER, DEFAULT_PRECISION
from dpbench.stats import PairedRatio, median, median_rate, paired_ratio

__all__ = [
    "Answer",
    "ConfigComparison",
    "Decision",
    "Entry",
    "Frugal",
    "AnswerOutcome",
    "Question",
    "SCOPE",
    "Standing",
    "answer_question",
]


SCOPE = "session"
"""What every claim is about (a saved identifier: the JSON's ``scope``): the trials of one session.
Pairing trial i with trial i cancels what the machine did between passes, not the offset a fresh
session gives each configuration (up to 30% on the 2-core development VM: docs/decision.md#sessions);
an interval that carried it would need several sessions to fit and could never reach the level
margin, so a claim says it holds for this session instead."""


class AnswerOutcome(str, Enum):
    """What a question's answer is (a saved identifier)."""

    FASTEST = "fastest"
    LEVEL = "level"
    UNSETTLED = "unsettled"
    ALONE = "alone"


@dataclass(frozen=True, kw_only=True)
class Question:
    """A workload at one recipe: the configurations measured under it are comparable."""

    workload: str
    """The workload as the run names it (a registered name or the user's spec)."""
    optimizer: str = ""
    """The optimizer every configuration of the question trains with ('' where not recorded)."""
    precision: str = ""
    """The training precision ('' where not recorded)."""
    global_batch: float = math.nan
    """Samples per step, summed over replicas."""

    @classmethod
    def of(cls, *, workload: str, global_batch: Any, options: Mapping[str, Any]) -> Question:
        """The question a configuration answers — built here for a saved run's rows
        (:func:`dpbench.decision.questions.question_of`) and for the cases a session is measuring
        (:mod:`dpbench.measure.settle`) alike: ``workload`` at the optimizer and precision
        ``options`` name (where they name none, the strategies' defaults,
        :data:`dpbench.schema.DEFAULT_OPTIMIZER` and ``DEFAULT_PRECISION``) and ``global_batch``
        (NaN where it is not a number)."""
        return cls(
            workload=workload,
            optimizer=str(options.get("optimizer", DEFAULT_OPTIMIZER)),
            precision=str(options.get("precision", DEFAULT_PRECISION)),
            global_batch=(
                float(global_batch)
                if isinstance(global_batch, (int, float)) and global_batch == global_batch
                else math.nan
            ),
        )

    @property
    def recipe(self) -> str:
        """``sgd · fp32 · global batch 64``: what every configuration of the question shares."""
        parts = [p for p in (self.optimizer, self.precision) if p]
        if self.global_batch == self.global_batch:
            parts.append(f"global batch {self.global_batch:.0f}")
        return " · ".join(parts)

    @property
    def title(self) -> str:
        return f"{self.workload} ({self.recipe})" if self.recipe else self.workload


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One configuration's measurements, as the model reads them."""

    name: str
    """The configuration (``ddp(bucket_cap_mb=1.0) w2``), unique in its question."""
    strategy: str
    world_size: int | None = None
    throughputs: tuple[float, ...] = ()
    """Samples/s per trial slot; NaN where a disturbed trial is left out (slot i pairs with slot i)."""
    busy_share: float = math.nan
    """The median share of all cores other processes used during its trials (NaN: not sampled)."""
    departs: str = ""
    """Why it computes something other than ``single`` at the recipe ('' when it matches or is unchecked)."""
    memory_bytes: float = math.nan
    """Peak memory per rank, where recorded (shown beside the claim, never ranked)."""
    joules_per_sample: tuple[float, ...] = ()
    """GPU energy per sample per trial slot (NaN where not read or left out; slot i pairs with slot i)."""


@dataclass(frozen=True, kw_only=True)
class ConfigComparison:
    """One configuration against another, trial i against trial i, as a claim."""

    ratio: PairedRatio
    """This configuration's throughput over the other's, its interval at the comparison's share of
    the question's level (:func:`dpbench.decision.claims.comparison_level`)."""
    claim: Claim
    settle_trials: int | None = None
    """For an unsettled claim: about how many trials would settle it (None: unknown or many)."""
    why: str = ""
    """Why it is unsettled whatever its interval says: either side's trials were contended ('' when
    the interval alone decided)."""

    def to_dict(self) -> dict[str, Any]:
        r = self.ratio
        return {
            "ratio": _num(r.ratio),
            "lo": _num(r.lo),
            "hi": _num(r.hi),
            "pairs": r.pairs,
            "coverage": _num(r.confidence),
            "claim": self.claim.value,
            "settle_trials": self.settle_trials,
            "why": self.why,
        }


@dataclass(frozen=True, kw_only=True)
class Standing:
    """One configuration's place in its question."""

    entry: Entry
    samples_per_s: float
    """Its kept trials' throughput at their median step time (:func:`dpbench.stats.median_rate`):
    the number every table shows for it, the global batch over its headline step time."""
    trials: int
    """Its kept trials."""
    vs_leader: ConfigComparison | None = None
    """Its throughput over the leader's (None for the leader itself)."""
    vs_single: ConfigComparison | None = None
    """Its throughput over ``single``'s at the recipe (None for single, or where none ran)."""
    busy: bool = False
    """Other processes took more than the contention limit of the machine during its trials."""
    contended: str = ""
    """Why its trials cannot be claimed on (busy, or spread beyond the noise model; '' when they can)."""

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def joules_per_sample(self) -> float:
        """The median of its kept trials' GPU energy per sample (NaN where none was read)."""
        return median([v for v in self.entry.joules_per_sample if _positive(v)])


@dataclass(frozen=True, kw_only=True)
class Frugal:
    """The configuration that used the least GPU energy per sample, where it is not the leader."""

    name: str
    joules_per_sample: float
    """Its median over its kept trials."""
    leader_joules_per_sample: float
    """The leader's, the same way."""
    vs_leader: ConfigComparison
    """The leader's energy per sample over this one's, trial i against trial i: ``faster`` reads "the
    leader uses more energy per sample" at the claim level, ``level`` within the margin."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "configuration": self.name,
            "joules_per_sample": _num(self.joules_per_sample),
            "leader_joules_per_sample": _num(self.leader_joules_per_sample),
            "leader_over_frugal": self.vs_leader.to_dict(),
        }


@dataclass(frozen=True, kw_only=True)
class Answer:
    """One question's answer, computed once; every view renders it."""

    question: Question
    run: str
    outcome: AnswerOutcome
    leader: str | None
    """The configuration with the highest paired throughput (None when nothing was measured)."""
    standings: tuple[Standing, ...] = ()
    """The leader first, then the others by their ratio to it."""
    level_with: tuple[str, ...] = ()
    """Configurations level with the leader."""
    reasons: tuple[str, ...] = ()
    """What contended the trials, per contended configuration: why its comparisons are unsettled
    whatever their intervals say (:func:`contention_of`); or why nothing could be ranked."""
    excluded: tuple[tuple[str, str], ...] = ()
    """(configuration, why) left out of the ranking: no kept trials, or it computes something else."""
    single: str | None = None
    """The question's ``single`` configuration, where one ran."""
    frugal: Frugal | None = None
    """The configuration that used the least GPU energy per sample, where it is not the leader and
    both read the counter (None otherwise: the fastest is the most frugal, or energy was not read)."""
    level: float = CLAIM_LEVEL
    """The chance that none of the question's claims is false."""
    margin: float = LEVEL_MARGIN
    comparisons: int = 1
    """The comparisons the level is split over (:func:`dpbench.decision.claims.family_size`)."""
    looks: int = 1
    """The looks it is split over (a sequential design's; 1: a fixed number of trials)."""

    @property
    def unsettled(self) -> tuple[Standing, ...]:
        return tuple(s for s in self.standings if s.vs_leader is not None and s.vs_leader.claim is Claim.UNSETTLED)

    @property
    def open_by_interval(self) -> tuple[Standing, ...]:
        """The unsettled comparisons more trials at this spread could settle: not those a contended
        machine left open (:attr:`reasons` says why those are)."""
        return tuple(s for s in self.unsettled if s.vs_leader is not None and not s.vs_leader.why)

    @property
    def settle_trials(self) -> int | None:
        """About how many trials would settle every open comparison (None: unknown or many)."""
        needs = [s.vs_leader.settle_trials for s in self.open_by_interval if s.vs_leader is not None]
        return max(needs) if needs and all(n is not None for n in needs) else None  # type: ignore[type-var]

    def standing(self, name: str) -> Standing:
        return next(s for s in self.standings if s.name == name)

    def open_configurations(self) -> tuple[str, ...]:
        """What more trials could still change: the leader, the unsettled and the contended ones
        (empty once the answer is settled): new pairs on a quieter machine can settle a contended one."""
        if self.outcome is not AnswerOutcome.UNSETTLED:
            return ()
        names = [self.leader] if self.leader else []
        names += [
            s.name for s in self.standings if s.name != self.leader and (s.busy or s.contended or s in self.unsettled)
        ]
        return tuple(dict.fromkeys(names))

    def to_dict(self) -> dict[str, Any]:
        q = self.question
        return {
            "workload": q.workload,
            "recipe": {"optimizer": q.optimizer, "precision": q.precision, "global_batch": _num(q.global_batch)},
            "run": self.run,
            "outcome": self.outcome.value,
            "level": self.level,
            "comparisons": self.comparisons,
            "looks": self.looks,
            "leader": self.leader,
            "level_with": list(self.level_with),
            "reasons": list(self.reasons),
            "excluded": [{"configuration": n, "why": w} for n, w in self.excluded],
            "single": self.single,
            "settle_trials": self.settle_trials,
            "frugal": self.frugal.to_dict() if self.frugal else None,
            "configurations": [
                {
                    "configuration": s.name,
                    "strategy": s.entry.strategy,
                    "world_size": s.entry.world_size,
                    "samples_per_s": _num(s.samples_per_s),
                    "trials": s.trials,
                    "busy": s.busy,
                    "busy_share": _num(s.entry.busy_share),
                    "contended": s.contended,
                    "joules_per_sample": _num(s.joules_per_sample),
                    "vs_leader": s.vs_leader.to_dict() if s.vs_leader else None,
                    "vs_single": s.vs_single.to_dict() if s.vs_single else None,
                }
                for s in self.standings
            ],
        }


def _num(value: float) -> float | None:
    return None if not isinstance(value, (int, float)) or not math.isfinite(value) else float(value)


def _compare(
    numerator: Entry, denominator: Entry, *, level: float, margin: float, contended: Mapping[str, str] | None = None
) -> ConfigComparison:
    """The claim on ``numerator`` over ``denominator``, its interval at ``level`` (the comparison's
    share of the question's); unsettled, saying why, where ``contended`` (name → why) names either
    side, whatever the interval says: the pairs moved with the machine, not with the configurations."""
    ratio = paired_ratio(numerator.throughputs, denominator.throughputs, level)
    why = "; ".join(w for e in (numerator, denominator) if (w := (contended or {}).get(e.name, "")))
    if why:
        return ConfigComparison(ratio=ratio, claim=Claim.UNSETTLED, why=why)
    return _judged(ratio, margin)


def _judged(ratio: PairedRatio, margin: float) -> ConfigComparison:
    claim = claim_of(ratio, margin=margin)
    settle = trials_to_settle(ratio, margin=margin) if claim is Claim.UNSETTLED else None
    return ConfigComparison(ratio=ratio, claim=claim, settle_trials=settle)


def contention_of(entry: Entry, busy_limit: float, spread_limit: float = SPREAD_LIMIT) -> str:
    """Why ``entry``'s trials cannot be claimed on ('' when they can): other processes took more
    than ``busy_limit`` of the machine (the median over its trials), or its kept trials spread past
    ``spread_limit`` (:data:`~dpbench.decision.contention.SPREAD_LIMIT`) — contention the sampler
    missed or that hit only some of its trials."""
    if is_busy(entry.busy_share, busy_limit):
        return contention_text(entry.busy_share, f"{entry.name}'s")
    spread = trial_spread(entry.throughputs)
    return spread_text(spread, f"{entry.name}'s", spread_limit) if spread > spread_limit else ""


def _kept(entry: Entry) -> list[float]:
    return [v for v in entry.throughputs if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]


def _leader(
    entries: Sequence[Entry], reference: Entry, *, level: float, margin: float, contended: Mapping[str, str]
) -> Entry:
    """The highest paired ratio over the reference; then, while a claim finds another configuration
    faster than the leader, that one (pairwise ratios need not be transitive: the view must never
    crown one that a claim beats)."""

    def score(e: Entry) -> float:
        if e is reference:
            return 1.0
        r = paired_ratio(e.throughputs, reference.throughputs, level)
        if r.pairs:
            return r.ratio
        mine, theirs = median_rate(_kept(e)), median_rate(_kept(reference))  # no pairs: the rates, said as such
        return mine / theirs if theirs > 0 else math.nan

    scores = {e.name: score(e) for e in entries}  # each once: a ratio of every pair of trials
    leader = max(entries, key=lambda e: scores[e.name] if scores[e.name] == scores[e.name] else -math.inf)
    for _ in range(len(entries)):
        beaters = [
            e
            for e in entries
            if e is not leader
            and _compare(e, leader, level=level, margin=margin, contended=contended).claim is Claim.FASTER
        ]
        if not beaters:
            break
        leader = max(beaters, key=lambda e: paired_ratio(e.throughputs, leader.throughputs, level).ratio)
    return leader


def answer_question(
    question: Question,
    entries: Sequence[Entry],
    *,
    run: str = "",
    busy_limit: float,
    level: float = CLAIM_LEVEL,
    looks: int = 1,
    margin: float = LEVEL_MARGIN,
    spread_limit: float = SPREAD_LIMIT,
) -> Answer:
    """The answer of one question from its configurations' trials. ``level``: the chance that none
    of its claims is false, split over every pair of its ranked configurations and ``looks`` (a
    sequential design's; :func:`dpbench.decision.claims.comparison_level`). ``busy_limit``: the
    share of all cores other processes may take during a configuration's trials before its numbers
    are not trusted to rank it (:data:`dpbench.decision.contention.CONTENDED`); ``spread_limit``: how
    far its kept trials may spread (:data:`~dpbench.decision.contention.SPREAD_LIMIT`)."""
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ValueError(f"configurations of {question.title}: expected unique names, found {names}")
    excluded = [(e.name, "no trial kept") for e in entries if not _kept(e)]
    excluded += [
        (e.name, f"computes something else than single: {e.departs}") for e in entries if e.departs and _kept(e)
    ]
    ranked = [e for e in entries if _kept(e) and not e.departs]
    single = next((e for e in ranked if e.strategy == BASELINE_STRATEGY), None)
    energy = sum(any(_positive(v) for v in e.joules_per_sample) for e in ranked) >= 2
    comparisons = family_size(len(ranked), energy=energy)
    common = dict(
        question=question,
        run=run,
        excluded=tuple(excluded),
        single=single.name if single else None,
        level=level,
        margin=margin,
        comparisons=comparisons,
        looks=looks,
    )
    if not ranked:
        return Answer(
            outcome=AnswerOutcome.UNSETTLED, leader=None, reasons=("no configuration has a kept trial",), **common
        )
    reference = single or max(ranked, key=lambda e: len(_kept(e)))
    contended = {e.name: why for e in ranked if (why := contention_of(e, busy_limit, spread_limit))}
    each = comparison_level(level, comparisons, looks)
    leader = _leader(ranked, reference, level=each, margin=margin, contended=contended)
    judged = dict(level=each, margin=margin, contended=contended)

    def standing(e: Entry) -> Standing:
        return Standing(
            entry=e,
            samples_per_s=median_rate(_kept(e)),
            trials=len(_kept(e)),
            vs_leader=None if e is leader else _compare(e, leader, **judged),
            vs_single=None if single is None or e is single else _compare(e, single, **judged),
            busy=is_busy(e.busy_share, busy_limit),
            contended=contended.get(e.name, ""),
        )

    others = sorted((standing(e) for e in ranked if e is not leader), key=lambda s: -_finite(s.vs_leader.ratio.ratio))
    standings = (standing(leader), *others)
    if not others:
        return Answer(outcome=AnswerOutcome.ALONE, leader=leader.name, standings=standings, **common)
    claims = [s.vs_leader.claim for s in others if s.vs_leader is not None]
    # Every contended configuration, wherever it ranks: its claims against single are shown too.
    reasons = [s.contended for s in standings if s.contended]
    if reasons or Claim.UNSETTLED in claims:
        outcome = AnswerOutcome.UNSETTLED
    elif Claim.LEVEL in claims:
        outcome = AnswerOutcome.LEVEL
    else:
        outcome = AnswerOutcome.FASTEST
    level_with = tuple(s.name for s in others if s.vs_leader is not None and s.vs_leader.claim is Claim.LEVEL)
    return Answer(
        outcome=outcome,
        leader=leader.name,
        standings=standings,
        level_with=level_with,
        reasons=tuple(reasons),
        frugal=_frugal(standings, leader.name, level=each, margin=margin),
        **common,
    )


def _finite(value: float) -> float:
    return value if math.isfinite(value) else -math.inf


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _frugal(standings: Sequence[Standing], leader: str, *, level: float, margin: float) -> Frugal | None:
    """The standing with the least energy per sample, against the leader's, where the two differ."""
    read = [s for s in standings if _positive(s.joules_per_sample)]
    lead = next((s for s in read if s.name == leader), None)
    if lead is None or len(read) < 2:
        return None
    least = min(read, key=lambda s: s.joules_per_sample)
    if least is lead or not least.joules_per_sample < lead.joules_per_sample:
        return None
    ratio = paired_ratio(lead.entry.joules_per_sample, least.entry.joules_per_sample, level)
    return Frugal(
        name=least.name,
        joules_per_sample=least.joules_per_sample,
        leader_joules_per_sample=lead.joules_per_sample,
        vs_leader=_judged(ratio, margin),
    )


@dataclass(frozen=True, kw_only=True)
class Decision:
    """Every question of a run (or of the newest run that has each workload)."""

    answers: tuple[Answer, ...] = ()
    level: float = CLAIM_LEVEL
    margin: float = LEVEL_MARGIN
    notes: tuple[str, ...] = field(default=())
    """What the decision leaves out, once (e.g. questions without single)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "margin": self.margin,
            "scope": SCOPE,
            "questions": [a.to_dict() for a in self.answers],
            "notes": list(self.notes),
        }
