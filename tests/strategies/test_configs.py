"""Strategy configurations named like workload specs (dpbench/strategies/configs.py): the list
syntax, what each becomes in the suites' cases, and the one-line refusals."""

from __future__ import annotations

import pytest

from dpbench.measure.profiles import resolve_profile, strategy_cases
from dpbench.strategies.configs import StrategyConfig, parse_configs


def test_a_list_holds_plain_strategies_and_configurations_with_several_options():
    configs = parse_configs(
        "--strategies", "single,ddp@bucket_cap_mb=100,static_graph=true,fsdp@reshard_after_forward=false"
    )
    assert configs == (
        StrategyConfig(strategy="single"),
        StrategyConfig(strategy="ddp", options=(("bucket_cap_mb", 100), ("static_graph", True))),
        StrategyConfig(strategy="fsdp", options=(("reshard_after_forward", False),)),
    )
    assert [c.spec for c in configs] == [
        "single",
        "ddp@bucket_cap_mb=100,static_graph=true",
        "fsdp@reshard_after_forward=false",
    ]
    assert parse_configs("x", ["ddp", "fsdp@replicate=2"], world_size=4)[1].as_dict() == {"replicate": 2}


@pytest.mark.parametrize(
    "raw, message",
    [
        ("ddpp", "--strategies: expected strategy names from single, dp, torch-dp, ddp, manual, allreduce, fsdp, zero, "
         "found 'ddpp' (did you mean 'ddp'?)"),
        ("ddp@bucket_cap=1", "--strategies: 'ddp@bucket_cap=1': ddp has no option 'bucket_cap' (did you mean "
         "'bucket_cap_mb'?); its options: bucket_cap_mb, "),
        ("fsdp@reshard_after_forward=3", "--strategies: 'fsdp@reshard_after_forward=3': fsdp option "
         "reshard_after_forward: expected True, False or a number of ranks that divides the world size 2, found 3"),
        ("ddp@static_graph", "--strategies: 'ddp@static_graph': expected ddp@option=value,option=value, "
         "found 'static_graph'"),
        ("ddp@static_graph=true,static_graph=false", "--strategies: 'ddp@static_graph=true,static_graph=false': "
         "option 'static_graph' is given twice"),
        ("", "--strategies: expected strategy names from"),
    ],
)  # fmt: skip
def test_a_bad_configuration_is_one_line_naming_it(raw, message):
    with pytest.raises(ValueError) as info:
        parse_configs("--strategies", raw)
    assert str(info.value).startswith(message) and "\n" not in str(info.value), str(info.value)


def test_each_configuration_is_its_own_case_over_the_strategys_options():
    configs = parse_configs("x", "single,ddp,ddp@bucket_cap_mb=100")
    cases = strategy_cases(
        ("mlp",), (2,), lambda size: 64, options={"ddp": {"precision": "bf16"}}, configurations=configs
    )
    ddp = [c for c in cases if c.strategy == "ddp"]
    assert [c.id for c in ddp] == ["ddp-mlp-w2-precision=bf16", "ddp-mlp-w2-bucket_cap_mb=100-precision=bf16"]
    assert len({c.key for c in cases}) == len(cases)  # each its own measurement
    # Strategies not named keep their one case (the suites deselect it, the references stay).
    assert [c.id for c in cases if c.strategy == "zero"] == ["zero-mlp-w2"]


def test_dpbench_strategies_in_the_environment_name_configurations():
    profile = resolve_profile(cuda_count=0, cpu_count=2, environ={"DPBENCH_STRATEGIES": "single,fsdp@shard=layer"})
    assert profile.strategies == ("single", "fsdp")
    assert [c.spec for c in profile.configurations] == ["single", "fsdp@shard=layer"]
    assert profile.to_dict()["configurations"] == ["single", "fsdp@shard=layer"]
