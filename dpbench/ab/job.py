"""``dpbench ab BASE HEAD``: measure two revisions of this checkout (or two environments) in one job and compare them.

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

A side may be an environment instead of a revision (``--base-python``, ``--head-requirements``, …;
:mod:`dpbench.ab.environments`): both sides then run one revision, and only the environment
differs. Either way each side's provenance (torch and its build, CUDA, cuDNN, NCCL, Python, driver,
every package's version; :mod:`dpbench.ab.provenance`) is collected once, before any trial, saved
as ``<side>/provenance.json`` and in ``schedule.json``, and opens the verdict.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from dpbench._atomic import missing_root, remove_empty_tree
from dpbench._children import STOP_SIGNALS, stop_exit_code, stop_signals, stop_words
from dpbench.ab.environments import SideSpec, prepare_environments, same_environment
from dpbench.ab.provenance import probe, provenance_lines, unasked_differences
from dpbench.ab.revisions import (
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
from dpbench.ab.settle import PairsLook, SettlePlan, end_line, until_settled

__all__ = [
    "DEFAULT_TRIALS",
    "Judge",
    "EXIT_HUNG_UP",
    "EXIT_INTERRUPTED",
    "EXIT_SUITE_FAILED",
    "EXIT_TERMINATED",
    "WORKDIR_NAME",
    "abba_schedule",
    "invocation_env",
    "parse_trials",
    "run_ab",
]

DEFAULT_TRIALS = 6
WORKDIR_NAME = ".dpbench-ab"
BASE, HEAD = "base", "head"
# Exit codes beyond compare's 0 (no regression), 1 (regression), 2 (unusable input):
EXIT_SUITE_FAILED = 4  # a revision could not be set up, or one of its invocations failed
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143: a SIGTERM (a CI cancel) stopped the job
EXIT_HUNG_UP = 128 + signal.SIGHUP  # 129: a SIGHUP (the terminal closed) stopped it

Judge = Callable[[Sequence[str]], int]
"""Judges the saved pairs: takes ``dpbench compare``'s arguments naming them (``--baseline RUN...
--candidate RUN... --paired --differ-in ...``), prints the verdict, returns compare's exit code. The
command line hands in ``dpbench compare`` with the user's own compare options; ab sits below it."""


def parse_trials(raw: str) -> int:
    """``--trials``: ABBA rounds, a whole number >= 1 (:func:`dpbench.measure.settings.parse_count`),
    refused as ab's input."""
    from dpbench.measure.settings import parse_count

    try:
        return parse_count("--trials", raw, minimum=1)
    except ValueError as exc:
        raise ABError(str(exc)) from None


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


def _run_trial(
    rev: Revision, trial: int, *, trials: int, pytest_args: Sequence[str], logs: Path, select: Sequence[str] = ()
) -> Path:
    """One invocation: the suites (or only the pytest node ids ``select`` names), one trial, saved."""
    name = f"ab-{rev.side}-t{trial:02d}"
    log = logs / f"{name}.log"
    cmd = [
        str(rev.python),
        "-m",
        "pytest",
        *(select or ["suites/"]),
        f"--benchmark-save={name}",
        f"--benchmark-storage=file://{rev.storage}",
        "--benchmark-save-data",
        *pytest_args,
    ]
    what = f"{rev.label} trial {trial} of {trials}" + (f" ({len(select)} cases)" if select else "")
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


def _collect_provenance(revisions: Sequence[Revision], *, aa: bool, run_dir: Path) -> dict[str, dict]:
    """Each side's facts, probed in its interpreter before any trial (a side that cannot import torch or
    dpbench fails here, nothing measured); saved beside its runs once both sides answered."""
    facts = {
        r.side: probe(
            r.python,
            env=invocation_env(r),
            cwd=r.worktree,
            what=r.label if r.environment else f"{r.label}: interpreter {r.python}",
        )
        for r in revisions
    }
    for side, found in facts.items():
        (run_dir / side).mkdir(parents=True, exist_ok=True)
        (run_dir / side / "provenance.json").write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    lines = provenance_lines(facts[BASE], facts[HEAD], same_environment=aa, saved=run_dir / "*" / "provenance.json")
    warnings = [
        f"warning: the sides differ in what this job does not compare: {d}"
        for d in unasked_differences(facts[BASE], facts[HEAD])
    ]
    for line in lines + warnings:
        say(line)
    return {"lines": lines, "warnings": warnings, "facts": facts}


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def _compare(base: Revision, head: Revision, judge: Judge, provenance: dict, alpha: float | None = None) -> int:
    # The verdict opens with what differs between the sides (and what should not have).
    for line in provenance["lines"]:
        print(line)
    for line in provenance["warnings"]:
        print(line, file=sys.stderr)
    sys.stderr.flush()
    print(f"baseline  = {base.label}: {_runs(len(base.runs))} in {base.storage}")
    print(f"candidate = {head.label}: {_runs(len(head.runs))} in {head.storage}", flush=True)
    # Run i of each side is trial i of the ABBA schedule: the two ran next to each other, so they
    # are judged as a pair (the log ratio of adjacent base/head trials cancels the machine's drift).
    # The sides' software is what an A/B compares (the provenance lines said how it differs); a
    # difference of hardware is warned about above and by compare.
    argv = ["--baseline", *map(str, base.runs), "--candidate", *map(str, head.runs), "--paired"]
    argv += ["--differ-in", "torch,cuda,driver"]
    if alpha is not None:  # measured until settled: every look, the verdict too, judges at its share
        argv.append(f"--alpha={alpha!r}")
    code = judge(argv)
    sys.stdout.flush()
    return code


@contextlib.contextmanager
def _uninterruptible() -> Iterator[None]:
    """Clean-up runs to the end: a second Ctrl-C must not leave a worktree behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
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


def _write_schedule(
    run_dir: Path, revisions: Sequence[Revision], done: list[dict], provenance: dict | None = None
) -> None:
    facts = (provenance or {}).get("facts", {})
    doc = {
        "sides": {
            r.side: {
                "rev": r.rev,
                "commit": r.commit,
                "lock": r.lock,
                "environment": r.environment,
                "python": str(r.python) if r.python else None,
                "provenance": facts.get(r.side),
                "runs": [str(p) for p in r.runs],
            }
            for r in revisions
        },
        "provenance_lines": (provenance or {}).get("lines", []),
        "invocations": done,
    }
    (run_dir / "schedule.json").write_text(json.dumps(doc, indent=1) + "\n")


def _spec(side: str, value: str | SideSpec) -> SideSpec:
    return value if isinstance(value, SideSpec) else SideSpec(side=side, rev=value)


def run_ab(
    *,
    base: str | SideSpec,
    head: str | SideSpec,
    rev: str | None = None,
    trials: int = DEFAULT_TRIALS,
    pytest_args: Sequence[str] = (),
    cwd: Path | None = None,
    workdir: Path | None = None,
    envs: Path | None = None,
    python: Path | None = None,
    keep: bool = False,
    judge: Judge | None = None,
    settle: SettlePlan | None = None,
    look: PairsLook | None = None,
    budget: str | None = None,
) -> int:
    """Prepare, measure alternately, compare. Returns the exit code (compare's, or 4 / 130 / 143).

    ``base``/``head``: revisions (a name, or a :class:`SideSpec` with ``rev``), or two environment
    sides (:class:`SideSpec` with ``python`` or ``requirements``) running ``rev`` (None: the checkout).
    ``judge``: how the pairs are judged once measured (None: they are only saved, ``--no-compare``).
    ``settle`` and ``look``: measure the cases still inconclusive after the first rounds until settled
    (:mod:`dpbench.ab.settle`; ``budget``: ``--budget`` as typed, for the last line); None: the
    ``trials`` rounds only, judged at the whole alpha."""
    job_started = time.monotonic()
    sides = (_spec(BASE, base), _spec(HEAD, head))
    environments = sides[0].environment is not None
    repo = find_checkout((cwd or Path.cwd()).resolve())
    if environments:
        commit = resolve_commit(repo, rev or "HEAD")
        tags, shown = (
            (commit, "envs"),
            f"{sides[0].environment} against {sides[1].environment} at {rev or 'the checkout'} = {commit[:10]}",
        )
        aa = same_environment(*sides)
    else:
        commits = {s.side: resolve_commit(repo, s.rev) for s in sides}
        tags = (commits[BASE], commits[HEAD])
        shown = f"{sides[0].rev} = {commits[BASE][:10]} against {sides[1].rev} = {commits[HEAD][:10]}"
        aa = commits[BASE] == commits[HEAD]
    workdir = (workdir or repo / WORKDIR_NAME).resolve()
    envs = envs or workdir / "envs"
    # What this job makes and leaves empty (a side that failed before anything was saved) goes again.
    made = [missing_root(workdir), missing_root(envs)]
    run_dir = _new_run_dir(workdir, *tags)
    made.append(run_dir)
    more = (
        f", then only the cases still inconclusive, up to {settle.max_trials}"
        if settle is not None and look is not None and judge is not None and settle.max_trials > trials
        else ""
    )
    say(f"{shown}, {trials} trial{'s' if trials > 1 else ''} each{more}; runs go to {run_dir}")
    revisions: list[Revision] = []
    done: list[dict] = []
    provenance: dict | None = None
    current = "preparing the sides"

    def invoke(side: str, trial: int, of: int, select: Sequence[str] = ()) -> None:
        nonlocal current
        current = f"{by_side[side].label} trial {trial} of {of}"
        started = time.time()
        path = _run_trial(
            by_side[side], trial, trials=of, pytest_args=pytest_args, logs=run_dir / "logs", select=select
        )
        done.append({"side": side, "trial": trial, "started_at": started, "ended_at": time.time(), "run": str(path)})
        _write_schedule(run_dir, revisions, done, provenance)

    def extra_round(trial: int, select: Sequence[str]) -> None:
        for side in (BASE, HEAD) if trial % 2 else (HEAD, BASE):  # the ABBA order goes on
            invoke(side, trial, settle.max_trials if settle else trial, [*select])

    by_side: dict[str, Revision] = {}
    try:
        # A CI cancel (SIGTERM) or a closed terminal (SIGHUP) stops the job like Ctrl-C: children
        # stopped, worktrees removed.
        with stop_signals():
            if environments:
                prepare_environments(
                    repo=repo,
                    sides=sides,
                    rev=rev,
                    run_dir=run_dir,
                    envs=envs,
                    revisions=revisions,
                )
            else:
                prepare(
                    repo=repo,
                    revs={s.side: s.rev for s in sides},
                    run_dir=run_dir,
                    envs=envs,
                    python=python,
                    revisions=revisions,
                )
            current = "probing the sides' environments"
            provenance = _collect_provenance(revisions, aa=aa, run_dir=run_dir)
            by_side.update({r.side: r for r in revisions})
            first_started = time.monotonic()
            for side, trial in abba_schedule(trials):
                invoke(side, trial, trials)
            if judge is None:
                return 0
            if settle is None or look is None:
                current = "comparing"
                return _compare(by_side[BASE], by_side[HEAD], judge, provenance)
            current = "judging the first rounds"
            outcome = until_settled(
                settle,
                look=look,
                run_round=extra_round,
                runs=lambda: ([str(p) for p in by_side[BASE].runs], [str(p) for p in by_side[HEAD].runs]),
                started=job_started,
                first_rounds_s=time.monotonic() - first_started,
                say=say,
            )
            current = "comparing"
            code = _compare(by_side[BASE], by_side[HEAD], judge, provenance, alpha=settle.look_alpha)
            seconds = time.monotonic() - job_started
            print(end_line(outcome, settle, budget=budget, trials=len(done), seconds=seconds), flush=True)
            return code
    except SuiteFailed as e:
        print(f"dpbench ab: error: {e}", file=sys.stderr)
        return EXIT_SUITE_FAILED
    except KeyboardInterrupt as exc:
        say(f"{stop_words(exc)} while {current}; runs saved so far: {len(done)}, kept in {run_dir}")
        return stop_exit_code(exc)
    finally:
        with _uninterruptible():
            if revisions:
                _write_schedule(run_dir, revisions, done, provenance)
            if keep:
                say(
                    f"--keep: worktrees left in {run_dir / 'worktrees'} (remove them with "
                    "git worktree remove --force PATH)"
                )
            else:
                cleanup(repo, revisions)
            for directory in made:
                if directory is not None:
                    remove_empty_tree(directory)
