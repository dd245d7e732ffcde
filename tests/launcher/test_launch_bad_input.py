"""Bad input to dpbench.launch: a clear error naming the argument, before any process starts."""

from __future__ import annotations

import re

import pytest
import torch
from _launch_helpers import HEALTHY, batch, loss, stray_children
from torch import nn

import dpbench
from dpbench.strategies import StrategyUnavailable, get_strategy, list_strategies
from dpbench.workloads.base import Workload

CASES = [
    # (strategy, workload, kwargs, exception, message)
    (
        "nope",
        HEALTHY,
        {},
        ValueError,
        "Unknown strategy 'nope'. Available names: single, dp, torch-dp, ddp, manual, allreduce, fsdp, zero",
    ),
    ("ddp", "no-such-workload", {}, ValueError, "Unknown workload 'no-such-workload'. Available names: "),
    ("ddp", 42, {}, TypeError, "or a dpbench.Workload, got int"),
    ("ddp", HEALTHY, {"world_size": 0}, ValueError, "world_size must be an int >= 1, got 0"),
    (
        "ddp",
        HEALTHY,
        {"world_size": 4, "global_batch": 3},
        ValueError,
        "global_batch must be >= world_size so every replica gets at least one sample, got global_batch=3 "
        "with world_size=4",
    ),
    ("single", HEALTHY, {"world_size": 2}, ValueError, "world_size must be 1, got 2"),
    ("ddp", HEALTHY, {"device": "tpu"}, ValueError, "device must be 'cpu' or 'cuda', got 'tpu'"),
    ("ddp", HEALTHY, {"lr": 0}, ValueError, "lr must be a positive number, got 0"),
    ("ddp", HEALTHY, {"timeout": -1}, ValueError, "timeout must be a positive number of seconds, got -1"),
    ("ddp", HEALTHY, {"threads_per_worker": 0}, ValueError, "threads_per_worker must be an int >= 1, got 0"),
    (
        "ddp",
        HEALTHY,
        {"bogus": 1},
        ValueError,
        "Unknown option(s) 'bogus' for strategy 'ddp'. Known options: "
        "accumulation_steps, broadcast_buffers, bucket_cap_mb, checkpoint, comm_hook, compile, find_unused_parameters, "
        "gradient_as_bucket_view, optimizer, precision, static_graph, sync_batchnorm",
    ),
    (
        "single",
        HEALTHY,
        {"mode": "overlap"},
        ValueError,
        "Unknown option(s) 'mode' for strategy 'single'. Known options: checkpoint, compile, optimizer, precision",
    ),
    (
        "allreduce",
        HEALTHY,
        {"mode": "ring"},
        ValueError,
        "allreduce option mode must be one of per-param, bucketed, overlap, got 'ring'",
    ),
    (
        "allreduce",
        HEALTHY,
        {"bucket_cap_mb": 0},
        ValueError,
        "allreduce option bucket_cap_mb must be a positive number, got 0",
    ),
    (
        "ddp",
        HEALTHY,
        {"bucket_cap_mb": -1},
        ValueError,
        "ddp option bucket_cap_mb must be None or a positive number, got -1",
    ),
    (
        "ddp",
        HEALTHY,
        {"comm_hook": "int8"},
        ValueError,
        "ddp option comm_hook must be None or one of fp16, bf16, powersgd, got 'int8'",
    ),
    ("ddp", HEALTHY, {"static_graph": "yes"}, ValueError, "ddp option static_graph must be True or False, got 'yes'"),
    (
        "ddp",
        HEALTHY,
        {"world_size": 2, "global_batch": 8, "accumulation_steps": 5},
        ValueError,
        "ddp option accumulation_steps must be an int between 1 and the smallest per-rank batch (4), got 5",
    ),
    ("ddp", HEALTHY, {"accumulation_steps": 2, "static_graph": True}, StrategyUnavailable, "pytorch/pytorch#143580"),
    ("ddp", HEALTHY, {"comm_hook": "bf16"}, StrategyUnavailable, "comm_hook='bf16' needs device='cuda'"),
    (
        "dp",
        HEALTHY,
        {"world_size": 2, "global_batch": 8, "chunk_sizes": [5, 4]},
        ValueError,
        "dp option chunk_sizes must be 2 positive ints summing to global_batch=8, got [5, 4]",
    ),
    (
        "dp",
        HEALTHY,
        {"replicas_per_device": 0},
        ValueError,
        "dp option replicas_per_device must be None or an int >= 1, got 0",
    ),
    ("torch-dp", HEALTHY, {}, StrategyUnavailable, "torch-dp needs CUDA"),
]


def _id(case) -> str:
    strategy, workload, kwargs, _, _ = case
    return f"{strategy}-" + ("-".join(kwargs) or str(workload)[:20])


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_error_before_any_process(case):
    strategy, workload, kwargs, exc_type, message = case
    before = {p.pid for p in stray_children()}
    with pytest.raises(exc_type, match=re.escape(message)):
        dpbench.launch(strategy, workload, **kwargs)
    assert {p.pid for p in stray_children()} == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_cuda_without_cuda_is_unavailable():
    with pytest.raises(StrategyUnavailable, match=re.escape("device='cuda' needs CUDA")) as info:
        dpbench.launch("ddp", HEALTHY, world_size=2, device="cuda")
    assert "torch.cuda.is_available() is False" in info.value.reason


def test_non_picklable_workload_is_rejected():
    workload = Workload(model=lambda: nn.Linear(8, 3), batch=batch, loss=loss, name="local-lambda")
    with pytest.raises(TypeError, match=r"Workload.model of workload 'local-lambda' is not picklable"):
        dpbench.launch("single", workload)


def test_registry_lists_every_strategy_and_rejects_unknown():
    import dpbench.launcher

    assert dpbench.launch is dpbench.launcher.launch  # the lazy top-level name is the function
    assert (
        dpbench.list_strategies()
        == list_strategies()
        == ["single", "dp", "torch-dp", "ddp", "manual", "allreduce", "fsdp", "zero"]
    )
    for name in list_strategies():
        assert get_strategy(name).name == name
    with pytest.raises(ValueError, match=re.escape("Unknown strategy 'DDP'. Available names: single, dp")):
        get_strategy("DDP")


def short_batch(step: int, global_batch: int, seed: int):
    x, y = batch(step, global_batch, seed)
    return x[:61], y[:61]


def test_batch_of_the_wrong_size_is_named_before_any_process():
    workload = Workload(model=HEALTHY.model, batch=short_batch, loss=loss, name="short")
    before = {p.pid for p in stray_children()}
    with pytest.raises(ValueError) as info:
        dpbench.launch("ddp", workload, world_size=2, global_batch=64)
    assert str(info.value).startswith(
        "Workload.batch of workload 'short': short_batch returned 61 rows in inputs for global_batch=64"
    )
    assert {p.pid for p in stray_children()} == before
    # The first batch is built on the CPU: checking it initialises no CUDA in the caller.
    assert not torch.cuda.is_initialized()


def test_module_instance_as_model_is_refused_at_construction():
    with pytest.raises(TypeError, match=re.escape("Workload.model must be a zero-argument callable")):
        Workload(model=nn.Linear(8, 3), batch=batch, loss=loss, name="instance")


def test_a_temp_directory_too_long_for_the_forkserver_socket_is_named():
    from dpbench.workers.starting import check_socket_dir

    check_socket_dir("/tmp/" + "x" * 84)  # 5 + 84 + 18 = 107 bytes: fits
    with pytest.raises(
        ValueError,
        match=re.escape(
            "is too long for the forkserver's Unix socket (108 bytes under /tmp/" + "x" * 85 + ", at most 107): "
            "set TMPDIR to a shorter directory"
        ),
    ):
        check_socket_dir("/tmp/" + "x" * 85)


@pytest.mark.slow
def test_a_pool_under_a_too_long_tmpdir_fails_in_one_line(tmp_path):
    import subprocess
    import sys

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    code = "from dpbench.launcher import WorkerPool\nWorkerPool(1)\n"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**__import__("os").environ, "TMPDIR": str(deep)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ValueError: the temp directory '{deep}' is too long for the forkserver's Unix socket"), (
        last
    )
    assert "AF_UNIX" not in proc.stderr
    assert list(deep.iterdir()) == []  # nothing of the pool's is left there


def test_a_configuration_spec_is_read_as_its_keywords_are():
    # The same refusal whether the option comes in the spec or as a keyword: the spec was parsed.
    message = "ddp option bucket_cap_mb must be None or a positive number, got -1"
    with pytest.raises(ValueError, match=re.escape(message)):
        dpbench.launch("ddp@bucket_cap_mb=-1", HEALTHY)
    with pytest.raises(ValueError, match=re.escape("Unknown option(s) 'bogus' for strategy 'ddp'")):
        dpbench.launch("ddp@static_graph=true", HEALTHY, bogus=1)


def test_an_option_in_the_spec_and_the_keywords_is_one_line_naming_both():
    with pytest.raises(ValueError) as info:
        dpbench.launch("ddp@bucket_cap_mb=10", HEALTHY, world_size=2, bucket_cap_mb=20)
    assert (
        str(info.value)
        == "bucket_cap_mb: expected it in 'ddp@bucket_cap_mb=10' or in the keywords, found it in both (10 and 20)"
    )


def test_a_spec_and_a_parsed_configuration_launch_with_the_options_they_name():
    from dpbench.strategies.configs import parse_configs

    (parsed,) = parse_configs("test", "single@precision=bf16")
    for strategy, keywords in (("single@precision=bf16", {}), (parsed, {}), ("single", {"precision": "bf16"})):
        with dpbench.launch(strategy, HEALTHY, global_batch=8, **keywords) as run:
            assert run.spec.strategy == "single" and run.spec.options.precision == "bf16"
    # A parsed configuration is checked on the launch's device: bf16 runs on CPU, fp16 does not.
    (fp16,) = parse_configs("test", "single@precision=fp16")
    with pytest.raises(StrategyUnavailable, match="precision='fp16' needs device='cuda'"):
        dpbench.launch(fp16, HEALTHY, global_batch=8)
