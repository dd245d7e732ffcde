#!/usr/bin/env python
"""Cost of GradScaler's host sync in an fp16 training step.

``torch.amp.GradScaler.step`` reads the found-inf flag with ``.item()`` before it decides
whether to step the optimizer: a host sync in the optimizer phase, the only one inside a timed
dpbench step (``precision="fp16"``). This measures what it costs: the same fp16 step with the
scaler as dpbench runs it (``scale → backward → step → update``) against one that skips that
read (``scale → backward → unscale_ → optimizer.step → update``: same kernels, the skip-on-inf
decision dropped), in interleaved rounds (A B B A …) so drift hits both sides alike; each step
ends with a device sync, as dpbench's timed steps do.

    .venv/bin/python -m benchmarks.gradscaler_sync [--workload mlp] [--batch 256] [--rounds 8] [--steps 30]

Prints the median step time of each variant, the paired ratio with scaler / without (with its
95 % interval over rounds) and the host time blocked inside ``scaler.step``. Runs on CUDA; on a
machine without it, ``--device cpu`` checks that the script works (CPU has no async device, so
the ratio there says nothing about the sync).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from dpbench.stats import paired_ratio

__all__ = ["make_step", "measure", "main"]


def make_step(
    model: Any,
    optimizer: Any,
    scaler: Any,
    loss_fn: Callable,
    inputs: Any,
    target: Any,
    *,
    device_type: str,
    host_sync: bool,
    blocked: list[float],
) -> Callable[[], None]:
    """One fp16 step; ``host_sync=False`` drops the found-inf read (unscale_ + step instead)."""
    import torch

    from dpbench.strategies.base import call_model

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=torch.float16):
            loss = loss_fn(call_model(model, inputs), target)
        scaler.scale(loss).backward()
        if host_sync:
            began = time.perf_counter()
            scaler.step(optimizer)  # .item() on found_inf: waits for the backward to finish
            blocked.append(time.perf_counter() - began)
        else:
            scaler.unscale_(optimizer)
            optimizer.step()
        scaler.update()

    return step


def _timed(step: Callable[[], None], steps: int, sync: Callable[[], None]) -> float:
    times = []
    for _ in range(steps):
        sync()
        began = time.perf_counter()
        step()
        sync()  # the step ends when the device is done, as in dpbench's run_steps
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def measure(
    *, workload: str = "mlp", batch: int = 256, rounds: int = 8, steps: int = 30, device: str = "cuda"
) -> dict[str, Any]:
    import torch

    from dpbench.workloads import get_workload

    spec = get_workload(workload)
    inputs, target = spec.batch(0, batch, 0)
    from dpbench.strategies.base import to_device

    inputs, target = to_device(inputs, device), to_device(target, device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
    blocked: list[float] = []
    variants = {}
    for host_sync in (True, False):
        torch.manual_seed(0)
        model = spec.model().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler(device.split(":")[0])
        variants[host_sync] = make_step(
            model,
            optimizer,
            scaler,
            spec.loss,
            inputs,
            target,
            device_type=device.split(":")[0],
            host_sync=host_sync,
            blocked=blocked,
        )
        for _ in range(3):
            variants[host_sync]()  # warm-up: allocator, cuBLAS handles, kernel choice
    sync()
    blocked.clear()
    with_sync, without = [], []
    for r in range(rounds):
        order = (True, False) if r % 2 == 0 else (False, True)  # A B, B A, ...
        for host_sync in order:
            (with_sync if host_sync else without).append(_timed(variants[host_sync], steps, sync))
    ratio = paired_ratio(with_sync, without)
    return {
        "workload": workload,
        "batch": batch,
        "device": device,
        "rounds": rounds,
        "steps": steps,
        "with_sync_s": statistics.median(with_sync),
        "without_sync_s": statistics.median(without),
        "ratio": ratio.ratio,
        "ratio_ci95": [ratio.lo, ratio.hi],
        "blocked_in_scaler_step_s": statistics.median(blocked) if blocked else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("benchmarks.gradscaler_sync: CUDA unavailable (use --device cpu to check the script)", file=sys.stderr)
        return 2
    out = measure(workload=args.workload, batch=args.batch, rounds=args.rounds, steps=args.steps, device=args.device)
    lo, hi = out["ratio_ci95"]
    blocked = out["blocked_in_scaler_step_s"]
    print(
        f"gradscaler sync ({out['workload']}, batch {out['batch']}, {out['device']}, {out['rounds']} rounds x "
        f"{out['steps']} steps): with {out['with_sync_s'] * 1e3:.3f} ms, without {out['without_sync_s'] * 1e3:.3f} ms "
        f"per step; ratio {out['ratio']:.4f} [{lo:.4f}, {hi:.4f}]; host blocked in scaler.step "
        f"{'n/a' if blocked is None else f'{blocked * 1e3:.3f} ms'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
