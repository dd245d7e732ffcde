"""compile=True: the compiled model trains exactly as the eager one, and its compile time is reported.

torch.compile builds C++ on CPU (inductor); these are skipped with the reason when no compiler
is installed (the refusal itself is tested in test_strategy_options.py). Kept to two steps and
the toy MLP: compilation dominates the time.
"""

from __future__ import annotations

import pytest
import torch
from _toy_workloads import MLP

import dpbench
from dpbench.strategies import StrategyUnavailable
from dpbench.strategies._options import check_compiler

K, GLOBAL_BATCH, LR = 2, 11, 0.1

try:
    check_compiler("single", device="cpu")
    NO_COMPILER = None
except StrategyUnavailable as exc:
    NO_COMPILER = exc.reason

pytestmark = pytest.mark.skipif(NO_COMPILER is not None, reason=NO_COMPILER or "")


def train(strategy: str, world_size: int, *, metrics: bool = False, **options):
    with dpbench.launch(
        strategy, MLP, world_size=world_size, global_batch=GLOBAL_BATCH, seed=3, lr=LR, timeout=300.0, **options
    ) as run:
        run.step(K)
        return run.parameters(), run.case_metrics() if metrics else None


@pytest.fixture(scope="module")
def eager():
    return train("single", 1)[0]


@pytest.mark.parametrize("strategy,world,metrics", [("single", 1, True), ("ddp", 2, True), ("fsdp", 2, False)])
@pytest.mark.slow
def test_compiled_training_matches_eager_single(strategy, world, metrics, eager):
    params, case = train(strategy, world, compile=True, metrics=metrics)
    for name, expected in eager.items():
        torch.testing.assert_close(
            params[name], expected, atol=1e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}"
        )
    if metrics:
        assert case["compile_time_s"] > 0  # measured in setup, outside every timed step
        if strategy == "ddp":
            assert case["compute_only_step_s"] > 0  # the twin is compiled too
