#!/usr/bin/env python
"""How much does dpbench's harness add to a training step?

The headline: ``dpbench.launch("single", ...)`` against the same bare loop (forward,
loss, backward, SGD step) run *in this calling process*, as a user's own ``python train.py``
would run it: default environment, torch's default thread count, nothing pinned. Short rounds
alternate between the two so machine noise hits both alike; each round pair gives a ratio of
median step times, and the verdict is ``dpbench.stats.paired_ratio`` of them — the suite's one
paired-ratio estimator: the median of the pair ratios with its 95% interval — with
the pairs' interquartile range, the rounds, and the load average (a busy machine swamps a 3 %
effect). Target: <= 1.03 on an idle machine. ``--all`` adds the older two views: the bare loop in a worker
process of its
own, and both loops inside one worker.

One script is one draw of two processes' luck (the calling process and the harness's worker), and
that luck moves the ratio by more than its rounds' interval says (measurements:
docs/calibration.md#harness-overhead). ``--sessions N`` therefore runs the measurement in N fresh Python processes, one
after another, and judges the session ratios (the unit of repetition) with the same
``paired_ratio``: the median across sessions and its 95% interval.

    .venv/bin/python -m benchmarks.harness_overhead [--workload mlp] [--rounds 40] [--all] [--sessions N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import dpbench
from dpbench.launcher import WorkerPool, available_cores
from dpbench.stats import paired_ratio


def bare_setup(ctx, workload_name: str, seed: int, lr: float) -> None:
    import torch

    workload = dpbench.get_workload(workload_name)
    torch.manual_seed(seed)
    model = workload.model()
    ctx.state.update(workload=workload, model=model, opt=torch.optim.SGD(model.parameters(), lr=lr), step=0)


def bare_steps(ctx, global_batch: int, seed: int, k: int) -> list[float]:
    """The loop a user would write by hand; batches are made outside the clock, as in dpbench.

    The same loop as dpbench's trainers, in the same order: ``zero_grad`` first (the textbook
    ``optimizer.zero_grad(); loss = ...; loss.backward(); optimizer.step()``; zeroing at the end of
    the step frees the gradients at the same point). Zeroing between the forward and the backward
    instead makes a loop faster than the trainer's step for a reason outside the harness: with
    the gradients freed before the forward, the activations land in their memory, the backward's new
    gradients need fresh memory at the heap's top, and glibc's malloc trims and re-faults it every
    step (with ``MALLOC_TRIM_THRESHOLD_``/``MALLOC_MMAP_THRESHOLD_`` fixed both orders take the same
    time; measurements: docs/calibration.md#page-faults). That is a property of the user's loop and
    the C library, not of the harness, so the reference runs the trainer's order (``--decompose``
    shows the parts).
    """
    s = ctx.state
    times = []
    for _ in range(k):
        x, y = s["workload"].batch(s["step"], global_batch, seed)
        start = time.perf_counter()
        s["opt"].zero_grad(set_to_none=True)
        out = s["model"](*x) if isinstance(x, tuple) else s["model"](x)
        loss = s["workload"].loss(out, y)
        loss.backward()
        s["opt"].step()
        times.append(time.perf_counter() - start)  # CPU work is synchronous: nothing to sync
        s["step"] += 1
    return times


def same_process_setup(ctx, spec, workload_name: str, seed: int, lr: float) -> None:
    """Build dpbench's `single` trainer and a bare model side by side in this one process."""
    from dpbench.strategies import get_strategy

    bare_setup(ctx, workload_name, seed, lr)
    trainer = get_strategy("single")(spec, dpbench.get_workload(workload_name), ctx)
    trainer.setup()
    ctx.state["trainer"] = trainer


def same_process_round(ctx, global_batch: int, seed: int, k: int, harness_first: bool) -> dict[str, list[float]]:
    got = {}
    for which in ("h", "b") if harness_first else ("b", "h"):
        if which == "h":
            got["h"] = ctx.state["trainer"].run_steps(k, heartbeat=ctx.heartbeat)["times"]
        else:
            got["b"] = bare_steps(ctx, global_batch, seed, k)
    return got


def measure_same_process(
    workload: str, *, global_batch: int, steps: int, rounds: int, threads: int, seed: int = 0, lr: float = 0.05
) -> tuple[float, float, list[float], float]:
    """Harness step loop vs bare loop in ONE worker process (no process-to-process spread), plus
    the per-call cost of ``run.step(k)`` (parent round trip) measured through dpbench.launch."""
    with dpbench.launch(
        "single", workload, global_batch=global_batch, seed=seed, lr=lr, threads_per_worker=threads
    ) as run:
        spec = run.spec
        run.step(2)
        call_overheads = []
        for _ in range(rounds):
            start = time.perf_counter()
            stats = run.step(steps)
            call_overheads.append(time.perf_counter() - start - sum(stats.step_times))
    harness, bare, ratios = [], [], []
    with WorkerPool(1, process_group=False, threads_per_worker=threads) as pool:
        pool.run(same_process_setup, spec, workload, seed, lr)
        pool.run(same_process_round, global_batch, seed, 2, True)  # warm-up, untimed
        for r in range(rounds):
            got = pool.run(same_process_round, global_batch, seed, steps, r % 2 == 0)[0]
            harness += got["h"]
            bare += got["b"]
            ratios.append(statistics.median(got["h"]) / statistics.median(got["b"]))
    return statistics.median(harness), statistics.median(bare), ratios, statistics.median(call_overheads)


def measure(
    workload: str, *, global_batch: int, steps: int, rounds: int, threads: int, seed: int = 0, lr: float = 0.05
) -> tuple[float, float, list[float]]:
    harness, bare, ratios = [], [], []
    with (
        dpbench.launch(
            "single", workload, global_batch=global_batch, seed=seed, lr=lr, threads_per_worker=threads
        ) as run,
        WorkerPool(1, process_group=False, threads_per_worker=threads) as pool,
    ):
        pool.run(bare_setup, workload, seed, lr)
        run.step(2)  # warm-up, untimed: allocator and first-call costs
        pool.run(bare_steps, global_batch, seed, 2)
        for r in range(rounds):
            # Alternate which goes first so neither always follows the other.
            order = ("h", "b") if r % 2 == 0 else ("b", "h")
            got = {}
            for which in order:
                if which == "h":
                    got[which] = run.step(steps).step_times
                else:
                    got[which] = pool.run(bare_steps, global_batch, seed, steps)[0]
            harness += got["h"]
            bare += got["b"]
            ratios.append(statistics.median(got["h"]) / statistics.median(got["b"]))
    return statistics.median(harness), statistics.median(bare), ratios


def measure_calling_process(
    workload: str, *, global_batch: int, steps: int, rounds: int, seed: int = 0, lr: float = 0.05
) -> tuple[float, float, list[float], dict]:
    """launch("single") with its default threads vs the bare loop in this process, interleaved."""
    import torch

    class _Here:  # the bare loop's state lives in this process, as in a user's script
        state: dict = {}

    here = _Here()
    bare_setup(here, workload, seed, lr)
    harness, bare, ratios = [], [], []
    with dpbench.launch("single", workload, global_batch=global_batch, seed=seed, lr=lr) as run:
        facts = {
            "harness_threads": run.run_info.get("threads_per_worker") if hasattr(run, "run_info") else None,
            "calling_process_threads": torch.get_num_threads(),
            "omp_env": {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "GOMP_", "KMP_", "MKL_"))},
        }
        run.step(2)  # warm-up, untimed
        bare_steps(here, global_batch, seed, 2)
        for r in range(rounds):
            order = ("h", "b") if r % 2 == 0 else ("b", "h")
            got = {}
            for which in order:
                got[which] = run.step(steps).step_times if which == "h" else bare_steps(here, global_batch, seed, steps)
            harness += got["h"]
            bare += got["b"]
            ratios.append(statistics.median(got["h"]) / statistics.median(got["b"]))
    return statistics.median(harness), statistics.median(bare), ratios, facts


def decompose_setup(ctx, spec, workload_name: str) -> None:
    """dpbench's ``single`` trainer, with the bare loop's state pointing at its model and optimizer."""
    from dpbench.launcher.run import _setup_worker

    _setup_worker(ctx, spec, dpbench.get_workload(workload_name))
    trainer = ctx.state["trainer"]
    ctx.state.update(workload=trainer.workload, model=trainer.model, opt=trainer.optimizer, step=0)


def train_step_loop(ctx, global_batch: int, seed: int, k: int) -> list[float]:
    """The trainer's own ``train_step`` under the bare loop's clock (no run_steps around it)."""
    trainer, times = ctx.state["trainer"], []
    for _ in range(k):
        x, y = trainer.workload.batch(trainer._step, global_batch, seed)
        start = time.perf_counter()
        trainer.train_step(x, y)
        times.append(time.perf_counter() - start)
        trainer._step += 1
    return times


def run_steps_loop(ctx, k: int) -> list[float]:
    """``Strategy.run_steps`` as launch calls it, minus the heartbeat."""
    return ctx.state["trainer"].run_steps(k)["times"]


DECOMPOSE_VIEWS = ("bare", "train_step", "run_steps", "launch")


def measure_decomposed(
    workload: str, *, global_batch: int, steps: int, rounds: int, session: int, seed: int = 0, lr: float = 0.05
) -> dict[str, list[float]]:
    """Where launch('single')'s gap to the bare loop sits. Four processes, each with the same trainer
    state built the same way, run: the bare loop on the trainer's model and optimizer; the trainer's
    ``train_step`` in that loop; ``run_steps``; and ``launch('single')`` itself (``run.step``: pipes,
    heartbeat, parent). Each view has a process to itself, because a process's luck is the largest
    term (two identical bare-loop workers agree within a few % on average, single sessions ±5%);
    the launch starts first (its spec builds the others), the other workers in a shuffled order, and each
    round's order is shuffled (seeded by ``session``). → per view, each
    round's median step time."""
    import contextlib
    import random

    rng = random.Random(session)
    views = list(DECOMPOSE_VIEWS)
    rng.shuffle(views)
    with contextlib.ExitStack() as stack:
        run = stack.enter_context(dpbench.launch("single", workload, global_batch=global_batch, seed=seed, lr=lr))
        spec = run.spec
        calls = {"launch": lambda k: run.step(k).step_times}
        for view in views:
            if view == "launch":
                continue
            pool = stack.enter_context(WorkerPool(1, process_group=False, threads_per_worker=spec.threads_per_worker))
            pool.run(decompose_setup, spec, workload)
            fn = {
                "bare": lambda p, k: p.run(bare_steps, global_batch, seed, k)[0],
                "train_step": lambda p, k: p.run(train_step_loop, global_batch, seed, k)[0],
                "run_steps": lambda p, k: p.run(run_steps_loop, k)[0],
            }[view]
            calls[view] = (lambda p, fn: lambda k: fn(p, k))(pool, fn)  # noqa: B023 - bound by the outer call
        for call in calls.values():
            call(2)  # warm-up, untimed
        medians: dict[str, list[float]] = {view: [] for view in views}
        for _ in range(rounds):
            order = views[:]
            rng.shuffle(order)
            for view in order:
                medians[view].append(statistics.median(calls[view](steps)))
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", nargs="+", default=["mlp"])
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3, help="steps per round")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--threads", type=int, default=available_cores(), help="torch threads (--all views only)")
    parser.add_argument("--all", action="store_true", help="also the two-worker and one-worker views")
    parser.add_argument(
        "--decompose",
        action="store_true",
        help="instead of the headline: bare loop vs train_step vs run_steps vs launch, each in its "
        "own worker (use with --sessions)",
    )
    parser.add_argument("--session-seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--sessions",
        type=int,
        default=1,
        help="fresh Python processes to measure in, one after another (the verdict is across them)",
    )
    args = parser.parse_args(argv)
    if args.sessions < 1:
        parser.error(f"--sessions must be >= 1, got {args.sessions}")
    if args.sessions > 1:
        return across_sessions(args)
    if args.decompose:
        return decompose(args)
    print(
        f"launch('single') / bare loop in the calling process; global batch {args.global_batch}, "
        f"{args.rounds} interleaved rounds x {args.steps} steps; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'workload':<14}{'harness ms':>12}{'bare ms':>10}{'ratio':>8}{'95% interval':>18}{'pairs IQR':>18}")
    for name in args.workload:
        harness, bare, ratios, facts = measure_calling_process(
            name, global_batch=args.global_batch, steps=args.steps, rounds=args.rounds
        )
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else (ratios[0],) * 3
        pr = paired_ratio(ratios, [1.0] * len(ratios))
        print(
            f"{name:<14}{harness * 1e3:>12.2f}{bare * 1e3:>10.2f}{pr.ratio:>8.3f}{f'[{pr.lo:.3f}, {pr.hi:.3f}]':>18}"
            f"{f'[{q1:.3f}, {q3:.3f}]':>18}"
            f"   (calling process: {facts['calling_process_threads']} threads; OpenMP env {facts['omp_env'] or '{}'})"
        )
        print(f"SESSION-RATIO {name} {pr.ratio!r}", flush=True)  # read by --sessions
        if not args.all:
            continue
        harness, bare, ratios = measure(
            name, global_batch=args.global_batch, steps=args.steps, rounds=args.rounds, threads=args.threads
        )
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        pr = paired_ratio(ratios, [1.0] * len(ratios))
        print(
            f"{name:<14}{harness * 1e3:>12.2f}{bare * 1e3:>10.2f}{pr.ratio:>8.3f}{f'[{pr.lo:.3f}, {pr.hi:.3f}]':>18}"
            f"{f'[{q1:.3f}, {q3:.3f}]':>18}   (bare loop in a worker of its own)"
        )
        harness, bare, ratios, per_call = measure_same_process(
            name, global_batch=args.global_batch, steps=args.steps, rounds=args.rounds, threads=args.threads
        )
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        pr = paired_ratio(ratios, [1.0] * len(ratios))
        print(
            f"{name:<14}{harness * 1e3:>12.2f}{bare * 1e3:>10.2f}{pr.ratio:>8.3f}{f'[{pr.lo:.3f}, {pr.hi:.3f}]':>18}"
            f"{f'[{q1:.3f}, {q3:.3f}]':>18}   (both in one worker)"
        )
        print(
            f"{'':<14}run.step({args.steps}) round trip beyond the steps: {per_call * 1e3:.2f} ms per call "
            f"= {per_call / args.steps / bare * 100:.1f}% of a step at k={args.steps}"
        )
    print(f"load average at the end {os.getloadavg()[0]:.1f} (on {available_cores()} cores)")
    return 0


def decompose(args: argparse.Namespace) -> int:
    print(
        f"each view / the bare loop, every view in its own worker on the same trainer state; "
        f"{args.rounds} shuffled rounds x {args.steps} steps; load average {os.getloadavg()[0]:.1f}"
    )
    for name in args.workload:
        medians = measure_decomposed(
            name, global_batch=args.global_batch, steps=args.steps, rounds=args.rounds, session=args.session_seed
        )
        for view in DECOMPOSE_VIEWS[1:]:
            pr = paired_ratio(medians[view], medians["bare"])
            print(
                f"{name:<10}{view:<12}{statistics.median(medians[view]) * 1e3:>8.2f} ms vs "
                f"{statistics.median(medians['bare']) * 1e3:.2f} ms  {pr.ratio:.3f} [{pr.lo:.3f}, {pr.hi:.3f}]"
            )
            print(f"SESSION-RATIO {name}:{view} {pr.ratio!r}", flush=True)
    return 0


def across_sessions(args: argparse.Namespace) -> int:
    """Run this script once per session in a fresh process; → the verdict across the sessions."""
    ratios: dict[str, list[float]] = {}
    for session in range(1, args.sessions + 1):
        cmd = [
            sys.executable,
            __file__,
            "--workload",
            *args.workload,
            "--global-batch",
            str(args.global_batch),
            "--steps",
            str(args.steps),
            "--rounds",
            str(args.rounds),
        ]
        if args.decompose:
            cmd += ["--decompose", "--session-seed", str(session)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"session {session} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        for line in proc.stdout.splitlines():
            if line.startswith("SESSION-RATIO "):
                _, name, value = line.split()
                ratios.setdefault(name, []).append(float(value))
        print(f"session {session}: " + ", ".join(f"{n} {r[-1]:.3f}" for n, r in ratios.items()), flush=True)
    for name, values in ratios.items():
        pr = paired_ratio(values, [1.0] * len(values))
        what = f"{name.split(':')[1]} / bare loop (own workers)" if ":" in name else "launch('single') / bare loop"
        print(
            f"{name.split(':')[0]}: {what} over {len(values)} fresh sessions: {pr.ratio:.3f} "
            f"[{pr.lo:.3f}, {pr.hi:.3f}] (median, 95% interval; sessions {min(values):.3f}-"
            f"{max(values):.3f})"
        )
    print(f"load average at the end {os.getloadavg()[0]:.1f} (on {available_cores()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
