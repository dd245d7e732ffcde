"""The decision in words, generated from its claims (never written beside them): one headline per
question, the line naming the most frugal configuration where it is not the fastest, why an energy
reading is absent, and the terminal's lines. The terminal, the HTML decision blocks and ``dpbench
run`` print these sentences; the level of every claim is stated once, in :func:`level_line`.
"""

from __future__ import annotations

import hashlib
import math
import textwrap
from collections.abc import Mapping
from typing import Any

from dpbench.decision.claims import Claim
from dpbench.decision.model import Answer, AnswerOutcome, ConfigComparison, Decision, Question, Standing
from dpbench.schema import EnergyGap

__all__ = [
    "WIDTH",
    "and_joined",
    "claim_text",
    "energy_gap_text",
    "frugal_text",
    "joules_text",
    "rate_text",
    "headline",
    "interval_text",
    "level_line",
    "looks_text",
    "question_label",
    "summary_lines",
    "vs_single_text",
    "workload_label",
]

WIDTH = 100  # the terminal lines' width
# A workload spec that fits two terminal lines is written whole (it is copied into commands); a longer
# one is named by what it builds and a hash (:func:`workload_label`), so that its line stays readable.
LABEL_WIDTH = 2 * WIDTH
_NAMED = 4  # a sentence names this many configurations, then counts the rest
_ROWS = 6  # configurations listed under a headline; the rest are counted


def and_joined(words: list[str]) -> str:
    """``a, b and c`` ('' for none)."""
    return ", ".join(words[:-1]) + (" and " if len(words) > 1 else "") + words[-1] if words else ""


def _names(names: list[str]) -> str:
    if len(names) <= _NAMED:
        return and_joined(names)
    return ", ".join(names[:_NAMED]) + f" and {len(names) - _NAMED} more"


def workload_label(workload: str, *, width: int = LABEL_WIDTH) -> str:
    """The workload as a line that names more than it says it: its spec where it fits ``width``,
    else what it builds (``hf:gpt2``, the part before the overrides, its end where that is long too)
    and a short hash of the whole spec: ``hf:gpt2@…#3f9a1c``. The same spec always reads the same."""
    if len(workload) <= width:
        return workload
    digest = hashlib.sha1(workload.encode()).hexdigest()[:6]
    head, at, _ = workload.partition("@")
    keep = width - len("@…#") - len(digest)
    head = head if len(head) <= keep else "…" + head[-(keep - 1) :]
    return f"{head}{'@…' if at else ''}#{digest}"


def rate_text(value: float) -> str:
    if not math.isfinite(value):
        return "–"
    return f"{value:,.0f} samples/s" if value >= 100 else f"{value:.3g} samples/s"


def looks_text(looks: tuple[int, ...]) -> str:
    """``looks at 5, 8 and 12 trials`` (a sequential design's looks)."""
    return f"look{'s' if len(looks) > 1 else ''} at {and_joined([str(n) for n in looks])} trials"


def level_line(decision: Decision) -> str:
    """The one statement of the claim level and scope every sentence below it uses: the level is
    per question, its chance of a false claim split over the question's comparisons (and a
    sequential design's looks: :mod:`dpbench.decision.claims`), so each interval shown is at that
    share. A claim is about this session's trials (:data:`dpbench.decision.model.SCOPE`;
    docs/decision.md#sessions says why)."""
    looks = max((a.looks for a in decision.answers), default=1)
    over = "its comparisons" + (f" and {looks} looks" if looks > 1 else "")
    return (
        f"claims at {decision.level:.0%} per question (a {1 - decision.level:.0%} chance of any false claim, "
        f"split over {over}), in this session; level = within ±{decision.margin:.0%}; "
        f"unsettled = more trials needed"
    )


def interval_text(c: ConfigComparison) -> str:
    r = c.ratio
    if r.pairs < 2 or not math.isfinite(r.lo):
        return f"{r.pairs} pair{'s' if r.pairs != 1 else ''}: no interval"
    return f"CI {r.lo:.2f}–{r.hi:.2f}, {r.pairs} pairs"


def _settle(c: ConfigComparison) -> str:
    if c.why:
        return c.why
    return f"settles at ~{c.settle_trials} trials" if c.settle_trials else "many more trials needed"


def claim_text(c: ConfigComparison, other: str) -> str:
    """``0.83× ddp w2 (CI 0.80–0.86, 5 pairs): slower``: a ratio with its claim against ``other``."""
    said = {
        Claim.FASTER: "faster",
        Claim.SLOWER: "slower",
        Claim.LEVEL: "level",
        Claim.UNSETTLED: f"unsettled, {_settle(c)}",
    }[c.claim]
    return f"{c.ratio.ratio:.2f}× {other} ({interval_text(c)}): {said}"


def vs_single_text(s: Standing) -> str:
    """The configuration against single, by its claim: a speed-up is quoted only where it is one."""
    c = s.vs_single
    if c is None:
        return ""
    return claim_text(c, "single")


def question_label(question: Question) -> str:
    """The question in a line: its title, a long workload spec by :func:`workload_label`."""
    label = workload_label(question.workload)
    return f"{label} ({question.recipe})" if question.recipe else label


def headline(answer: Answer, *, named: bool = True) -> str:
    """The question's answer in one sentence. ``named``: the sentence starts with the question (the
    terminal: :func:`question_label`, a line of its own stays readable); else a heading above it names
    the question in full, and the sentence does not again (the report)."""
    no_single = answer.single is None and len(answer.standings) > 1
    where = question_label(answer.question) + (" [no single at this recipe]" if no_single else "")
    sentence = _headline(answer, where)
    if named:
        return sentence
    body = sentence[len(where) + 2 :]  # past "<where>: "
    return ("[no single at this recipe] " if no_single else "") + body[:1].upper() + body[1:]


def _headline(answer: Answer, where: str) -> str:
    if answer.leader is None:
        return f"{where}: nothing to rank ({'; '.join(answer.reasons)})."
    lead = answer.standing(answer.leader)
    single = f" [{lead.vs_single.ratio.ratio:.2f}× single: {lead.vs_single.claim.value}]" if lead.vs_single else ""
    rate = rate_text(lead.samples_per_s)
    others = [s for s in answer.standings if s.name != answer.leader]
    slower = [s.name for s in others if s.vs_leader is not None and s.vs_leader.claim is Claim.SLOWER]
    if answer.outcome is AnswerOutcome.ALONE:
        return f"{where}: nothing to rank: one configuration: {lead.name} at {rate}{single}."
    if answer.outcome is AnswerOutcome.FASTEST:
        return f"{where}: the fastest is {lead.name} at {rate}{single}; slower: all {len(others)} others."
    if answer.outcome is AnswerOutcome.LEVEL:
        tail = f"; slower: the other {len(slower)}" if slower else ""
        return (
            f"{where}: no single fastest: {lead.name} ({rate}{single}) is level with "
            f"{_names(list(answer.level_with))}{tail}."
        )
    open_ = [s.name for s in answer.open_by_interval]  # the contended ones: the reasons say why
    why = list(answer.reasons)
    if open_:
        more = f"; it settles at ~{answer.settle_trials} trials" if answer.settle_trials else ""
        why.append(f"unsettled against it: {_names(open_)}{more}")
    return f"{where}: not settled: {lead.name} leads at {rate}{single}, but " + "; ".join(why) + "."


def joules_text(value: float) -> str:
    return f"{value:.3g} J/sample" if isinstance(value, (int, float)) and math.isfinite(value) else "–"


def _number(record: Mapping[str, Any], key: str) -> float:
    value = record.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def energy_gap_text(record: Mapping[str, Any]) -> str:
    """Why an energy reading is absent, from a record's ``absent`` kind (:class:`dpbench.schema.EnergyGap`)
    and the numbers beside it (``window_s``, ``needed_s``, ``held_s``, ``absent_device``)."""
    kind = record.get("absent")
    where = f"{record['absent_device']}: " if isinstance(record.get("absent_device"), str) else ""
    if kind == EnergyGap.NO_COUNTER.value:
        return f"{where}no readable energy counter (a CPU run, or NVML reads none on this GPU)"
    if kind == EnergyGap.SHORT_WINDOW.value:
        window, needed = _number(record, "window_s"), _number(record, "needed_s")
        return f"{where}a {window:.2f} s window, shorter than the {needed:.1f} s the energy counter needs"
    if kind == EnergyGap.STALLED.value:
        return f"{where}the energy counter stood still for {_number(record, 'held_s'):.1f} s (stalled, not 0 W)"
    if kind == EnergyGap.RESET.value:
        return f"{where}the energy counter went back or jumped (a reset, not a wrap)"
    if kind == EnergyGap.OTHER_NODES.value:
        return "ranks ran on other nodes, whose GPUs this host's sampler cannot read"
    return f"{where}{kind}"


def frugal_text(answer: Answer) -> str | None:
    """The line that says the most frugal configuration is not the fastest (None where it is, or no
    energy was read): both energies per sample and the claim on their paired ratio."""
    f = answer.frugal
    if f is None:
        return None
    c = f.vs_leader
    said = {
        Claim.FASTER: "the fastest uses more",
        Claim.SLOWER: "paired trial by trial, the fastest uses less",
        Claim.LEVEL: "level",
        Claim.UNSETTLED: f"unsettled, {_settle(c)}",
    }[c.claim]
    return (
        f"The most frugal is {f.name} at {joules_text(f.joules_per_sample)}, not the fastest, {answer.leader}, "
        f"at {joules_text(f.leader_joules_per_sample)}: {c.ratio.ratio:.2f}× the energy per sample "
        f"({interval_text(c)}): {said}."
    )


def _header(width: int) -> str:
    return f"  {'configuration'.ljust(width)}  × the leader (CI, pairs)  claim"


def _row(s: Standing, answer: Answer) -> str:
    """``0.83× (0.80–0.86, 5 pairs)  slower``: against the leader, compact (the header says so)."""
    busy = " · busy" if s.busy else " · spread" if s.contended else ""
    if s.name == answer.leader:
        lead = {AnswerOutcome.FASTEST: "the fastest", AnswerOutcome.LEVEL: "leads a level set"}.get(
            answer.outcome, "leads"
        )
        return lead + busy
    c = s.vs_leader
    assert c is not None
    r = c.ratio
    ci = f"{r.lo:.2f}–{r.hi:.2f}, {r.pairs} pairs" if r.pairs >= 2 and math.isfinite(r.lo) else f"{r.pairs} pairs"
    if c.claim is Claim.UNSETTLED and c.why:
        said = "unsettled (contended)"  # the headline's reasons say by what
    elif c.claim is Claim.UNSETTLED:
        said = f"unsettled (~{c.settle_trials} trials)" if c.settle_trials else "unsettled (many trials)"
    else:
        said = c.claim.value
    return f"{r.ratio:.2f}× ({ci})  {said}{busy}"


def _memory(s: Standing) -> str:
    peak = s.entry.memory_bytes
    return f"peak {peak / 2**20:,.0f} MiB/rank" if peak == peak else ""


def _rows(shown: list[Standing], answer: Answer) -> list[str]:
    """The header and a row per configuration: its name, its numbers against the leader and its
    memory. Nothing is cut: the name column is as wide as every row's numbers leave room for, and a
    longer name takes a line of its own, its numbers under it in their column."""
    tails = {s.name: "  ".join(filter(None, (_row(s, answer), _memory(s)))) for s in shown}
    room = WIDTH - 4 - max(len(t) for t in tails.values())
    width = max(min(max(len(s.name) for s in shown), room), len("configuration"))
    lines = [_header(width)]
    for s in shown:
        if len(s.name) > width:
            lines += [f"  {s.name}", f"  {' ' * width}  {tails[s.name]}"]
        else:
            lines.append(f"  {s.name.ljust(width)}  {tails[s.name]}")
    return lines


def _wrap(text: str, indent: str = "") -> list[str]:
    # a spec is never broken inside (it is copied into commands): a longer one overruns the width
    return textwrap.wrap(
        text, WIDTH, subsequent_indent=indent or "    ", break_on_hyphens=False, break_long_words=False
    )


def summary_lines(decision: Decision, *, max_lines: int | None = None) -> list[str]:
    """The terminal's decision: the level once, then per question its headline and each
    configuration against the leader (throughput ratio, its interval and its claim), at most
    ``WIDTH`` columns. Where that takes more than ``max_lines``, the headlines alone (the report
    and ``dpbench report`` list every configuration)."""
    if not decision.answers:
        return []
    full = _lines(decision, rows=True)
    if max_lines is None or len(full) <= max_lines:
        return full
    return _lines(decision, rows=False) + ["(each configuration against its leader: dpbench report, or the report)"]


def _lines(decision: Decision, *, rows: bool) -> list[str]:
    lines = _wrap(level_line(decision))
    for answer in decision.answers:
        lines += _wrap(headline(answer))
        frugal = frugal_text(answer)
        if frugal is not None:
            lines += _wrap(f"  {frugal}")
        if not rows:
            lines += [line for name, why in answer.excluded for line in _wrap(f"  left out: {name}: {why}")]
            continue
        shown = list(answer.standings[:_ROWS])
        rest = answer.standings[_ROWS:]
        if len(answer.standings) > 1:
            lines += _rows(shown, answer)
        if rest:
            counts: dict[str, int] = {}
            for s in rest:
                claim = s.vs_leader.claim.value if s.vs_leader else "–"
                counts[claim] = counts.get(claim, 0) + 1
            how = ", ".join(f"{n} {claim}" for claim, n in counts.items())
            lines.append(f"  … {len(rest)} more: {how} (the report lists them)")
        for name, why in answer.excluded:
            lines += _wrap(f"  left out: {name}: {why}")
    return lines
