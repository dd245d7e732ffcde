"""Every run proves its configurations train single's model: the fingerprint each case records.

Each case is trained the way a trial trains it (``run.step`` for the probe's steps, ``run.fingerprint()``,
then more steps) and recorded by the trial's own :func:`dpbench.measure.cases.fingerprint_record`;
:func:`dpbench.results.fingerprint.fingerprint_verdicts` then judges the rows as the report would.
Every clean configuration matches single; a planted difference (rank 1 steps with twice the
learning rate, through torch's public optimizer hook in a custom Workload) departs; a BatchNorm
workload is exempt and says why.
"""

from __future__ import annotations

import pandas as pd
import pytest
from _toy_workloads import BN, MLP, RANK_ONE_LR

import dpbench
from dpbench.measure.cases import PROBE_STEPS, fingerprint_record
from dpbench.results.fingerprint import FingerprintStatus, compare_fingerprints, fingerprint_verdicts

BATCH = 11  # uneven over 2 ranks: the loss weighting is part of what must match
LR = 0.05
MORE_STEPS = 4


def fingerprint(strategy: str, workload, world_size: int, **options) -> dict:
    with dpbench.launch(
        strategy, workload, world_size=world_size, global_batch=BATCH, seed=0, lr=LR, timeout=60.0, **options
    ) as run:
        probe = run.step(PROBE_STEPS)
        sums = run.fingerprint()
        more = run.step(MORE_STEPS)
    return fingerprint_record(sums, [probe, more])


def row(strategy: str, world_size: int, fp: dict, *, workload: str = "toy-mlp", **extra) -> dict:
    return {
        "run": "r1",
        "strategy": strategy,
        "workload": workload,
        "global_batch": BATCH,
        "options": {"optimizer": "sgd", **extra},
        "lr": LR,
        "seed": 0,
        "config": f"{strategy} w{world_size}",
        "fingerprint": fp,
    }


@pytest.fixture(scope="module")
def single_mlp() -> dict:
    return fingerprint("single", MLP, 1)


@pytest.mark.slow
def test_every_clean_configuration_matches_single(single_mlp):
    cases = [("ddp", 2), ("fsdp", 2), ("zero", 2), ("allreduce", 2), ("manual", 2), ("dp", 2)]
    rows = [row("single", 1, single_mlp)] + [row(s, w, fingerprint(s, MLP, w)) for s, w in cases]
    verdicts = fingerprint_verdicts(pd.DataFrame(rows))
    assert verdicts[0].status is FingerprintStatus.REFERENCE
    for (strategy, _), verdict in zip(cases, verdicts[1:]):
        assert verdict.status is FingerprintStatus.MATCHES, f"{strategy}: {verdict.reason}"
        assert verdict.compared_steps == PROBE_STEPS + MORE_STEPS and verdict.reference == "single w1"
        assert "parameter sum" in verdict.reason and verdict.tolerance.precision == "fp32"
    # The sums are the full model's under every strategy: fsdp's shards gathered, not rank 0's half.
    assert {r["fingerprint"]["param_count"] for r in rows} == {single_mlp["param_count"]}


@pytest.mark.slow
def test_fsdp_per_block_on_the_transformer_matches_single():
    workload = "transformer@layers=2,d_model=32,context=16,vocab=64"
    single = fingerprint("single", workload, 1)
    sharded = fingerprint("fsdp", workload, 2, shard="block")
    verdict = compare_fingerprints(sharded, single, reference="single w1")
    assert verdict.status is FingerprintStatus.MATCHES, verdict.reason
    assert sharded["param_count"] == single["param_count"] > 0 and sharded["rank_spread"] == 0.0


@pytest.mark.slow
def test_hsdp_counts_each_replicated_shard_once(single_mlp):
    # fsdp adds up its ranks' shards instead of gathering them; under HSDP every shard is held by
    # both replicate groups, so counting it twice would double every sum.
    hsdp = fingerprint("fsdp", MLP, 4, replicate=2)
    verdict = compare_fingerprints(hsdp, single_mlp, reference="single w1")
    assert verdict.status is FingerprintStatus.MATCHES, verdict.reason
    assert hsdp["param_count"] == single_mlp["param_count"] and hsdp["rank_spread"] == 0.0


@pytest.mark.slow
def test_hsdp_replica_groups_that_diverge_depart(single_mlp):
    # Ranks [[0, 1], [2, 3]]: rank 1 steps its shard of replica 0 with twice the learning rate, and
    # rank 3's copy of that shard (replica 1) does not. Each rank reports its replica's sums: the
    # replicas disagree, where an average over them would hide it.
    planted = fingerprint("fsdp", RANK_ONE_LR, 4, replicate=2)
    assert planted["rank_spread"] > 10 * 1e-4
    verdict = compare_fingerprints(planted, single_mlp, reference="single w1")
    assert verdict.status is FingerprintStatus.DEPARTS, verdict.reason


@pytest.mark.slow
def test_a_rank_with_another_learning_rate_departs(single_mlp):
    planted = fingerprint("ddp", RANK_ONE_LR, 2)
    verdicts = fingerprint_verdicts(pd.DataFrame([row("single", 1, single_mlp), row("ddp", 2, planted)]))
    verdict = verdicts[1]
    assert verdict.status is FingerprintStatus.DEPARTS and verdict.flagged, verdict.reason
    assert verdict.departure > 10 * verdict.tolerance.relative
    assert verdict.reason.startswith("computes something else: departs from single w1 by")
    # Rank 1's own weights moved twice as far: its replica disagrees with rank 0's.
    assert planted["rank_spread"] > verdict.tolerance.relative


@pytest.mark.slow
def test_a_batchnorm_workload_is_exempt_and_says_why():
    single = fingerprint("single", BN, 1)
    ddp = fingerprint("ddp", BN, 2)
    assert "BatchNorm (BatchNorm1d)" in ddp["exempt"] and single["exempt"] == ddp["exempt"]
    rows = [row("single", 1, single, workload="toy-bn"), row("ddp", 2, ddp, workload="toy-bn")]
    verdict = fingerprint_verdicts(pd.DataFrame(rows))[1]
    assert verdict.status is FingerprintStatus.EXEMPT and not verdict.flagged
    assert verdict.reason.startswith("exempt: BatchNorm (BatchNorm1d) normalises each replica's slice")
