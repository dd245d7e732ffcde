"""The CUDA-only paths of fsdp, zero and the common options (skipped with a reason without a GPU).

fp16 (autocast + GradScaler, FSDP's ShardedGradScaler), fsdp's cpu_offload, zero's
overlap_with_ddp (NCCL only, one GPU per rank), compile on CUDA, and the CUDA memory/peak
figures of the case metrics. Compared with ``single`` on CUDA in the same precision;
tolerances are looser than on CPU (cuBLAS reduces in other orders).
"""

from __future__ import annotations

import pytest
import torch
from _toy_workloads import MLP

import dpbench
from dpbench.measure.derive import derive
from dpbench.strategies import StrategyUnavailable
from dpbench.strategies._options import check_compiler

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

K, GLOBAL_BATCH, LR = 3, 11, 0.1


def gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def one_gpu_per_rank(world: int):
    return pytest.mark.skipif(gpus() < world, reason=f"needs {world} GPUs (one per rank), found {gpus()}")


def train(strategy: str, world_size: int, **options):
    with dpbench.launch(
        strategy,
        MLP,
        world_size=world_size,
        global_batch=GLOBAL_BATCH,
        device="cuda",
        seed=3,
        lr=LR,
        timeout=120.0,
        **options,
    ) as run:
        stats = run.step(K)
        return run.parameters(), stats, run


@pytest.fixture(scope="module")
def single_runs():
    cache: dict[tuple, dict] = {}

    def get(**options):
        key = tuple(sorted(options.items()))
        if key not in cache:
            cache[key] = train("single", 1, **options)[0]
        return cache[key]

    return get


def assert_close(params, ref, atol):
    assert set(params) == set(ref)
    for name, expected in ref.items():
        torch.testing.assert_close(
            params[name], expected, atol=atol, rtol=1e-3, msg=lambda m, name=name: f"{name}: {m}"
        )


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_fsdp_on_cuda_matches_single(optimizer, single_runs):
    world = min(2, gpus())
    params, _, _ = train("fsdp", world, optimizer=optimizer)
    assert_close(params, single_runs(optimizer=optimizer), 1e-4)


def test_fsdp_cpu_offload_matches_single(single_runs):
    params, _, _ = train("fsdp", min(2, gpus()), cpu_offload=True, optimizer="adamw")
    assert_close(params, single_runs(optimizer="adamw"), 1e-4)


def test_zero_on_cuda_matches_single(single_runs):
    params, _, _ = train("zero", 2, optimizer="adamw")  # two ranks share a GPU over gloo when there is one
    assert_close(params, single_runs(optimizer="adamw"), 1e-4)


@one_gpu_per_rank(2)
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_zero_overlap_with_ddp_matches_single(optimizer, single_runs):
    params, _, _ = train("zero", 2, overlap_with_ddp=True, optimizer=optimizer)
    assert_close(params, single_runs(optimizer=optimizer), 1e-4)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "zero", "dp"])
def test_fp16_with_loss_scaling_matches_single_in_fp16(strategy, single_runs):
    world = min(2, gpus()) if strategy == "fsdp" else 2
    options = {"replicas_per_device": 2} if strategy == "dp" and gpus() < 2 else {}
    params, _, run = train(strategy, world, precision="fp16", **options)
    assert run.info.options["precision"] == "fp16"
    assert_close(params, single_runs(precision="fp16"), 1e-2)


def compile_refusal(device: str = "cuda") -> str | None:
    """Why ``compile=True`` would be refused here (no C compiler, no ``Python.h``, no ``libcuda``
    Triton can find: what the strategy itself checks before any process), or None."""
    try:
        check_compiler("ddp", device=device)
    except StrategyUnavailable as exc:
        return str(exc)
    return None


def test_compile_on_cuda_matches_eager_single(single_runs):
    refusal = compile_refusal()
    if refusal is not None:  # a machine without the toolchain: skipped with the refusal, not failed
        pytest.skip(refusal)
    params, _, _ = train("ddp", min(2, gpus()) if gpus() >= 2 else 1, compile=True)
    assert_close(params, single_runs(), 1e-4)


def test_case_metrics_on_cuda_report_allocator_peaks_and_the_table_peak():
    with dpbench.launch(
        "fsdp",
        MLP,
        world_size=min(2, gpus()),
        global_batch=GLOBAL_BATCH,
        device="cuda",
        seed=3,
        lr=LR,
        optimizer="adamw",
    ) as run:
        stats = run.step(K)
        metrics = run.case_metrics()
    for m in metrics["memory_per_rank"]:
        assert m["peak_kind"] == "cuda_max_allocated"
        assert m["peak_reserved_bytes"] >= m["peak_bytes"] > 0
    name = torch.cuda.get_device_name(0)
    from dpbench.strategies._metrics import table_peak_flops

    if table_peak_flops(name, "fp32") is not None:
        assert metrics["peak_source"] == f"table:{name}"
        derived = derive(metrics, step_time_s=min(stats.step_times), world_size=min(2, gpus()))
        assert 0 < derived["mfu"] <= 1
    assert metrics["compute_only_step_s"] > 0 and metrics["collective_time_s"] > 0
