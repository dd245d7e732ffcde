"""Every default the documentation states is the code's: each check below formats the sentence a
page must contain from the constant the code uses, so changing a default in the code alone fails
here until the page says the same (and a page that drifts fails too).
"""

from __future__ import annotations

import inspect

import pytest
from _docs_pages import flat, page

from dpbench.ab import job as ab
from dpbench.cluster import exit_watch, liveness, node, parent_watch
from dpbench.gate import compare
from dpbench.history import changepoints
from dpbench.launcher.run import launch
from dpbench.measure import tracing
from dpbench.measure.profiles import resolve_profile
from dpbench.workers import base, lifeline


def num(x: float) -> str:
    """A number as the pages write it: 0.2, 6, 300, 1e-4."""
    if 0 < abs(x) < 1e-3:
        return f"{x:.0e}".replace("e-0", "e-")
    return f"{x:g}"


def pct(x: float) -> str:
    return f"{x * 100:g}%"


QUICK = resolve_profile("quick", cuda_count=0, cpu_count=2, environ={})
FULL = resolve_profile("full", cuda_count=0, cpu_count=2, environ={})
LAUNCH_TIMEOUT = inspect.signature(launch).parameters["timeout"].default

# (page, the words it must contain, formatted from the code), one per documented default.
CHECKS = [
    # the gate (compare, ab)
    ("gate.md", f"`--threshold` (default {pct(compare.DEFAULT_THRESHOLD)})"),
    ("gate.md", f"(`--alpha`, default {num(compare.DEFAULT_ALPHA)} —"),
    ("gate.md", f"`--threshold` (default {pct(compare.DEFAULT_THRESHOLD)}), and significant"),
    ("cli.md", f"| `--threshold THRESHOLD` | `{pct(compare.DEFAULT_THRESHOLD)}` |"),
    ("cli.md", f"| `--alpha ALPHA` | `{num(compare.DEFAULT_ALPHA)}` |"),
    ("cli.md", f"| `--threshold THRESHOLD` | compare's (`{pct(compare.DEFAULT_THRESHOLD)}`) |"),
    ("cli.md", f"| `--alpha ALPHA` | compare's (`{num(compare.DEFAULT_ALPHA)}`) |"),
    ("cli.md", f"| `--trials N` | `{ab.DEFAULT_TRIALS}` |"),
    ("gate.md", f"(`--trials` per side, default {ab.DEFAULT_TRIALS};"),
    ("gate.md", f"{ab.EXIT_SUITE_FAILED} when a revision could not be set up"),
    ("gate.md", f"{ab.EXIT_INTERRUPTED} on Ctrl-C, {ab.EXIT_TERMINATED} on SIGTERM"),
    ("gate.md", f"and {ab.EXIT_HUNG_UP} on SIGHUP"),
    ("cli.md", f"| {ab.EXIT_SUITE_FAILED} | `ab`: a side could not be set up"),
    ("cli.md", f"| {ab.EXIT_TERMINATED} | `run`, `ab`: stopped by SIGTERM"),
    ("cli.md", f"| {ab.EXIT_HUNG_UP} | `run`, `ab`: stopped by SIGHUP"),
    # history
    ("cli.md", f"| `--threshold THRESHOLD` | `{pct(changepoints.DEFAULT_THRESHOLD)}` | the smallest change reported |"),
    ("cli.md", f"| `--alpha ALPHA` | `{num(changepoints.DEFAULT_ALPHA)}` | p below which"),
    ("history.md", f"`--threshold` (default {pct(changepoints.DEFAULT_THRESHOLD)}, the GPU workflow's)"),
    ("history.md", f"{num(changepoints.DEFAULT_ALPHA)} was chosen by simulation"),
    # profiles: trials, rounds, round length
    ("suites.md", f"default {QUICK.trials}), each in freshly started workers"),
    ("suites.md", f"| `DPBENCH_TRIALS` | from the profile ({QUICK.trials}) |"),
    (
        "suites.md",
        f"{QUICK.trials} trials × ({QUICK.warmup_rounds} untimed + {QUICK.rounds} timed rounds"
        f" of ~{num(QUICK.target_round_s)} s)",
    ),
    ("suites.md", f"{FULL.trials} trials × {FULL.rounds} rounds of ~{num(FULL.target_round_s)} s"),
    ("suites.md", f"a round lasts about {num(QUICK.target_round_s)} s (quick) / {num(FULL.target_round_s)} s (full)"),
    ("suites.md", f"R rounds of `run.step(k)` ({QUICK.rounds} quick / {FULL.rounds} full)"),
    # traces
    ("traces.md", f"{tracing.TRACE_WARMUP} profiler warm-up step and {tracing.TRACE_STEPS} recorded steps run under"),
    # launch and the workers
    ("python-api.md", f"`timeout` (default {num(LAUNCH_TIMEOUT)} s)"),
    ("python-api.md", f"`FAILURE_GRACE_SECONDS`, {num(base.FAILURE_GRACE_SECONDS)} s"),
    ("python-api.md", f"gives its processes {num(lifeline.REAPER_GRACE_SECONDS)} s to leave"),
    # several nodes: join timeout, grace, liveness
    (
        "nodes.md",
        f"by default {num(node.JOIN_SKEW_FACTOR)} × the head's own start-up, at least {num(node.JOIN_SKEW_MIN)} s "
        f"and at most {num(node.DEFAULT_JOIN_TIMEOUT)} s",
    ),
    (
        "nodes.md",
        f"or, by default, {num(node.JOIN_SKEW_FACTOR)} × the head's own start-up (torchrun starts every node's "
        f"workers at once, and each does what the head did), at least {num(node.JOIN_SKEW_MIN)} s and at most "
        f"{num(node.DEFAULT_JOIN_TIMEOUT)} s",
    ),
    ("nodes.md", f"`DPBENCH_EXIT_BARRIER_GRACE` seconds (default {num(exit_watch.GRACE_SECONDS)};"),
    ("nodes.md", f"| `DPBENCH_EXIT_BARRIER_GRACE` ({num(exit_watch.GRACE_SECONDS)} s) |"),
    ("suites.md", f"| `DPBENCH_EXIT_BARRIER_GRACE` | `{num(exit_watch.GRACE_SECONDS)}` |"),
    ("nodes.md", f"one silent for {num(liveness.LOST_AFTER_SECONDS)} s"),
    ("nodes.md", f"| no heartbeat for {num(liveness.LOST_AFTER_SECONDS)} s |"),
    ("nodes.md", f"polled every {num(parent_watch.POLL_SECONDS)} s"),
]


@pytest.mark.parametrize("name, words", CHECKS, ids=[f"{p}:{w[:40]}" for p, w in CHECKS])
def test_the_documented_default_is_the_codes(name, words):
    assert flat(words) in flat(page(name)), f"docs/{name} should say {words!r} (the code's default)"


def test_the_formatting_matches_the_pages_style():
    assert (num(0.2), num(300.0), num(1e-4), num(0.01), pct(0.10), pct(0.05)) == (
        "0.2",
        "300",
        "1e-4",
        "0.01",
        "10%",
        "5%",
    )
