#!/usr/bin/env python
"""Overhead of the resource sampler on a fixed CPU workload.

Runs the same torch matmul loop with and without a ResourceSampler (20 Hz by default,
watching this process), in interleaved rounds whose order alternates so drift on a shared
machine hits both sides alike, and prints the median times, the slowdown and the achieved
sampling interval and its jitter.

    .venv/bin/python -m benchmarks.sampler_overhead [--rounds 30] [--seconds 1] [--interval 0.05]

Timings are wall-clock on the CPU, where torch runs matmuls synchronously, so the timer
brackets exactly the work. Expect noise when other processes share the machine: compare
the per-round paired ratios, not single rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch  # noqa: E402  (the benchmark side may use torch; the sampler never imports it)

from dpbench.sampler import ResourceSampler


def workload(a: torch.Tensor, b: torch.Tensor, iterations: int) -> tuple[float, float]:
    """Fixed work: ``iterations`` matmuls; returns (wall seconds, process CPU seconds)."""
    cpu0, start = time.process_time(), time.perf_counter()
    for _ in range(iterations):
        torch.mm(a, b)  # synchronous on CPU: the loop's end is the work's end
    return time.perf_counter() - start, time.process_time() - cpu0


def sampler_cpu_per_tick(interval: float, backend: str, seconds: float = 3.0) -> tuple[float, int]:
    """CPU seconds the sampling thread uses per sample, measured in place: this process
    sleeps while the sampler runs, so its CPU time is the sampler's (wake-ups and cold
    caches included, which cost more than the same sample taken in a tight loop)."""
    sampler = ResourceSampler(interval, pids=[os.getpid()], backend=backend)
    sampler.start()
    cpu0 = time.process_time()
    time.sleep(seconds)
    used = time.process_time() - cpu0
    sampler.stop()
    ticks = max(1, sampler.summary()["sample_count"] - 1)  # the stop-time sample is outside
    return used / ticks, ticks


def _quartiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0], q[2]


def calibrate(a, b, seconds: float) -> int:
    workload(a, b, 20)  # warm up allocator and BLAS threads
    probe = 50
    # The least disturbed of a few probes: other processes only ever slow a probe down.
    elapsed = min(workload(a, b, probe)[0] for _ in range(3))
    return max(probe, int(probe * seconds / elapsed))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="interleaved round pairs (default 30)")
    parser.add_argument("--seconds", type=float, default=1.0, help="target seconds per round (default 1)")
    parser.add_argument("--interval", type=float, default=0.05, help="sampling interval in s (default 0.05 = 20 Hz)")
    parser.add_argument("--size", type=int, default=384, help="matrix size (default 384)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--backend", default="auto", help="sampler backend: auto, nvml or cpu")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0:
        parser.error("--rounds must be >= 1 and --seconds > 0")
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    a = torch.randn(args.size, args.size)
    b = torch.randn(args.size, args.size)
    iterations = calibrate(a, b, args.seconds)
    print(
        f"workload: {iterations} matmuls of {args.size}x{args.size}, torch threads={torch.get_num_threads()}, "
        f"cpus={os.cpu_count()}, sampler interval={args.interval}s ({1 / args.interval:.0f} Hz), "
        f"{args.rounds} round pairs"
    )

    without: list[float] = []
    with_sampler: list[float] = []
    cpu_without: list[float] = []
    cpu_with: list[float] = []
    intervals: list[float] = []
    jitters: list[float] = []
    backend = None
    for r in range(args.rounds):
        order = ("off", "on") if r % 2 == 0 else ("on", "off")
        for mode in order:
            if mode == "off":
                wall, cpu = workload(a, b, iterations)
                without.append(wall)
                cpu_without.append(cpu)
                continue
            sampler = ResourceSampler(args.interval, pids=[os.getpid()], backend=args.backend)
            with sampler:
                wall, cpu = workload(a, b, iterations)
            with_sampler.append(wall)
            cpu_with.append(cpu)
            summary = sampler.summary()
            backend = summary["backend"]
            if summary["achieved_interval_jitter"] is not None:  # needs >= 3 samples
                intervals.append(summary["achieved_interval_mean"])
                jitters.append(summary["achieved_interval_jitter"])
            if summary["errors"]:
                print(f"  sampler errors: {summary['errors']}", file=sys.stderr)
        print(
            f"  round {r + 1}: wall off {without[-1]:.3f}s on {with_sampler[-1]:.3f}s "
            f"ratio {with_sampler[-1] / without[-1]:.4f} | cpu off {cpu_without[-1]:.3f}s "
            f"on {cpu_with[-1]:.3f}s ratio {cpu_with[-1] / cpu_without[-1]:.4f}"
        )

    med_off, med_on = statistics.median(without), statistics.median(with_sampler)
    ratios = [on / off for on, off in zip(with_sampler, without)]
    per_tick, _ = sampler_cpu_per_tick(args.interval, args.backend)
    cpu_ratios = [on / off for on, off in zip(cpu_with, cpu_without)]
    result = {
        "backend": backend,
        "rounds": args.rounds,
        "iterations": iterations,
        "median_without_s": med_off,
        "median_with_s": med_on,
        "slowdown_pct_of_medians": 100 * (med_on / med_off - 1),
        "slowdown_pct_paired_median": 100 * (statistics.median(ratios) - 1),
        "interval": args.interval,
        "achieved_interval_mean": statistics.fmean(intervals) if intervals else None,
        "achieved_interval_jitter": statistics.fmean(jitters) if jitters else None,
        "slowdown_pct_paired_iqr": [100 * (q - 1) for q in _quartiles(ratios)],
        "sampler_cpu_per_tick_s": per_tick,
        "sampler_share_of_one_core_pct": 100 * per_tick / args.interval,
        "median_process_cpu_without_s": statistics.median(cpu_without),
        "median_process_cpu_with_s": statistics.median(cpu_with),
        # CPU time does not grow while other tenants hold the cores, so on a shared machine
        # this is the steadier figure; it includes the sampler thread's own CPU.
        "cpu_time_overhead_pct_paired_median": 100 * (statistics.median(cpu_ratios) - 1),
        "cpu_time_overhead_pct_paired_iqr": [100 * (q - 1) for q in _quartiles(cpu_ratios)],
    }
    print(f"backend: {backend}")
    print(f"median without sampler: {med_off:.3f} s   with: {med_on:.3f} s")
    lo, hi = result["slowdown_pct_paired_iqr"]
    print(
        f"slowdown: {result['slowdown_pct_of_medians']:+.2f} % (medians), "
        f"{result['slowdown_pct_paired_median']:+.2f} % (median of paired ratios; IQR {lo:+.2f} .. {hi:+.2f} %)"
    )
    if intervals:
        print(
            f"achieved interval: {1000 * result['achieved_interval_mean']:.2f} ms mean, "
            f"{1000 * result['achieved_interval_jitter']:.2f} ms jitter (std) for "
            f"{1000 * args.interval:.0f} ms requested (mean over rounds)"
        )
    print(
        f"sampler thread CPU (idle process, in place): {1e6 * per_tick:.0f} us per sample = "
        f"{result['sampler_share_of_one_core_pct']:.2f} % of one core, "
        f"{result['sampler_share_of_one_core_pct'] / (os.cpu_count() or 1):.2f} % of this machine"
    )
    print(
        f"process CPU time, median: {result['median_process_cpu_without_s']:.3f} s without, "
        f"{result['median_process_cpu_with_s']:.3f} s with the sampler; paired overhead "
        f"{result['cpu_time_overhead_pct_paired_median']:+.2f} % (IQR "
        f"{result['cpu_time_overhead_pct_paired_iqr'][0]:+.2f} .. "
        f"{result['cpu_time_overhead_pct_paired_iqr'][1]:+.2f} %)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
