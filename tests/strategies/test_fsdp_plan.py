"""FSDP's collective plan (what the case metrics replay as its communication): per unit, an
all-gather in forward and, when the unit reshards after forward, another in backward."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch import nn

from dpbench.strategies.fsdp import FSDP, FSDPOptions


@pytest.mark.parametrize("reshard, gathers", [(True, 2), (False, 1), (1, 1), (2, 2)])
def test_a_unit_that_reshards_is_gathered_again_in_backward(reshard, gathers):
    block = nn.Linear(4, 4)
    trainer = SimpleNamespace(
        spec=SimpleNamespace(options=FSDPOptions(reshard_after_forward=reshard), world_size=2),
        units=[block],
        model=nn.Sequential(block, nn.Linear(4, 2)),
    )
    plan = FSDP.collective_plan(trainer)
    ops = [c.op for c in plan]
    # the block: its gathers and a reduce-scatter; the root: gathered once (it stays until backward)
    assert ops == ["all_gather"] * gathers + ["reduce_scatter", "all_gather", "reduce_scatter"]
    assert plan[0].numel == 4 * 4 + 4
