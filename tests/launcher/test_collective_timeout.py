"""The pool a launch starts: where set-up compiles, a rank may wait in a collective for a cold
compile (the strategy's ``collective_timeout``), not just the run's ``timeout``."""

from __future__ import annotations

import pytest
from _launch_helpers import HEALTHY

import dpbench
from dpbench.strategies import _options
from dpbench.strategies._compile import COMPILE_TIMEOUT_S


class _Stop(Exception):
    """Raised by the fake pool: the launch went as far as asking for its pool."""


@pytest.mark.parametrize("strategy,compile", [("ddp", True), ("ddp", False), ("fsdp", True), ("single", True)])
def test_set_up_that_compiles_gets_a_process_group_that_waits_for_a_cold_compile(monkeypatch, strategy, compile):
    monkeypatch.setattr(_options, "check_compiler", lambda strategy, *, device: None)  # no toolchain needed here
    asked = {}

    def fake_pool(processes, **kwargs):
        asked.update(kwargs)
        raise _Stop

    monkeypatch.setattr("dpbench.launcher.run.make_pool", fake_pool)
    world = 1 if strategy == "single" else 2
    with pytest.raises(_Stop):
        dpbench.launch(strategy, HEALTHY, world_size=world, global_batch=8, timeout=45.0, compile=compile)
    assert asked["timeout"] == 45.0
    assert asked["collective_timeout"] == (45.0 + COMPILE_TIMEOUT_S if compile else 45.0)
