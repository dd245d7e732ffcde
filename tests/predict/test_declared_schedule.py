"""The step model replays whatever schedule a strategy declares: a strategy it has never heard of,
registered with one line, is profiled and predicted from its own declaration; and predicting from a
saved run imports no torch."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

import dpbench.strategies as strategies
from dpbench.predict import OverlapSlowdown, predict_step, profiles_from_run, run_collective_model
from dpbench.predict.step import needed_collectives
from dpbench.results.load import read_run
from dpbench.strategies import BucketSync, CommonOptions, StepSchedule, Strategy

RUN = Path(__file__).parent / "data" / "step_run.json"
REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


class ShardedBuckets(Strategy):
    """A strategy predict/ has no word for: 1 MiB buckets all-reduced after backward, the optimizer sharded."""

    name = "sharded-buckets"
    multiprocess = True
    options_type = CommonOptions

    @classmethod
    def placement(cls, *, world_size, device, options):  # never launched here
        raise NotImplementedError

    @classmethod
    def step_schedule(cls, options: CommonOptions) -> StepSchedule:
        return StepSchedule(
            gradients=BucketSync(first_bytes=None, cap_bytes=MIB, overlap=False), sharded_optimizer=True
        )


@pytest.fixture
def registered(monkeypatch):
    """``sharded-buckets`` registered beside the real strategies (its registry line)."""
    real = strategies.get_strategy
    monkeypatch.setitem(strategies._REGISTRY, ShardedBuckets.name, f"{__name__}:ShardedBuckets")
    monkeypatch.setattr(strategies, "get_strategy", lambda n: ShardedBuckets if n == ShardedBuckets.name else real(n))


def test_a_newly_registered_strategy_is_predicted_from_its_declared_schedule(registered, tmp_path):
    doc = json.loads(RUN.read_text())
    ddp = next(b for b in doc["benchmarks"] if b["extra_info"].get("strategy") == "ddp")
    new = copy.deepcopy(ddp)
    new["extra_info"]["strategy"] = ShardedBuckets.name
    new["extra_info"]["options"] = {"optimizer": "sgd", "precision": "fp32"}
    doc["benchmarks"].append(new)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    world = new["extra_info"]["world_size"]
    run = read_run(path)
    profile = next(p for p in profiles_from_run(run, world_size=world) if p.strategy == ShardedBuckets.name)
    assert [b.bytes for b in profile.buckets][:2] == [MIB, MIB] and not profile.units
    assert needed_collectives(profile) == ("all_reduce",)
    model = run_collective_model(run, gpus_per_node=8)
    at4 = predict_step(profile, model, 4, overlap=OverlapSlowdown(value=0.0, origin="test"))
    # after backward, every bucket in turn, then the optimizer on a quarter of the parameters
    assert at4.comm_s > 0 and at4.step_time_s == pytest.approx(at4.compute_s + at4.comm_s)
    expected_optimizer = profile.optimizer_s * profile.world_size / 4
    assert at4.compute_s == pytest.approx(profile.forward_s + profile.backward_s + expected_optimizer)


def test_predicting_from_a_saved_run_imports_no_torch():
    code = (
        "import sys\n"
        "from dpbench.predict import profiles_from_run, step_predictions, run_collective_model\n"
        "from dpbench.results.load import read_run\n"
        f"run = read_run({str(RUN)!r})\n"
        "step_predictions(run, run_collective_model(run, gpus_per_node=8), [2, 4])\n"
        "sys.exit('torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=120)
    assert proc.returncode == 0, "dpbench predict imported torch"
