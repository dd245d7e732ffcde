#!/usr/bin/env python
"""One-GPU smoke of every strategy that can run on one GPU: each path runs at least once.

    .venv/bin/python scripts/gpu_smoke.py [--workload mlp] [--steps 2]

single w1; dp w2 (two replicas on cuda:0); manual w2; ddp, allreduce, zero w2 (two ranks on
one GPU: gloo); fsdp w1 (nccl needs one GPU per rank); torch-dp w1 (one replica per GPU). Each
case launches, trains a few steps, times the control and takes the case metrics (peak,
math mode, GPU keys), then prints one line. On a machine with N >= 2 GPUs the multi-rank
cases run on two GPUs instead (nccl), as the placement chooses. Exit 1 at the first failure,
with the case and the error on one line; 2 when CUDA is unavailable.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

__all__ = ["CASES", "smoke_line", "main"]

# (strategy, world_size, options): what runs on one GPU (see the module doc).
CASES: tuple[tuple[str, int, dict], ...] = (
    ("single", 1, {}),
    ("dp", 2, {}),
    ("manual", 2, {}),
    ("ddp", 2, {}),
    ("ddp", 2, {"accumulation_steps": 2}),
    ("allreduce", 2, {"mode": "overlap"}),
    ("zero", 2, {}),
    ("fsdp", 1, {}),
    ("torch-dp", 1, {}),
    ("single", 1, {"precision": "fp16"}),  # GradScaler's path
)


def smoke_line(
    strategy: str, world_size: int, options: dict, info: dict, step_s: float, control_s: float, metrics: dict
) -> str:
    opts = ",".join(f"{k}={v}" for k, v in sorted(options.items()))
    return (
        f"ok {strategy} w{world_size}{' ' + opts if opts else ''}: backend {info.get('backend')} "
        f"devices {','.join(info.get('devices', []))} step {step_s * 1e3:.2f} ms control {control_s * 1e3:.2f} ms "
        f"peak {metrics.get('peak_source')} math {metrics.get('math_mode')} gpus {len(metrics.get('gpu_keys') or [])}"
    )


def _one(strategy: str, world_size: int, options: dict, *, workload: str, steps: int) -> str:
    import dpbench

    with dpbench.launch(
        strategy, workload, world_size=world_size, global_batch=16, device="cuda", seed=0, timeout=120.0, **options
    ) as run:
        run.step(1)  # warm-up
        stats = run.step(steps)
        control = run.control()
        metrics = run.case_metrics()
        return smoke_line(strategy, world_size, options, run.info, min(stats.step_times), control, metrics)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu-smoke: CUDA unavailable", file=sys.stderr)
        return 2
    for strategy, world_size, options in CASES:
        began = time.perf_counter()
        try:
            line = _one(strategy, world_size, options, workload=args.workload, steps=args.steps)
        except Exception as exc:  # report the case and stop: the first failure is the one to fix
            print(f"FAIL {strategy} w{world_size} {options}: {type(exc).__name__}: {str(exc).splitlines()[0:1]}")
            return 1
        print(f"{line} ({time.perf_counter() - began:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
