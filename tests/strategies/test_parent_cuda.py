"""The calling process never initialises CUDA: every strategy computes in spawned workers.

Checked in a fresh interpreter each time: earlier GPU tests in the pytest process
(tests/parallel/test_gpu.py, the NVML tests) create CUDA contexts of their own, so
``torch.cuda.is_initialized()`` there says nothing about dpbench.

On CPU the parent side runs against a fake ``torch.cuda`` (two GPUs "available", any CUDA
initialisation raising) up to the point where workers would start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))

_FAKE_PARENT = textwrap.dedent("""
    import sys
    import torch

    def initialised(*args, **kwargs):
        raise AssertionError("the parent process initialised CUDA")

    torch.cuda.is_available = lambda: True  # asks the driver only: no context
    torch.cuda.device_count = lambda: 2
    torch.cuda._lazy_init = torch.cuda.init = initialised
    torch.cuda.current_device = torch.cuda.set_device = initialised

    import dpbench
    import dpbench.launcher.run as run_module
    from tests.strategies._toy_workloads import MLP

    started = []
    class Started:  # where the workers would start
        def __init__(self, spec, workload, **kw):
            started.append(spec)

    run_module.Run = Started
    cases = [("single", 1, {}), ("dp", 2, {}), ("manual", 2, {}), ("torch-dp", 2, {}),
             ("ddp", 2, {"accumulation_steps": 2}), ("allreduce", 2, {}), ("zero", 2, {}),
             ("fsdp", 2, {}), ("ddp", 3, {})]
    for strategy, world_size, options in cases:
        dpbench.launch(strategy, MLP, world_size=world_size, global_batch=8, device="cuda", **options)
    print(len(started), [s.devices for s in started][-1], [s.backend for s in started][-1])
""")


@pytest.mark.slow  # a fresh interpreter importing torch: ~5-9 s on a busy 2-core machine
def test_parent_side_of_every_strategy_never_touches_cuda():
    # From the checkout's root: -c puts the working directory on the path, and the toy model is in tests/.
    root = Path(HERE).parents[1]
    out = subprocess.run([sys.executable, "-c", _FAKE_PARENT], capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    # Every case got as far as starting workers; three ranks on two GPUs: gloo, cuda:0 shared.
    assert out.stdout.split() == ["9", "('cuda:0',", "'cuda:1',", "'cuda:0')", "gloo"]


_REAL_PARENT = textwrap.dedent("""
    import torch
    import dpbench
    from tests.strategies._toy_workloads import MLP

    if __name__ == "__main__":
        for strategy in ("single", "dp", "ddp"):
            with dpbench.launch(strategy, MLP, world_size=2 if strategy != "single" else 1, global_batch=8,
                                device="cuda") as run:
                run.step(1)
                run.case_metrics()
        print("initialised", torch.cuda.is_initialized())
""")


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_parent_never_initialises_cuda_on_a_gpu(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(_REAL_PARENT)
    # The checkout's root on the path: the parent and its workers import the toy model from tests/.
    env = {**os.environ, "PYTHONPATH": str(Path(HERE).parents[1])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "initialised False"
