"""Each strategy's declared step schedule (dpbench.strategies.schedule), read the way the step model
reads it: by name, from a case's resolved options as saved results record them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dpbench.strategies import (
    BucketSync,
    ShardedUnits,
    StepSchedule,
    get_strategy,
    list_strategies,
    scheduled_strategies,
    step_schedule,
)

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def test_the_multi_process_strategies_declare_a_schedule_and_the_in_process_ones_none():
    assert scheduled_strategies() == ["ddp", "allreduce", "fsdp", "zero"]
    for name in set(list_strategies()) - set(scheduled_strategies()):
        assert not get_strategy(name).multiprocess, name


def test_ddp_cuts_a_small_first_bucket_then_its_cap_and_reads_accumulation_and_buffer_sync():
    s = step_schedule("ddp", {"bucket_cap_mb": 2.0, "accumulation_steps": 3, "broadcast_buffers": False})
    assert s.gradients == BucketSync(first_bytes=MIB, cap_bytes=2 * MIB, overlap=True)
    assert (s.micro_batches, s.buffer_broadcast, s.calibrates_overlap) == (3, False, True)
    default = step_schedule("ddp", {"bucket_cap_mb": None})
    assert default.gradients.cap_bytes == 25 * MIB and default.buffer_broadcast
    assert default.collectives(buffer_bytes=4096) == ("all_reduce", "broadcast")
    assert default.collectives(buffer_bytes=0) == default.collectives(buffer_bytes=None) == ("all_reduce",)


def test_zero_is_ddps_step_with_a_sharded_optimizer_and_a_partition_broadcast():
    s = step_schedule("zero", {"bucket_cap_mb": 1.0})
    assert s.gradients == BucketSync(first_bytes=MIB, cap_bytes=MIB, overlap=True)
    assert s.buffer_broadcast and s.sharded_optimizer and s.partition_broadcast and not s.calibrates_overlap
    assert s.collectives(buffer_bytes=None) == ("all_reduce", "broadcast")


@pytest.mark.parametrize(("mode", "overlap"), [("bucketed", False), ("per-param", False), ("overlap", True)])
def test_allreduce_overlaps_only_in_its_overlap_mode_and_times_forward_and_backward_as_one(mode, overlap):
    s = step_schedule("allreduce", {"mode": mode, "bucket_cap_mb": 25.0})
    assert s.gradients == BucketSync(first_bytes=None, cap_bytes=25 * MIB, overlap=overlap)
    assert s.fused_compute and len(s.notes) == 1


@pytest.mark.parametrize(("reshard", "again"), [(True, True), (False, False), (1, False), (2, True), (4, True)])
def test_fsdp_gathers_again_in_backward_unless_its_units_keep_their_parameters(reshard, again):
    s = step_schedule("fsdp", {"reshard_after_forward": reshard})
    assert s.gradients == ShardedUnits(gathers_in_backward=again, replicate=1) and s.sharded_optimizer
    assert s.collectives(buffer_bytes=4096) == ("all_gather", "reduce_scatter")


def test_hsdp_all_reduces_across_its_replica_groups():
    s = step_schedule("fsdp", {"replicate": 2})
    assert s.gradients.replicate == 2
    assert s.collectives(buffer_bytes=None) == ("all_gather", "reduce_scatter", "all_reduce")


def test_saved_options_this_version_does_not_know_are_left_out_and_unknown_strategies_have_none():
    assert step_schedule("ddp", {"a_removed_option": 1, "accumulation_steps": 2}).micro_batches == 2
    assert step_schedule("a-strategy-from-elsewhere", {}) is None
    assert step_schedule("single", {"compile": False}) is None


def test_a_schedule_refuses_what_its_replay_does_not_model():
    with pytest.raises(ValueError, match="sharded units are replayed with one micro-batch"):
        StepSchedule(gradients=ShardedUnits(gathers_in_backward=True, replicate=1), micro_batches=2)


def test_every_schedule_is_read_without_torch():
    code = (
        "import sys\n"
        "from dpbench.strategies import scheduled_strategies, step_schedule\n"
        "[step_schedule(n, {}) for n in scheduled_strategies()]\n"
        "from dpbench.strategies import list_strategies, get_strategy\n"
        "[get_strategy(n) for n in list_strategies()]\n"
        "sys.exit('torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=120)
    assert proc.returncode == 0, "reading the strategies' class side imported torch"
