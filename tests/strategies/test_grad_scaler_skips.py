"""fp16's loss scaler skips the update of a step whose gradients overflowed; the fingerprint records
which steps it skipped, and a configuration that skipped other steps than single's departs, saying so.

fp16 runs on CUDA only; here a CPU ``GradScaler`` (``torch.amp.GradScaler("cpu")``, what
:class:`~dpbench.strategies._precision.Precision` builds for ``device_type="cpu"``) takes the place
of the CUDA one, and the overflow is forced: step 1's batch is scaled by 1e36.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from _toy_workloads import cross_entropy, random_batch, tiny_mlp

from dpbench.launcher.step_stats import StepStats, merge_step_stats
from dpbench.measure.cases import fingerprint_record
from dpbench.results.fingerprint import FingerprintStatus, compare_fingerprints
from dpbench.strategies import get_strategy
from dpbench.strategies._precision import Precision
from dpbench.strategies.base import RunSpec
from dpbench.workloads.base import Workload

OVERFLOW_STEP = 1


def overflowing_batch(step: int, global_batch: int, seed: int):
    x, y = random_batch(step, global_batch, seed)
    return (x * 1e36 if step == OVERFLOW_STEP else x), y


OVERFLOWING = Workload(model=tiny_mlp, batch=overflowing_batch, loss=cross_entropy, name="toy-overflow")


def test_the_scaler_skips_the_overflowing_step_and_precision_counts_it():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    precision = Precision("fp16", "cpu")
    counts, moved = [], []
    for factor in (1.0, 1e36, 1.0):
        before = model.weight.detach().clone()
        optimizer.zero_grad()
        precision.backward(model(torch.ones(2, 3)).sum() * factor)
        precision.step([optimizer])
        counts.append(precision.skipped)
        moved.append(not torch.equal(model.weight, before))
    assert counts == [0, 1, 1] and moved == [True, False, True]
    assert Precision("fp32", "cpu").skipped == 0


def _single_fp16() -> object:
    cls = get_strategy("single")
    spec = RunSpec(
        strategy="single",
        options=cls.parse_options({}, device="cpu", world_size=1, global_batch=8),
        world_size=1,
        global_batch=8,
        per_replica_batch=(8,),
        device_type="cpu",
        devices=("cpu",),
        backend=None,
        seed=0,
        lr=0.05,
        threads_per_worker=1,
    )
    ctx = SimpleNamespace(rank=0, world_size=1, device=torch.device("cpu"), group=None, at_close=lambda fn: None)
    trainer = cls(spec, OVERFLOWING, ctx)
    # fp16 is refused on CPU by the options; the worker side takes a CPU scaler all the same.
    trainer.precision = Precision("fp16", "cpu")
    trainer.setup()
    return trainer


def test_a_step_records_which_of_its_steps_the_scaler_skipped():
    trainer = _single_fp16()
    first, second = trainer.run_steps(2), trainer.run_steps(3)
    assert first["skipped_steps"] == [OVERFLOW_STEP] and second["skipped_steps"] == []
    # Merged rounds keep the steps' places: the fingerprint reads them from the first step on.
    stats = [
        StepStats(step_times=r["times"], global_batch=8, skipped_steps=r["skipped_steps"]) for r in (first, second)
    ]
    assert merge_step_stats(stats).skipped_steps == [OVERFLOW_STEP]
    assert fingerprint_record({}, stats)["skipped_steps"] == [OVERFLOW_STEP + 1]  # from 1, as the losses


def _fingerprint(skipped: list[int]) -> dict:
    stats = [StepStats(step_times=[0.1] * 4, global_batch=8, losses=[2.0, 1.9, 1.8, 1.7], skipped_steps=skipped)]
    sums = {"step": 2, "param_sum": 1.0, "param_abs_sum": 10.0, "param_sq_sum": 5.0, "param_count": 100}
    return fingerprint_record({**sums, "precision": "fp16", "exempt": None, "rank_spread": 0.0}, stats)


def test_a_configuration_whose_scaler_skipped_other_steps_departs_with_that_reason():
    single = {**_fingerprint([]), "precision": "fp32"}
    verdict = compare_fingerprints(_fingerprint([0]), single, reference="single w1")
    assert verdict.status is FingerprintStatus.DEPARTS and verdict.where == "skipped steps"
    assert verdict.reason == (
        "computes something else: its loss scaler skipped the update of step 1, single w1's no step: "
        "they trained different steps (nothing else compared)"
    )
    # Like with like: the same skips, then the values are compared as usual.
    same = compare_fingerprints(_fingerprint([0, 2]), _fingerprint([0, 2]), reference="single w1")
    assert same.status is FingerprintStatus.MATCHES and same.tolerance.precision == "fp16"
    # Skips past the steps both records cover are not compared (a record of fewer steps).
    short = {**_fingerprint([]), "losses": [2.0, 1.9]}
    assert compare_fingerprints(short, _fingerprint([3])).status is FingerprintStatus.MATCHES
    # A run saved before skipped steps were recorded is compared as before.
    old = {k: v for k, v in _fingerprint([]).items() if k != "skipped_steps"}
    assert compare_fingerprints(old, _fingerprint([0])).status is FingerprintStatus.MATCHES


class _Pool:
    """The surface Run.step uses of a pool: two ranks, rank 1's scaler skipped step 2 of 3."""

    closed = False

    def run(self, fn, *args):
        return [
            {"times": [0.1] * 3, "loss_parts": [0.5] * 3, "phases": {}, "memory": {}, "skipped_steps": skipped}
            for skipped in ([], [2])
        ]


def test_run_step_reports_a_step_any_ranks_scaler_skipped():
    from dpbench.launcher.run import Run

    run = Run.__new__(Run)
    run._pool = _Pool()
    run.spec = SimpleNamespace(global_batch=8)
    assert run.step(3).skipped_steps == [2]
