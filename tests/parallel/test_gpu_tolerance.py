"""The gradient comparison of tests/parallel/test_gpu.py, on CPU: exact for two replicas, a float
tolerance beyond, because a sum of three or more depends on its order."""

from __future__ import annotations

import pytest
import torch

from .test_gpu import assert_grads_match


def _three_replica_grads():
    torch.manual_seed(0)
    return [torch.randn(1000) * 10 ** torch.randint(-3, 4, (1000,)) for _ in range(3)]


def test_a_sum_of_three_depends_on_its_order():
    a, b, c = _three_replica_grads()
    sequential, tree = (a + b) + c, a + (b + c)  # ours vs one NCCL order
    assert not torch.equal(sequential, tree)
    assert_grads_match(sequential, tree, replicas=3)  # equal to rounding: accepted


def test_two_replicas_stay_bit_for_bit_and_real_differences_still_fail():
    a, b, c = _three_replica_grads()
    assert_grads_match(a + b, b + a, replicas=2)  # commutative: exactly equal
    with pytest.raises(AssertionError):
        assert_grads_match((a + b) + c, a + (b + c), replicas=2)
    with pytest.raises(AssertionError):
        assert_grads_match(a + b + c, a + b + c * 1.001, replicas=3)
