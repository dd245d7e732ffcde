"""CUDA's library workspaces: torch's sizes per handle, two handles per device, a line item of the
estimate on a GPU and nothing on a CPU."""

from __future__ import annotations

import pytest

from dpbench.strategies.estimate import Estimator
from dpbench.strategies.workspaces import cuda_workspaces

MiB = 2**20
SM90_CUBLAS = 32 * MiB
DEFAULT_CUBLAS = 4096 * 1024 * 2 + 16 * 1024 * 8  # torch's ":4096:2:16:8"


@pytest.mark.parametrize(
    "capability, environ, cublas, cublaslt",
    [
        ((9, 0), {}, SM90_CUBLAS, MiB),  # H100 / H200
        (None, {}, SM90_CUBLAS, MiB),  # not known: the largest default
        ((8, 0), {}, DEFAULT_CUBLAS, MiB),
        ((10, 0), {}, DEFAULT_CUBLAS, MiB),  # torch's 32 MiB is for 9.0 only
        ((9, 0), {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}, SM90_CUBLAS, MiB),
        ((8, 0), {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}, 128 * 1024, 128 * 1024),  # cuBLASLt capped at cuBLAS's
        ((8, 0), {"CUBLAS_WORKSPACE_CONFIG": "garbage"}, DEFAULT_CUBLAS, MiB),  # torch warns, keeps its default
        ((9, 0), {"CUBLASLT_WORKSPACE_SIZE": "65536"}, SM90_CUBLAS, SM90_CUBLAS),
        ((9, 0), {"CUBLASLT_WORKSPACE_SIZE": "65536", "TORCH_CUBLASLT_UNIFIED_WORKSPACE": "0"}, SM90_CUBLAS, 64 * MiB),
        ((9, 0), {"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "1"}, SM90_CUBLAS, 0),  # shares cuBLAS's
    ],
)
def test_workspace_sizes_follow_torchs_defaults_and_settings(capability, environ, cublas, cublaslt):
    w = cuda_workspaces(capability, environ)
    assert (w.cublas_bytes, w.cublaslt_bytes, w.handles) == (cublas, cublaslt, 2)
    assert w.per_device() == 2 * (cublas + cublaslt)


def test_the_description_is_generated_from_the_sizes():
    assert cuda_workspaces((9, 0), {}).describe() == "2 handles x (cuBLAS 32 MiB + cuBLASLt 1 MiB) on sm90"
    assert cuda_workspaces(None, {}).describe().endswith("on capability unknown, sm90's sizes")


def test_a_gpu_estimate_counts_the_workspaces_per_device_and_a_cpu_estimate_is_unchanged():
    estimator = Estimator("mlp", activations=False)
    sm90 = cuda_workspaces((9, 0), {})
    per_device = 2 * (32 + 1) * MiB
    cpu = estimator.case("ddp", world_size=2, global_batch=8)
    gpu = estimator.case("ddp", world_size=2, global_batch=8, cuda=sm90)
    assert [r.workspace_bytes for r in cpu.ranks] == [0, 0] and cpu.cuda_workspaces is None
    assert [r.workspace_bytes for r in gpu.ranks] == [per_device, per_device]
    assert gpu.need_bytes() == cpu.need_bytes() + per_device
    assert gpu.to_dict()["cuda_workspaces"]["per_device_bytes"] == per_device
    # One process holding every replica computes on each device: dp at 3 counts three.
    dp = estimator.case("dp", world_size=3, global_batch=9, cuda=sm90)
    assert dp.ranks[0].workspace_bytes == 3 * per_device


@pytest.mark.slow
def test_the_peak_carries_the_workspaces_on_top_of_the_step():
    estimator = Estimator("mlp")
    sm90 = cuda_workspaces((9, 0), {})
    cpu = estimator.case("single", world_size=1, global_batch=8)
    gpu = estimator.case("single", world_size=1, global_batch=8, cuda=sm90)
    assert gpu.ranks[0].peak_bytes == cpu.ranks[0].peak_bytes + sm90.per_device()
