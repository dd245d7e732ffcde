"""Minor page faults per step (StepStats.minor_faults): counted where the steps run, every rank summed."""

from __future__ import annotations

import resource

import pytest
from _launch_helpers import HEALTHY, TOUCH_BYTES, TOUCHING

import dpbench

PAGE = resource.getpagesize()


@pytest.mark.slow
@pytest.mark.parametrize("strategy,world_size", [("single", 1), ("ddp", 2)])
def test_a_step_that_maps_fresh_memory_counts_its_pages_on_every_rank(strategy, world_size):
    steps = 3
    with dpbench.launch(strategy, TOUCHING, world_size=world_size, global_batch=8) as run:
        run.step(1)
        touching = run.step(steps)
    with dpbench.launch(strategy, HEALTHY, world_size=world_size, global_batch=8) as run:
        run.step(1)
        quiet = run.step(steps)
    pages = TOUCH_BYTES // PAGE
    # Each step of each rank writes a freshly mapped 64 MiB buffer: at least one fault per page.
    assert touching.minor_faults >= steps * world_size * pages, touching.minor_faults
    assert touching.minor_faults_per_step == touching.minor_faults / steps
    # The same ranks without the buffer: the tiny model's steps touch almost no new memory.
    assert quiet.minor_faults < steps * world_size * pages // 8, quiet.minor_faults
