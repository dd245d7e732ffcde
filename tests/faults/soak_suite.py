"""The small real suite the fault soak runs (python -m tools.soak_faults): three cases of the suites'
own machinery (run with ``--dpbench``, the measuring plugin's switch for a suite of one's own), one
in-process and two with worker
processes, so every fault has somewhere to land."""

from __future__ import annotations

import pytest

from dpbench.measure import TrainingCase, measure_training

CASES = [
    TrainingCase(strategy="ddp", workload="mlp", world_size=2, global_batch=8),
    TrainingCase(strategy="single", workload="mlp", world_size=1, global_batch=8),
    TrainingCase(strategy="allreduce", workload="mlp", world_size=2, global_batch=8),
]


@pytest.mark.parametrize("case", CASES, ids=["ddp2", "single", "allreduce2"])
def test_case(benchmark, case, profile, trials):
    info, _ = measure_training(benchmark, case, session=trials, profile=profile, suite="soak")
    assert info["samples_per_s"] > 0
