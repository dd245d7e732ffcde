"""The ``dpbench ab`` command line (registered by dpbench.cli): its options, and the rule that a side is
a revision or an environment (:func:`dpbench.ab.environments.parse_sides`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dpbench.ab.bisect import bisect_environments, check_bisect, report
from dpbench.ab.environments import SideSpec, parse_sides
from dpbench.ab.job import DEFAULT_TRIALS, WORKDIR_NAME, Judge, parse_trials, run_ab
from dpbench.ab.revisions import ABError
from dpbench.ab.settle import (
    MAX_TRIALS_FACTOR,
    LookResult,
    OpenCase,
    PairsLook,
    SettlePlan,
    parse_budget,
    parse_max_trials,
)
from dpbench.commands.options import ExamplesFormatter, examples
from dpbench.errors import UsageError

__all__ = ["register_ab"]


def _settle_plan(args: argparse.Namespace, trials: int) -> SettlePlan | None:
    """The plan of the rounds beyond ``--trials`` (None: ``--no-until-settled`` or ``--no-compare``);
    every option checked before anything starts."""
    from dpbench.gate.compare import DEFAULT_ALPHA, check_alpha, parse_threshold
    from dpbench.gate.judge import MIN_PAIRS

    budget = parse_budget(args.budget)
    off = "--no-compare" if args.no_compare else "--no-until-settled" if args.until_settled is False else None
    for option, value in (("--max-trials", args.max_trials), ("--budget", args.budget)):
        if off and value is not None:
            raise ABError(f"{option}: expected with --until-settled (the default), found {off}")
    if args.threshold is not None:
        parse_threshold(args.threshold)
    try:
        alpha = check_alpha(DEFAULT_ALPHA if args.alpha is None else float(args.alpha))
    except (ValueError, UsageError):
        raise UsageError(f"--alpha: expected a probability in (0, 0.5], found {args.alpha!r}") from None
    max_trials = parse_max_trials(args.max_trials, trials=trials, min_pairs=MIN_PAIRS)
    return None if off else SettlePlan(trials=trials, max_trials=max_trials, budget_s=budget, alpha=alpha)


def _look(args: argparse.Namespace) -> PairsLook:
    """The gate's paired comparison of the saved pairs, in this process: which cases are inconclusive,
    and how many pairs its next-step estimate says each needs."""
    from dpbench.gate.compare import DEFAULT_THRESHOLD, compare_runs, parse_threshold
    from dpbench.gate.next_step import plan
    from dpbench.gate.verdicts import Verdict

    threshold = DEFAULT_THRESHOLD if args.threshold is None else parse_threshold(args.threshold)

    def look(base: Sequence[str], head: Sequence[str], alpha: float) -> LookResult:
        cmp = compare_runs(base, head, threshold=threshold, alpha=alpha, paired=True)
        size = cmp.family.size
        steps = {b.name: plan(b, alpha=alpha, family_size=size, method="paired") for b in cmp.benchmarks}
        open_cases = tuple(
            OpenCase(name=b.name, pairs=steps[b.name].count if steps[b.name] else None)
            for b in cmp.of(Verdict.INCONCLUSIVE)
        )
        return LookResult(cases=size, open=open_cases)

    return look


def _handle(args: argparse.Namespace) -> int:
    try:
        trials = parse_trials(args.trials)
        settle = _settle_plan(args, trials)
        # Only what the user set: compare's own defaults stay the gate's defaults. Measured until
        # settled, the job passes each look's share of --alpha itself.
        compare_args = [
            f"--{name}={getattr(args, name)}"
            for name in ("threshold", "alpha", "markdown", "json")
            if getattr(args, name) is not None and not (name == "alpha" and settle is not None)
        ]
        if args.bisect_python:
            return _bisect(args, trials=trials, compare_args=compare_args, settle=settle)
        base, head = parse_sides(
            revs=args.revs,
            base_python=args.base_python,
            head_python=args.head_python,
            base_requirements=args.base_requirements,
            head_requirements=args.head_requirements,
            rev=args.rev,
            python=args.python,
        )
        judge = None if args.no_compare else _judge(compare_args)
        return _run(args, base, head, trials=trials, judge=judge, settle=settle)
    except ABError as e:
        print(f"dpbench ab: error: {e}", file=sys.stderr)
        return 2


def _run(
    args: argparse.Namespace,
    base: str | SideSpec,
    head: str | SideSpec,
    *,
    trials: int,
    judge: Judge | None,
    settle: SettlePlan | None,
) -> int:
    """One A/B job between ``base`` and ``head`` with the options the command line was given."""
    return run_ab(
        base=base,
        head=head,
        rev=args.rev,
        trials=trials,
        pytest_args=args.pytest_args,
        workdir=Path(args.workdir) if args.workdir else None,
        envs=Path(args.envs) if args.envs else None,
        python=Path(args.python).absolute() if args.python else None,
        keep=args.keep,
        judge=judge,
        settle=settle,
        look=_look(args) if settle is not None else None,
        budget=args.budget,
    )


def _judge(compare_args: Sequence[str]) -> Judge:
    """``dpbench compare`` on the pairs ab names, with the compare options the user gave ab."""
    from dpbench.commands.compare import compare_parser, run_compare

    return lambda pairs: run_compare(compare_parser().parse_args([*pairs, *compare_args]))


def _bisect(args: argparse.Namespace, *, trials: int, compare_args: list[str], settle: SettlePlan | None) -> int:
    sides = [f"--{s}-{k}" for s in ("base", "head") for k in ("python", "requirements") if getattr(args, f"{s}_{k}")]
    named = (["BASE_REV HEAD_REV"] if args.revs else []) + sides + (["--python"] if args.python else [])
    pythons = check_bisect(args.bisect_python, named=named)
    if args.no_compare:
        raise ABError("--no-compare: expected without --bisect-python (each step is judged)")
    code, first = bisect_environments(
        pythons,
        lambda base, head: _run(args, base, head, trials=trials, judge=_judge(compare_args), settle=settle),
    )
    return report(pythons, code, first)


def _pytest_args_after_dashdash(parse: Callable) -> Callable:
    """Wrap a parser's parse_known_args: everything after the first ``--`` is pytest's.

    argparse cannot do this itself: a ``nargs="*"`` positional after BASE HEAD is used up (empty)
    as soon as an option follows them, so ``ab A B --trials 2 -- -k x`` would be refused."""

    def parse_known_args(args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None):
        args = list(sys.argv[1:] if args is None else args)
        tail: list[str] = []
        if "--" in args:
            cut = args.index("--")
            args, tail = args[:cut], args[cut + 1 :]
        namespace, extras = parse(args, namespace)
        namespace.pytest_args = tail
        return namespace, extras

    return parse_known_args


def register_ab(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ab",
        help="measure two revisions of this checkout, or two environments, in one job, alternating trials, "
        "and compare them",
        usage="dpbench ab [options] BASE_REV HEAD_REV [-- PYTEST_ARGS ...]\n"
        "       dpbench ab [options] (--base-python PATH | --base-requirements FILE) "
        "(--head-python PATH | --head-requirements FILE) [--rev REV] [-- PYTEST_ARGS ...]",
        description="Check out BASE_REV and HEAD_REV as worktrees, set each up with its own scripts/setup-env "
        "(one shared environment when their lock files match), run their suites one trial at a "
        "time in the order base, head, head, base, …, save every run and compare the sides. "
        "Everything after -- goes to every pytest invocation (e.g. -k 'ddp and mlp'). Exit code: "
        "compare's (0 no regression, 1 regression, 2 unusable input); 4 when a side could "
        "not be set up (an interpreter that cannot import torch or dpbench, a requirements file pip "
        "cannot install) or an invocation failed; 130 when interrupted (Ctrl-C), 143 on SIGTERM, 129 on SIGHUP. "
        "A side is a revision or an environment: two revisions, or an environment on each side "
        "(both running --rev); the verdict opens with what differs between the sides' environments.",
        epilog=examples(
            "dpbench ab origin/main HEAD --trials 6 -- -k 'ddp and mlp'",
            "dpbench ab --base-python stable/bin/python --head-python nightly/bin/python -- -k mlp",
            "dpbench ab --base-python .venv/bin/python --head-requirements nightly.txt --rev main",
        ),
        formatter_class=ExamplesFormatter,
    )
    p.add_argument(
        "revs",
        nargs="*",
        metavar="BASE_REV HEAD_REV",
        help="the baseline and candidate revisions (branch, tag, commit); none with environment sides",
    )
    for side in ("base", "head"):
        p.add_argument(
            f"--{side}-python",
            metavar="PATH",
            help=f"the {side} side is this existing interpreter (torch, pytest-benchmark and dpbench's "
            "dependencies importable), running the revision of --rev",
        )
        p.add_argument(
            f"--{side}-requirements",
            metavar="FILE",
            help=f"the {side} side is a virtual environment made from FILE (pip install -r FILE, then this "
            "revision's dpbench with its test extra), kept under --envs by the file's hash",
        )
    p.add_argument(
        "--bisect-python",
        metavar="PATH",
        action="append",
        default=[],
        help="repeatable, in order (e.g. nightlies): find the first environment whose selected benchmarks "
        "regressed against the first one, each step an A/B of two environments (exit 1: found)",
    )
    p.add_argument(
        "--rev",
        metavar="REV",
        help="with environment sides: the revision both run (default: the checkout as it is)",
    )
    p.add_argument(
        "--trials",
        default=str(DEFAULT_TRIALS),
        metavar="N",
        help=f"the first ABBA rounds: invocations (one trial each) per revision (default {DEFAULT_TRIALS})",
    )
    p.add_argument(
        "--until-settled",
        action=argparse.BooleanOptionalAction,
        default=None,  # None (not given) is on: only --no-until-settled turns it off
        help="after the first --trials rounds, measure only the cases still inconclusive, in more rounds, "
        "until none is, --max-trials or --budget; every look judges at --alpha shared across the planned "
        "looks (default on; --no-until-settled: the --trials rounds only, judged at the whole --alpha)",
    )
    p.add_argument(
        "--max-trials",
        metavar="N",
        help=f"with --until-settled: the most pairs a case gets in all, at least --trials (default "
        f"{MAX_TRIALS_FACTOR} × --trials)",
    )
    p.add_argument(
        "--budget",
        metavar="DURATION",
        help="with --until-settled: no round starts that would end after this much wall-clock time from "
        "the job's start, e.g. 90s, 10m, 1h (default: none)",
    )
    p.add_argument(
        "--workdir",
        metavar="DIR",
        help=f"where worktrees, runs and logs go (default: {WORKDIR_NAME}/ in the checkout's root)",
    )
    p.add_argument("--envs", metavar="DIR", help="where the shared environments are kept (default: WORKDIR/envs)")
    p.add_argument(
        "--python", metavar="PATH", help="run both revisions with this interpreter instead of setting up environments"
    )
    p.add_argument("--keep", action="store_true", help="keep the worktrees afterwards")
    p.add_argument("--no-compare", action="store_true", help="only measure and save the runs")
    p.add_argument("--threshold", help="compare's --threshold (default: compare's)")
    p.add_argument("--alpha", help="compare's --alpha (default: compare's)")
    p.add_argument("--markdown", metavar="FILE", help="compare's --markdown")
    p.add_argument("--json", metavar="FILE", help="compare's --json")
    p.set_defaults(handler=_handle, pytest_args=[])
    p.parse_known_args = _pytest_args_after_dashdash(p.parse_known_args)  # type: ignore[method-assign]
