#!/usr/bin/env python
"""One-GPU smoke of every strategy that can run on one GPU: each path runs at least once.

    python -m tools.gpu_smoke [--device cuda|cpu] [--steps 2] [--only PATTERN]

single w1; dp w2 (two replicas on cuda:0); manual w2; ddp, allreduce, zero w2 (two ranks on
one GPU: gloo); fsdp w1 (nccl needs one GPU per rank); torch-dp w1 (one replica per GPU);
fp16 with GradScaler; bf16 under single, ddp w2 and fsdp; the workloads with cuDNN convolutions
and attention (lenet, resnet18, transformer) once each. Each case launches, trains a few steps,
times the control and takes the case metrics (peak, math mode, GPU keys, whether replicas sharing
the GPU ran serially), then prints one line. On a machine with N >= 2 GPUs the multi-rank cases run
on two GPUs instead (nccl), as the placement chooses.

NVML is held open for the whole smoke on CUDA, as the suites hold it for a session: with
persistence mode off the driver tears a GPU's state down when its last client leaves, and each
case's fresh workers would pay the re-initialisation (seconds) in their start.

Every case runs; a failing one prints ``FAIL <case>: <error>`` and then the worker's traceback
(every failing rank's), and the exit status is 1. ``--device cpu`` is the CPU stand-in that
``tools/gpu-check --dry-run`` rehearses: the same cases, and a case the CPU cannot run (torch-dp,
fp16) is a ``skip`` line with its reason; on CUDA a refused case fails. Exit 2: CUDA asked for but
unavailable.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import traceback

__all__ = ["CASES", "failure_text", "nvml_held", "smoke_line", "main"]

# (strategy, world_size, options, workload): what runs on one GPU (see the module doc).
CASES: tuple[tuple[str, int, dict, str], ...] = (
    ("single", 1, {}, "mlp"),
    ("dp", 2, {}, "mlp"),
    ("manual", 2, {}, "mlp"),
    ("ddp", 2, {}, "mlp"),
    ("ddp", 2, {"accumulation_steps": 2}, "mlp"),
    ("allreduce", 2, {"mode": "overlap"}, "mlp"),
    ("zero", 2, {}, "mlp"),
    ("fsdp", 1, {}, "mlp"),
    ("torch-dp", 1, {}, "mlp"),
    ("single", 1, {"precision": "fp16"}, "mlp"),  # GradScaler's path
    ("single", 1, {"precision": "bf16"}, "mlp"),
    ("ddp", 2, {"precision": "bf16"}, "mlp"),
    ("fsdp", 1, {"precision": "bf16"}, "mlp"),
    ("single", 1, {}, "lenet"),  # cuDNN convolutions
    ("ddp", 2, {}, "resnet18"),  # cuDNN convolutions and BatchNorm under DDP
    ("single", 1, {}, "transformer"),  # attention (scaled_dot_product_attention's kernels)
)


def case_name(strategy: str, world_size: int, options: dict, workload: str) -> str:
    opts = ",".join(f"{k}={v}" for k, v in sorted(options.items()))
    return f"{strategy} w{world_size}{' ' + opts if opts else ''} {workload}"


def smoke_line(
    strategy: str,
    world_size: int,
    options: dict,
    info: dict,
    step_s: float,
    control_s: float,
    metrics: dict,
    workload: str = "mlp",
) -> str:
    line = (
        f"ok {case_name(strategy, world_size, options, workload)}: backend {info.get('backend')} "
        f"devices {','.join(info.get('devices', []))} step {step_s * 1e3:.2f} ms control {control_s * 1e3:.2f} ms "
        f"peak {metrics.get('peak_source')} math {metrics.get('math_mode')} gpus {len(metrics.get('gpu_keys') or [])}"
    )
    if metrics.get("replica_concurrency"):
        line += f"; {metrics['replica_concurrency']}"
    return line


def failure_text(exc: BaseException) -> str:
    """The error's first line, then the worker's traceback: each failing rank's (a WorkerError
    carries them), else this process's own."""
    first = (str(exc).splitlines() or [""])[0]
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        body = "\n".join(f"--- rank {rank} ---\n{text.rstrip()}" for rank, text in sorted(failures.items()))
    else:
        body = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
    return f"{type(exc).__name__}: {first}\n{body}"


@contextlib.contextmanager
def nvml_held(device: str):
    """NVML initialised while the cases run on CUDA (the module, or None where it cannot start:
    no nvidia-ml-py or no driver, and the cases start as they would anyway)."""
    if device != "cuda":
        yield None
        return
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        yield None
        return
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _one(strategy: str, world_size: int, options: dict, *, workload: str, device: str, steps: int) -> str:
    import dpbench

    with dpbench.launch(
        strategy, workload, world_size=world_size, global_batch=16, device=device, seed=0, timeout=120.0, **options
    ) as run:
        run.step(1)  # warm-up
        stats = run.step(steps)
        control = run.control()
        metrics = run.case_metrics()
        info = run.info.as_dict()
        return smoke_line(strategy, world_size, options, info, min(stats.step_times), control, metrics, workload)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    args = parser.parse_args(argv)
    import torch

    from dpbench.strategies import StrategyUnavailable

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu-smoke: CUDA unavailable", file=sys.stderr)
        return 2
    failed = 0
    with nvml_held(args.device):
        for strategy, world_size, options, workload in CASES:
            name = case_name(strategy, world_size, options, workload)
            if args.only not in name:
                continue
            began = time.perf_counter()
            try:
                line = _one(strategy, world_size, options, workload=workload, device=args.device, steps=args.steps)
            except StrategyUnavailable as exc:
                if args.device == "cpu":  # the stand-in: what only a GPU runs
                    print(f"skip {name}: {exc}", flush=True)
                    continue
                failed += 1  # on the GPU every case is one that runs there: a refusal is a hole
                print(f"FAIL {name}: refused on {args.device}: {exc}", flush=True)
                continue
            except Exception as exc:  # every case runs: one device call should find every failure
                failed += 1
                print(f"FAIL {name} ({time.perf_counter() - began:.1f} s): {failure_text(exc)}", flush=True)
                continue
            print(f"{line} ({time.perf_counter() - began:.1f} s)", flush=True)
    print(f"gpu-smoke: {failed} of the cases failed" if failed else "gpu-smoke: every case ran", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
