"""``dpbench compare`` on the terminal: the verdict first, then only what changed.

The first line is the whole answer (:func:`summary_headline`): pass or fail, the counts, the
job-wise false-alarm rate and what the exit code means. Then the rows that are not unchanged
(``--all``: every row), each inconclusive one with the cheapest next step
(:func:`dpbench.gate.next_step.next_step`), fitted to the terminal's width (into a file or a pipe:
full width), and last the test's assumptions once. Markdown and JSON stay in
:mod:`dpbench.gate.formats`.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dpbench.errors import UsageError, check_choice, expected_names_from
from dpbench.gate.formats import display_names, family_line
from dpbench.gate.next_step import LEGEND, plan
from dpbench.gate.verdicts import BenchmarkComparison, GateComparison, Verdict
from dpbench.results.console import paint, visible_len
from dpbench.results.units import fmt_p, fmt_ratio, fmt_time

__all__ = [
    "COLUMNS",
    "DEFAULT_COLUMNS",
    "SORTS",
    "TextOptions",
    "exit_code",
    "keyword_matcher",
    "parse_columns",
    "parse_sort",
    "render",
    "summary_headline",
]

COLUMNS = ("benchmark", "change", "baseline", "candidate", "trials", "p", "holm", "control", "verdict", "next")
DEFAULT_COLUMNS = ("benchmark", "change", "baseline", "candidate", "trials", "p", "verdict")
SORTS = ("verdict", "change", "name", "p")
_ORDER = {
    v: i
    for i, v in enumerate(
        [
            Verdict.REGRESSED,
            Verdict.MISSING,
            Verdict.INCONCLUSIVE,
            Verdict.IMPROVED,
            Verdict.NEW,
            Verdict.INCOMPARABLE,
            Verdict.UNCHANGED,
        ]
    )
}
_VERDICT_COLOUR = {
    Verdict.REGRESSED: "bad",
    Verdict.MISSING: "bad",
    Verdict.INCONCLUSIVE: "unsure",
    Verdict.IMPROVED: "good",
}


@dataclass(frozen=True, kw_only=True)
class TextOptions:
    """How ``dpbench compare`` prints (its command-line options)."""

    show_all: bool = False
    """every row, the unchanged ones too (default: only the rows that are not unchanged)"""
    sort: str = "verdict"
    """row order: ``verdict`` (regressed first, then by change), ``change``, ``name`` or ``p``"""
    keyword: str = ""
    """pytest-like ``-k`` expression: only the benchmarks it selects are listed"""
    columns: tuple[str, ...] = DEFAULT_COLUMNS
    """the table's columns, from :data:`COLUMNS`"""
    width: int | None = None
    """the terminal's columns; None: no limit (a file or a pipe)"""
    colour: bool = False
    """ANSI colour (a terminal only)"""
    fail_on_inconclusive: bool = False
    """an inconclusive case fails the job (exit 1)"""
    reason: str = ""
    """a job-level reason, said first on the summary line"""


def parse_columns(text: str) -> tuple[str, ...]:
    """``--columns benchmark,change,verdict`` → the names, each checked against :data:`COLUMNS`."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    for name in names:
        if name not in COLUMNS:
            raise UsageError(expected_names_from("--columns", name, COLUMNS))
    if not names:
        raise UsageError(f"--columns: expected names from {', '.join(COLUMNS)}, found none")
    return names


def parse_sort(text: str) -> str:
    """``--sort change`` → the key, checked against :data:`SORTS`."""
    return check_choice("--sort", text, SORTS)


def exit_code(cmp: GateComparison, *, fail_on_inconclusive: bool = False) -> int:
    """The comparison's exit code (:meth:`GateComparison.exit_decision`)."""
    return cmp.exit_decision(fail_on_inconclusive=fail_on_inconclusive)[0]


def summary_headline(cmp: GateComparison, *, fail_on_inconclusive: bool = False, reason: str = "") -> str:
    """The first line: ``PASS``/``FAIL``, a job-level ``reason`` when there is one, the counts, the
    job-wise false-alarm rate and what the exit code means."""
    counts = cmp.counts
    code = exit_code(cmp, fail_on_inconclusive=fail_on_inconclusive)
    inconclusive = counts[Verdict.INCONCLUSIVE.value]
    listed = [f"{counts[v.value]} {v.value}" for v in (Verdict.REGRESSED, Verdict.IMPROVED)]
    if not inconclusive:
        listed.append("0 inconclusive")
    listed.append(f"{counts[Verdict.UNCHANGED.value]} unchanged")
    # The rarer verdicts only when they occur: a line a person reads first stays short.
    rare = (Verdict.MISSING, Verdict.NEW, Verdict.INCOMPARABLE)
    listed += [f"{counts[v.value]} {v.value}" for v in rare if counts[v.value]]
    parts = [", ".join(listed)]
    if inconclusive:
        parts.append(f"{inconclusive} inconclusive: not enough evidence either way")
    rate = f"{cmp.alpha * 100:g}%"
    broad = " and the broad tests" if math.isfinite(cmp.family.broad_p) else ""
    parts.append(f"false-alarm rate ≤ {rate} per job (Holm over {cmp.family.size} cases{broad})")
    parts.append(cmp.exit_decision(fail_on_inconclusive=fail_on_inconclusive)[1])
    head = "FAIL" if code else "PASS"
    # The job's own verdict on a move of (nearly) everything (dpbench.gate.broad) comes first.
    reason = reason or cmp.family.broad_note
    return f"{head}: " + "; ".join(([reason] if reason else []) + parts)


def _cells(b: BenchmarkComparison, name: str) -> dict[str, str]:
    return {
        "benchmark": name,
        "change": fmt_ratio(b.ratio),
        "baseline": fmt_time(b.baseline_s, b.unit),
        "candidate": fmt_time(b.candidate_s, b.unit),
        "trials": f"{b.pairs} pairs" if b.pairs else f"{b.baseline_trials} vs {b.candidate_trials}",
        "p": fmt_p(b.p_value),
        "holm": fmt_p(b.p_adjusted),
        "control": fmt_ratio(b.control_ratio),
        "verdict": b.verdict.value.upper() if b.verdict == Verdict.REGRESSED else b.verdict.value,
    }


def _sorted(benchmarks: Sequence[BenchmarkComparison], sort: str, names: dict[str, str]) -> list:
    def change(b: BenchmarkComparison) -> float:
        return -b.ratio if math.isfinite(b.ratio) else math.inf

    keys = {
        "verdict": lambda b: (_ORDER[b.verdict], change(b)),
        "change": change,
        "name": lambda b: names[b.name],
        "p": lambda b: b.p_value if math.isfinite(b.p_value) else math.inf,
    }
    return sorted(benchmarks, key=keys[parse_sort(sort)])


def _fit(text: str, width: int) -> str:
    """Shorten ``text`` to ``width`` characters, keeping both ends (a case's id is at the end)."""
    if len(text) <= width or width < 5:
        return text
    keep = width - 1
    return text[: keep // 3] + "…" + text[len(text) - (keep - keep // 3) :]


def _wrap(text: str, width: int | None, indent: str) -> list[str]:
    if width is None:
        return [indent + text]
    return textwrap.wrap(text, width=max(width, 40), initial_indent=indent, subsequent_indent=indent + "  ")


def _table(shown: list[BenchmarkComparison], cmp: GateComparison, options: TextOptions) -> list[str]:
    names = display_names([b.name for b in cmp.benchmarks])
    size, method = cmp.family.size, cmp.family.method
    aa = math.isfinite(cmp.family.between_run_sd_aa)
    plans = {b.name: plan(b, alpha=cmp.alpha, family_size=size, method=method, aa=aa) for b in shown}
    columns = options.columns + (("next",) if any(plans.values()) and "next" not in options.columns else ())
    cells = [{**_cells(b, names[b.name]), "next": plans[b.name].short if plans[b.name] else ""} for b in shown]
    # The test function once, in the header, where every row shares it: the rows keep the case's id.
    functions = {row["benchmark"].split("[", 1)[0] for row in cells}
    header = {c: c for c in columns}
    if len(functions) == 1 and all("[" in row["benchmark"] for row in cells):
        header["benchmark"] = f"{functions.pop()}[…]"
        for row in cells:
            row["benchmark"] = row["benchmark"].split("[", 1)[1].removesuffix("]")
    widths = {c: max([len(header[c])] + [len(row[c]) for row in cells]) for c in columns}
    if options.width is not None:
        # Too wide for the terminal: drop the two times (the change stays), then shorten the names.
        for dropped in ("candidate", "baseline"):
            if sum(widths[c] + 2 for c in columns) > options.width and dropped in columns and len(columns) > 2:
                columns = tuple(c for c in columns if c != dropped)
        if "benchmark" in columns:
            others = sum(widths[c] + 2 for c in columns if c != "benchmark")
            widths["benchmark"] = max(min(widths["benchmark"], options.width - others), 12)

    def line(row: dict[str, str], colour: str | None) -> str:
        out = []
        for c in columns:
            text = _fit(row[c], widths[c]) if c == "benchmark" else row[c]
            padded = text.ljust(widths[c])
            out.append(paint(padded, colour, options.colour) if c in ("verdict", "next") and colour else padded)
        return "  ".join(out).rstrip()

    lines = [line(header, None)]
    for b, row in zip(shown, cells):
        lines.append(line(row, _VERDICT_COLOUR.get(b.verdict)))
        if b.note and b.verdict in (Verdict.REGRESSED, Verdict.IMPROVED, Verdict.INCOMPARABLE):
            lines += _wrap(b.note, options.width, "  ")
    kinds = dict.fromkeys(p.kind for p in plans.values() if p is not None)
    lines += [line for kind in kinds for line in _wrap(f"next: {LEGEND[kind]}", options.width, "")]
    return lines


def render(cmp: GateComparison, options: TextOptions = TextOptions()) -> str:
    """The terminal's text for a comparison (ends with a newline)."""
    headline = summary_headline(cmp, fail_on_inconclusive=options.fail_on_inconclusive, reason=options.reason)
    code = exit_code(cmp, fail_on_inconclusive=options.fail_on_inconclusive)
    lines = [paint(headline, "bad" if code else "good", options.colour)]
    lines += [f"baseline:  {cmp.baseline}", f"candidate: {cmp.candidate}"]
    names = display_names([b.name for b in cmp.benchmarks])
    selected = keyword_matcher(options.keyword)
    chosen = [b for b in cmp.benchmarks if selected(b.name)]
    shown = [b for b in chosen if options.show_all or b.verdict != Verdict.UNCHANGED]
    if shown:
        lines += _table(_sorted(shown, options.sort, names), cmp, options)
    hidden = []
    if len(shown) < len(chosen):
        hidden.append(f"{len(chosen) - len(shown)} unchanged (--all lists them)")
    if len(chosen) < len(cmp.benchmarks):
        hidden.append(f"{len(cmp.benchmarks) - len(chosen)} not selected by -k")
    if hidden:
        lines.append(paint(f"not shown: {', '.join(hidden)}", "dim", options.colour))
    tests = sorted({b.test for b in cmp.benchmarks if b.test})
    if tests:
        rule = f"regressed = slower than the machine's move by > {cmp.threshold:.1%} with p < {cmp.alpha:g} after Holm"
        lines += _wrap(f"test: {' / '.join(tests)}; {rule}; {family_line(cmp)}", options.width, "")
    return "\n".join(line.rstrip() if visible_len(line) else line for line in lines) + "\n"


# ``-k EXPR``: pick benchmarks by name as pytest's ``-k`` does.
#
# A word matches a benchmark whose full name contains it (case-insensitive); words combine with
# ``and``, ``or``, ``not`` and parentheses: ``-k 'ddp and not w1'``. Parsed here, never evaluated.
_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")
_OPERATORS = {"and", "or", "not"}


def _tokens(expr: str) -> list[str]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:  # only trailing whitespace is left
            break
        out.append(m.group(1))
        pos = m.end()
    return out


def keyword_matcher(expr: str) -> Callable[[str], bool]:
    """A predicate on benchmark names for ``expr``; a malformed expression is a UsageError."""
    tokens = _tokens(expr)
    pos = 0

    def bad(what: str) -> UsageError:
        return UsageError(f"-k: expected an expression like 'ddp and not w1', found {expr!r} ({what})")

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def disjunction() -> Callable[[str], bool]:
        parts = [conjunction()]
        while peek() == "or":
            take()
            parts.append(conjunction())
        return lambda name: any(p(name) for p in parts)

    def conjunction() -> Callable[[str], bool]:
        parts = [negation()]
        while peek() == "and":
            take()
            parts.append(negation())
        return lambda name: all(p(name) for p in parts)

    def negation() -> Callable[[str], bool]:
        if peek() == "not":
            take()
            inner = negation()
            return lambda name: not inner(name)
        return atom()

    def atom() -> Callable[[str], bool]:
        token = peek()
        if token is None:
            raise bad("it ends too early")
        take()
        if token == "(":
            inner = disjunction()
            if peek() != ")":
                raise bad("a '(' is not closed")
            take()
            return inner
        if token == ")" or token in _OPERATORS:
            raise bad(f"{token!r} where a name was expected")
        word = token.lower()
        return lambda name: word in name.lower()

    if not tokens:
        return lambda name: True
    matcher = disjunction()
    if peek() is not None:
        raise bad(f"{peek()!r} after a complete expression")
    return matcher
