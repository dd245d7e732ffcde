#!/usr/bin/env python
"""Overhead of dpbench.parallel.DataParallel against the plain module (and torch.nn.DataParallel on CUDA).

Variants are timed in interleaved rounds (the order alternates every round) so machine noise
hits all of them alike; each round times ``--iters`` calls and the table reports medians over
rounds. Cases:

* ``forward``: one replica (``DataParallel(m, [dev])``) vs calling ``m`` directly — target ≤ 2%.
  The model's forward takes a few ms so the fixed per-call overhead is measured honestly.
* ``fwd+bwd small``: one replica vs the plain module, forward + backward of a 256→512→10 MLP
  at batch 64 (about a millisecond a step on a CPU core): the one-device fast path — target ≤ 2%.
* ``fwd+bwd``: two replicas on one device (``["cpu", "cpu"]`` / ``["cuda:0", "cuda:0"]``) vs the
  plain module, forward + backward.
* CUDA only: the same against ``torch.nn.DataParallel`` with the same device ids.

Run: ``.venv/bin/python -m benchmarks.dp_overhead [--device cpu|cuda] [--rounds N] [--iters N] [--json PATH]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from dpbench.parallel import DataParallel


def make_model(width: int, depth: int, device: torch.device) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10)).to(device)


def small_mlp(device: torch.device) -> nn.Module:
    """The 256→512→10 MLP whose step is short enough that a fixed per-call cost shows."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_block(fn: Callable[[], None], iters: int, device: torch.device) -> float:
    """Mean seconds per call over ``iters`` calls."""
    # Sync before and after the block so the timer covers the device work of exactly these
    # calls (CUDA kernels run asynchronously); one sync per block keeps sync cost out of the mean.
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(device)
    return (time.perf_counter() - start) / iters


def interleaved(
    variants: dict[str, Callable[[], None]], rounds: int, iters: int, device: torch.device
) -> dict[str, list[float]]:
    for fn in variants.values():  # warm-up: allocator, thread start-up, kernel selection
        for _ in range(3):
            fn()
    names = list(variants)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            per_round[name].append(time_block(variants[name], iters, device))
    return per_round


def forward_fn(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        model(x)

    return run


def step_fn(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()

    return run


def summarize(case: str, per_round: dict[str, list[float]], baseline: str) -> list[dict]:
    rows = []
    base = per_round[baseline]
    for name, times in per_round.items():
        paired = [t - b for t, b in zip(times, base)]  # same round, same machine state
        med = statistics.median(times)
        rows.append(
            {
                "case": case,
                "variant": name,
                "median_ms": med * 1e3,
                "min_ms": min(times) * 1e3,
                "vs_baseline_pct": (med / statistics.median(base) - 1) * 100,
                "paired_overhead_us": statistics.median(paired) * 1e6,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (medians are taken over these)")
    parser.add_argument("--iters", type=int, default=20, help="calls timed per round and variant")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--json", type=Path, help="also write the rows here as JSON")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device: cuda requested but CUDA is not available")
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    same = [device, device]

    model = make_model(args.width, args.depth, device)
    x = torch.randn(args.batch, args.width, device=device)
    rows: list[dict] = []

    with DataParallel(model, [device]) as dp1:
        fwd = {"plain": forward_fn(model, x), "dpbench DP x1": forward_fn(dp1, x)}
        if device.type == "cuda":
            fwd["torch DP x1"] = forward_fn(nn.DataParallel(model, device_ids=[0]), x)
        rows += summarize("forward", interleaved(fwd, args.rounds, args.iters, device), "plain")

    # Fixed cost per call in µs: a tiny module makes DataParallel's own work the whole difference.
    tiny = nn.Linear(16, 16).to(device)
    xt = torch.randn(8, 16, device=device)
    with DataParallel(tiny, [device]) as tiny_dp:
        tiny_fwd = {"plain": forward_fn(tiny, xt), "dpbench DP x1": forward_fn(tiny_dp, xt)}
        if device.type == "cuda":
            tiny_fwd["torch DP x1"] = forward_fn(nn.DataParallel(tiny, device_ids=[0]), xt)
        rows += summarize("forward tiny", interleaved(tiny_fwd, args.rounds, args.iters * 20, device), "plain")

    small = small_mlp(device)
    xs = torch.randn(64, 256, device=device)
    with DataParallel(small, [device]) as small_dp:
        small_steps = {"plain": step_fn(small, xs), "dpbench DP x1": step_fn(small_dp, xs)}
        if device.type == "cuda":
            small_steps["torch DP x1"] = step_fn(nn.DataParallel(small, device_ids=[0]), xs)
        rows += summarize("fwd+bwd small", interleaved(small_steps, args.rounds, args.iters * 5, device), "plain")

    with DataParallel(model, same) as dp2, DataParallel(model, [device]) as dp1:
        steps = {"plain": step_fn(model, x), "dpbench DP x2 (same device)": step_fn(dp2, x)}
        if device.type == "cuda":
            steps["dpbench DP x1"] = step_fn(dp1, x)
            steps["torch DP x1"] = step_fn(nn.DataParallel(model, device_ids=[0]), x)
            try:  # torch may refuse repeated device ids; ours accepts them
                torch_dp2 = nn.DataParallel(model, device_ids=[0, 0])
                step_fn(torch_dp2, x)()
                steps["torch DP x2 (same device)"] = step_fn(torch_dp2, x)
            except Exception as exc:
                print(f"note: torch.nn.DataParallel(device_ids=[0, 0]) failed: {type(exc).__name__}: {exc}")
            if torch.cuda.device_count() > 1:
                ids = list(range(torch.cuda.device_count()))
                with DataParallel(model, ids) as dpn:
                    # per-GPU batch stays args.batch so every device has the same work as above
                    xn = torch.randn(args.batch * len(ids), args.width, device=device)
                    multi = {
                        f"dpbench DP x{len(ids)} GPUs": step_fn(dpn, xn),
                        f"torch DP x{len(ids)} GPUs": step_fn(nn.DataParallel(model, device_ids=ids), xn),
                    }
                    rows += summarize(
                        "fwd+bwd multi-GPU",
                        interleaved(multi, args.rounds, args.iters, device),
                        f"torch DP x{len(ids)} GPUs",
                    )
        rows += summarize("fwd+bwd", interleaved(steps, args.rounds, args.iters, device), "plain")

    print(
        f"device={device} threads={torch.get_num_threads()} model={args.depth}x Linear({args.width}) "
        f"batch={args.batch} "
        f"rounds={args.rounds} iters={args.iters} torch={torch.__version__}"
    )
    # "vs base %": ratio of medians; "paired +us": median over rounds of (variant - baseline) in the
    # same round; "min ms": best round, the least disturbed by other load on the machine.
    print(f"{'case':<18} {'variant':<30} {'median ms':>10} {'min ms':>9} {'vs base %':>10} {'paired +us':>11}")
    for r in rows:
        print(
            f"{r['case']:<18} {r['variant']:<30} {r['median_ms']:>10.3f} {r['min_ms']:>9.3f} "
            f"{r['vs_baseline_pct']:>+10.2f} {r['paired_overhead_us']:>+11.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"device": str(device), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
