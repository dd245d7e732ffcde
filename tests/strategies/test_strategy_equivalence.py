"""Every strategy computes the same SGD steps as ``single`` (same seed, weights, global batches).

The toy MLP has no BatchNorm or dropout, so parameters after K steps must match the
single-device run within float tolerance. Global batches are chosen uneven for the world
sizes (11 over 2 and 3 replicas) so the loss weighting n_local·W/N is exercised.
"""

from __future__ import annotations

import pytest
import torch
from _toy_workloads import MLP

import dpbench
from dpbench.strategies import StrategyUnavailable

K = 3
GLOBAL_BATCH = 11  # 6+5 over two replicas, 4+4+3 over three: uneven on purpose
LR = 0.1

# (strategy, world_size, options, atol): the exact-arithmetic strategies get tight tolerances;
# the fp16 comm hook rounds gradients to half precision, so it gets a looser one.
CASES = [
    ("dp", 2, {}, 1e-5),
    ("manual", 2, {}, 1e-5),
    ("ddp", 2, {}, 1e-5),
    ("ddp", 2, {"bucket_cap_mb": 0.0005, "gradient_as_bucket_view": True}, 1e-5),
    ("ddp", 2, {"static_graph": True, "bucket_cap_mb": 0.0005}, 1e-5),
    ("ddp", 2, {"accumulation_steps": 2, "broadcast_buffers": False, "find_unused_parameters": True}, 1e-5),
    ("ddp", 2, {"comm_hook": "fp16"}, 2e-3),
    ("allreduce", 2, {"mode": "per-param"}, 1e-5),
    ("allreduce", 2, {"mode": "bucketed", "bucket_cap_mb": 0.0005}, 1e-5),
    ("allreduce", 2, {"mode": "overlap", "bucket_cap_mb": 0.0005}, 1e-5),
    ("dp", 3, {}, 1e-5),
    ("manual", 3, {}, 1e-5),
    ("ddp", 3, {"accumulation_steps": 3}, 1e-5),
    ("allreduce", 3, {"mode": "per-param"}, 1e-5),
    ("allreduce", 3, {"mode": "overlap", "bucket_cap_mb": 0.0005}, 1e-5),
]


# The phase breakdown each strategy reports (dpbench.schema.Phase values).
PHASES = {
    "single": {"forward", "backward", "optimizer"},
    "ddp": {"forward", "backward", "optimizer"},
    "dp": {"scatter", "replicate", "apply", "gather", "backward", "optimizer"},
    "manual": {"compute", "communication", "optimizer"},
    "allreduce": {"compute", "communication", "optimizer"},
}


def _case_id(case) -> str:
    strategy, world, options, _ = case
    opts = ",".join(f"{k}={v}" for k, v in options.items())
    return f"{strategy}-w{world}" + (f"-{opts}" if opts else "")


def train(strategy: str, world_size: int, **options):
    with dpbench.launch(
        strategy, MLP, world_size=world_size, global_batch=GLOBAL_BATCH, seed=3, lr=LR, timeout=60.0, **options
    ) as run:
        stats = run.step(K)
        return run.parameters(), stats, run.info


@pytest.fixture(scope="module")
def reference():
    params, stats, _ = train("single", 1)
    return params, stats


@pytest.fixture(scope="module")
def initial():
    torch.manual_seed(3)
    return {name: p.detach().clone() for name, p in MLP.model().named_parameters()}


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_parameters_match_single(case, reference, initial):
    strategy, world, options, atol = case
    ref_params, ref_stats = reference
    params, stats, info = train(strategy, world, **options)
    assert info.per_replica_batch == [GLOBAL_BATCH // world + (r < GLOBAL_BATCH % world) for r in range(world)]
    assert set(params) == set(ref_params)
    for name, expected in ref_params.items():
        # The run must have moved the weights, or equality with single would prove nothing.
        assert not torch.allclose(expected, initial[name])
        torch.testing.assert_close(
            params[name], expected, atol=atol, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}"
        )
    # The reported loss is the global-batch mean, whatever the split.
    torch.testing.assert_close(torch.tensor(stats.losses), torch.tensor(ref_stats.losses), atol=atol * 10, rtol=1e-4)
    assert stats.steps == K and all(t > 0 for t in stats.step_times)
    assert set(stats.phases) == PHASES[strategy]
    # Phases are parts of a step, each measured inside it.
    assert sum(stats.phases.values()) <= sum(stats.step_times) / K * 1.05
    expected_memory = {f"cpu:rank{r}" for r in range(info.processes)}
    assert set(stats.peak_memory_bytes) == expected_memory


def test_single_reports_its_phases(reference):
    _, stats = reference
    assert set(stats.phases) == PHASES["single"]


def test_powersgd_hook_is_refused_on_gloo_before_any_process_starts():
    """torch's PowerSGD hook can mis-order its collectives on gloo (seen: a size mismatch, hangs)."""
    with pytest.raises(StrategyUnavailable, match="powersgd.*nccl"):
        dpbench.launch("ddp", MLP, world_size=2, global_batch=GLOBAL_BATCH, comm_hook="powersgd")
