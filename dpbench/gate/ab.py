"""``dpbench ab BASE HEAD``: measure two revisions of this checkout in one job and compare them.

A committed baseline was measured on another day, on a machine in another state; base and head
measured in the same job, alternating, share the machine's state instead. Each revision gets a
detached git worktree and an environment made by *its own* ``scripts/setup-env``; revisions
whose lock (``pyproject.toml`` + ``constraints.txt``, hashed the way setup-env stamps it) is the
same share one environment, kept under ``<workdir>/envs/<lock>`` for later runs. Every
invocation runs with ``PYTHONPATH=<its worktree>``, so ``import dpbench`` resolves to that
revision's source whichever worktree the shared environment's editable install points at.

The suites run one trial per invocation (``DPBENCH_TRIALS=1``), in the order base, head, head,
base, base, head, … so neither side always runs first (a drift of the machine over the job falls
on both sides alike). Each invocation saves one run under ``<workdir>/<id>/base`` or ``/head``;
the runs stay there, the worktrees are removed (``--keep`` keeps them), and
``dpbench compare --baseline RUN... --candidate RUN... --paired`` gives the verdict and the exit
code: trial i of base and trial i of head ran next to each other, so the test takes the log
ratios of those pairs (drift of the machine between pairs cancels).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from dpbench.gate.revisions import (
    ABError,
    Revision,
    SuiteFailed,
    cleanup,
    find_checkout,
    log_tail,
    prepare,
    resolve_commit,
    run_logged,
    say,
)

__all__ = [
    "DEFAULT_TRIALS",
    "EXIT_INTERRUPTED",
    "EXIT_SUITE_FAILED",
    "EXIT_TERMINATED",
    "WORKDIR_NAME",
    "abba_schedule",
    "invocation_env",
    "parse_trials",
    "register_ab",
    "run_ab",
]

DEFAULT_TRIALS = 6
WORKDIR_NAME = ".dpbench-ab"
BASE, HEAD = "base", "head"
# Exit codes beyond compare's 0 (no regression), 1 (regression), 2 (unusable input):
EXIT_SUITE_FAILED = 4  # a revision could not be set up, or one of its invocations failed
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143: a SIGTERM (a CI cancel) stopped the job


def parse_trials(raw: str) -> int:
    try:
        trials = int(raw)
    except (TypeError, ValueError):
        raise ABError(f"--trials must be an integer >= 1, got {raw!r}") from None
    if trials < 1:
        raise ABError(f"--trials must be an integer >= 1, got {trials}")
    return trials


def abba_schedule(trials: int) -> list[tuple[str, int]]:
    """``(side, trial)`` in run order: base 1, head 1, head 2, base 2, base 3, head 3, …"""
    order: list[tuple[str, int]] = []
    for trial in range(1, trials + 1):
        pair = (BASE, HEAD) if trial % 2 else (HEAD, BASE)
        order += [(side, trial) for side in pair]
    return order


def invocation_env(rev: Revision, base_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one invocation: this revision's source first on the path, one trial."""
    env = dict(os.environ if base_env is None else base_env)
    env["PYTHONPATH"] = os.pathsep.join([str(rev.worktree)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if rev.python is not None:
        env["PATH"] = os.pathsep.join([str(rev.python.parent), env.get("PATH", os.defpath)])
    # One trial per invocation: ab interleaves the trials of the two revisions itself.
    env["DPBENCH_TRIALS"] = "1"
    return env


def _run_trial(rev: Revision, trial: int, *, trials: int, pytest_args: Sequence[str], logs: Path) -> Path:
    name = f"ab-{rev.side}-t{trial:02d}"
    log = logs / f"{name}.log"
    cmd = [
        str(rev.python),
        "-m",
        "pytest",
        "suites/",
        f"--benchmark-save={name}",
        f"--benchmark-storage=file://{rev.storage}",
        "--benchmark-save-data",
        *pytest_args,
    ]
    what = f"{rev.label} trial {trial} of {trials}"
    started = time.monotonic()
    code = run_logged(cmd, cwd=rev.worktree, env=invocation_env(rev), log=log)
    if code != 0:
        raise SuiteFailed(f"{what} failed: pytest exited {code}; log: {log}\n{log_tail(log)}")
    saved = sorted(rev.storage.glob(f"*/[0-9][0-9][0-9][0-9]_{name}.json"))
    if len(saved) != 1:
        raise SuiteFailed(
            f"{what} saved {len(saved)} runs named {name} under {rev.storage} (expected one: "
            f"did the selection match only skipped cases?); log: {log}"
        )
    rev.runs.append(saved[0])
    say(f"{what}: {time.monotonic() - started:.0f} s → {saved[0]}")
    return saved[0]


def _compare(base: Revision, head: Revision, compare_args: Sequence[str]) -> int:
    from dpbench.gate.commands import compare_parser, run_compare

    print(f"baseline  = {base.label}: {len(base.runs)} runs in {base.storage}")
    print(f"candidate = {head.label}: {len(head.runs)} runs in {head.storage}", flush=True)
    # Run i of each side is trial i of the ABBA schedule: the two ran next to each other, so they
    # are judged as a pair (the log ratio of adjacent base/head trials cancels the machine's drift).
    argv = ["--baseline", *map(str, base.runs), "--candidate", *map(str, head.runs), "--paired", *compare_args]
    code = run_compare(compare_parser().parse_args(argv))
    sys.stdout.flush()
    return code


class _Terminated(KeyboardInterrupt):
    """SIGTERM, unwound as Ctrl-C is (every child stopped, worktrees removed), exit 143."""


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """A CI cancel (SIGTERM) stops the job like Ctrl-C: children stopped, worktrees removed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
        raise _Terminated("SIGTERM")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _uninterruptible() -> Iterator[None]:
    """Clean-up runs to the end: a second Ctrl-C must not leave a worktree behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _new_run_dir(workdir: Path, base: str, head: str) -> Path:
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{base[:7]}-{head[:7]}"
    for n in range(1, 1000):
        path = workdir / (stem if n == 1 else f"{stem}-{n}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise ABError(f"cannot make a new run directory under {workdir}")


def _write_schedule(run_dir: Path, revisions: Sequence[Revision], done: list[dict]) -> None:
    doc = {
        "sides": {
            r.side: {"rev": r.rev, "commit": r.commit, "lock": r.lock, "runs": [str(p) for p in r.runs]}
            for r in revisions
        },
        "invocations": done,
    }
    (run_dir / "schedule.json").write_text(json.dumps(doc, indent=1) + "\n")


def run_ab(
    *,
    base: str,
    head: str,
    trials: int = DEFAULT_TRIALS,
    pytest_args: Sequence[str] = (),
    cwd: Path | None = None,
    workdir: Path | None = None,
    envs: Path | None = None,
    python: Path | None = None,
    keep: bool = False,
    compare: bool = True,
    compare_args: Sequence[str] = (),
) -> int:
    """Prepare, measure alternately, compare. Returns the exit code (compare's, or 4 / 130 / 143)."""
    repo = find_checkout((cwd or Path.cwd()).resolve())
    commits = {BASE: resolve_commit(repo, base), HEAD: resolve_commit(repo, head)}
    workdir = (workdir or repo / WORKDIR_NAME).resolve()
    run_dir = _new_run_dir(workdir, commits[BASE], commits[HEAD])
    say(
        f"{base} = {commits[BASE][:10]} against {head} = {commits[HEAD][:10]}, {trials} "
        f"trial{'s' if trials > 1 else ''} each; runs go to {run_dir}"
    )
    revisions: list[Revision] = []
    done: list[dict] = []
    current = "preparing the revisions"
    try:
        with _sigterm_interrupts():
            prepare(
                repo=repo,
                revs={BASE: base, HEAD: head},
                run_dir=run_dir,
                envs=(envs or workdir / "envs"),
                python=python,
                revisions=revisions,
            )
            by_side = {r.side: r for r in revisions}
            for side, trial in abba_schedule(trials):
                current = f"{by_side[side].label} trial {trial} of {trials}"
                started = time.time()
                path = _run_trial(by_side[side], trial, trials=trials, pytest_args=pytest_args, logs=run_dir / "logs")
                done.append(
                    {"side": side, "trial": trial, "started_at": started, "ended_at": time.time(), "run": str(path)}
                )
                _write_schedule(run_dir, revisions, done)
            current = "comparing"
            return _compare(by_side[BASE], by_side[HEAD], compare_args) if compare else 0
    except SuiteFailed as e:
        print(f"dpbench ab: error: {e}", file=sys.stderr)
        return EXIT_SUITE_FAILED
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, _Terminated) else "interrupted"
        say(f"{how} while {current}; runs saved so far: {len(done)}, kept in {run_dir}")
        return EXIT_TERMINATED if isinstance(exc, _Terminated) else EXIT_INTERRUPTED
    finally:
        with _uninterruptible():
            if revisions:
                _write_schedule(run_dir, revisions, done)
            if keep:
                say(
                    f"--keep: worktrees left in {run_dir / 'worktrees'} (remove them with "
                    "git worktree remove --force PATH)"
                )
            else:
                cleanup(repo, revisions)


def _handle(args: argparse.Namespace) -> int:
    try:
        trials = parse_trials(args.trials)
        # Only what the user set: compare's own defaults stay the gate's defaults.
        compare_args = [
            f"--{name}={getattr(args, name)}"
            for name in ("threshold", "alpha", "markdown", "json")
            if getattr(args, name) is not None
        ]
        return run_ab(
            base=args.base,
            head=args.head,
            trials=trials,
            pytest_args=args.pytest_args,
            workdir=Path(args.workdir) if args.workdir else None,
            envs=Path(args.envs) if args.envs else None,
            python=Path(args.python).absolute() if args.python else None,
            keep=args.keep,
            compare=not args.no_compare,
            compare_args=compare_args,
        )
    except ABError as e:
        print(f"dpbench ab: error: {e}", file=sys.stderr)
        return 2


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
        help="measure two revisions of this checkout in one job, alternating trials, and compare them",
        usage="dpbench ab [options] BASE_REV HEAD_REV [-- PYTEST_ARGS ...]",
        description="Check out BASE_REV and HEAD_REV as worktrees, set each up with its own scripts/setup-env "
        "(one shared environment when their lock files match), run their suites one trial at a "
        "time in the order base, head, head, base, …, save every run and compare the sides. "
        "Everything after -- goes to every pytest invocation (e.g. -k 'ddp and mlp'). Exit code: "
        "compare's (0 no regression, 1 regression, 2 unusable input); 4 when a revision could "
        "not be set up or an invocation failed; 130 when interrupted (Ctrl-C), 143 on SIGTERM.",
        epilog="example: dpbench ab origin/main HEAD --trials 6 -- -k 'ddp and mlp'",
    )
    p.add_argument("base", metavar="BASE_REV", help="the baseline revision (branch, tag, commit)")
    p.add_argument("head", metavar="HEAD_REV", help="the candidate revision")
    p.add_argument(
        "--trials",
        default=str(DEFAULT_TRIALS),
        metavar="N",
        help=f"invocations (one trial each) per revision (default {DEFAULT_TRIALS})",
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
