"""Hand-built Kineto traces with answers worked out by hand (times in microseconds)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

# The thread that holds the steps, gloo's worker thread, and the autograd engine's device thread
# (on CUDA the backward pass, and DDP's gradient hooks with their all-reduce, run there).
MAIN, GLOO, AUTOGRAD = 1, 2, 3


def op(name, ts, dur, *, tid=MAIN, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, "args": args}


def step(number, ts, dur):
    return op(f"ProfilerStep#{number}", ts, dur, cat="user_annotation")


def memory(ts, total):
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "name": "[memory]",
        "pid": 7,
        "tid": MAIN,
        "ts": ts,
        "args": {"Total Allocated": total, "Bytes": 1, "Device Type": 0},
    }


def cpu_rank(
    call_at: float, *, base_ns: int = 10**18, shift_us: float = 0.0, rank: int = 0, caller: int = MAIN
) -> dict:
    """One step [0, 100]: compute ops [10, 50] and an autograd node [60, 90] whose hook issues an
    all-reduce at ``call_at`` (2 µs on the ``caller`` thread: the main thread on CPU, AUTOGRAD as
    on CUDA) that gloo's thread runs until 95.

    Expected (call_at=70): compute = [10,50] ∪ [60,70] ∪ [72,90] = 68; comm = [70,95] = 25;
    overlap = [72,90] = 18; exposed = 7; idle = 100 − (40 + 35) = 25.
    """
    s = shift_us
    events = [
        step(1, 0 + s, 100),
        op("aten::mm", 10 + s, 30),
        op("aten::add", 30 + s, 20),
        op("autograd::engine::evaluate_function: AddmmBackward0", 60 + s, 30, tid=caller),
        op("c10d::allreduce_", call_at + s, 2, tid=caller),
        op("gloo:all_reduce", 70 + s, 25, tid=GLOO, cat="user_annotation"),
        op("aten::copy_", 80 + s, 5, tid=GLOO),  # gloo's own copy: communication, not compute
        op("dpbench:forward", 10 + s, 40, cat="user_annotation"),
        memory(20 + s, 1000),
        memory(30 + s, 4000),
        memory(55 + s, 9000),
    ]
    return {
        "traceEvents": events,
        "baseTimeNanoseconds": base_ns,
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo"},
    }


def cuda_rank() -> dict:
    """Step [0, 100] on the host; kernels: sgemm [10,40], nccl all-reduce [30,60], memcpy [60,65].

    Expected: compute = 30 + 5 = 35; comm = 30; overlap = [30,40] = 10; exposed = 20;
    idle = 100 − |[10,65]| = 45.
    """
    events = [
        step(1, 0, 100),
        op("aten::mm", 5, 3),
        op("cudaLaunchKernel", 6, 1, cat="cuda_runtime"),
        op("ampere_sgemm_128x64_nn", 10, 30, tid=7, cat="kernel"),
        op("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 30, 30, tid=8, cat="kernel"),
        op("Memcpy DtoD (Device -> Device)", 60, 5, tid=7, cat="gpu_memcpy"),
        # Kineto mirrors host annotations onto the GPU timeline: not a second step.
        op("ProfilerStep#1", 10, 55, tid=7, cat="gpu_user_annotation"),
        op("dpbench:forward", 10, 30, cat="user_annotation"),
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "name": "[memory]",
            "pid": 7,
            "tid": MAIN,
            "ts": 20,
            "args": {"Total Allocated": 5000, "Device Type": 1},
        },
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "name": "[memory]",
            "pid": 7,
            "tid": MAIN,
            "ts": 21,
            "args": {"Total Allocated": 99, "Device Type": 0},
        },
    ]
    return {"traceEvents": events, "baseTimeNanoseconds": 10**18}


def write(path: Path, trace: dict) -> Path:
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return path


def cuda_gloo_rank() -> dict:
    """Two ranks sharing one GPU run gloo: the all-reduce runs on the host. Step [0, 100]; kernels:
    sgemm [10,40] (compute); DDP's hook on the autograd engine's device thread issues
    c10d::allreduce_ [50,52] (never on the main thread on CUDA), which hands the tensor to gloo's
    thread, whose gloo:all_reduce [50,80] launches a device-to-host copy [52,56] (correlation 11)
    and a host-to-device copy [75,79] (correlation 12); a later kernel [60,70] is compute.

    Expected: compute = [10,40] ∪ [60,70] = 40; comm = [50,80] = 30 (the copies inside it);
    overlap = [60,70] = 10; exposed = 20; idle = 100 − |[10,40] ∪ [50,80]| = 40; one collective,
    arriving at 50 on the host.
    """
    return {
        "traceEvents": [
            step(1, 0, 100),
            op("aten::mm", 5, 3),
            op("cudaLaunchKernel", 6, 1, cat="cuda_runtime", correlation=10),
            op("ampere_sgemm_128x64_nn", 10, 30, tid=7, cat="kernel", correlation=10),
            op("c10d::allreduce_", 50, 2, tid=AUTOGRAD, Seq=0),
            op("gloo:all_reduce", 50, 30, tid=GLOO, cat="user_annotation"),
            op("cudaMemcpyAsync", 51, 1, tid=GLOO, cat="cuda_runtime", correlation=11),
            op("Memcpy DtoH (Device -> Pinned)", 52, 4, tid=7, cat="gpu_memcpy", correlation=11),
            op("cudaLaunchKernel", 55, 1, cat="cuda_runtime", correlation=13),
            op("vectorized_elementwise_kernel", 60, 10, tid=7, cat="kernel", correlation=13),
            op("cudaMemcpyAsync", 74, 1, tid=GLOO, cat="cuda_runtime", correlation=12),
            op("Memcpy HtoD (Pinned -> Device)", 75, 4, tid=7, cat="gpu_memcpy", correlation=12),
        ],
        "baseTimeNanoseconds": 10**18,
        "distributedInfo": {"rank": 0, "world_size": 2, "backend": "gloo"},
    }
