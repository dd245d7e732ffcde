"""The session's settings (dpbench/measure/settings.py): one typed value built by one adapter from
options over DPBENCH_* variables, its trial-design rule, the parsers every caller shares, and the
one JSON value ``dpbench run`` hands the pytest session."""

from __future__ import annotations

import dataclasses

import pytest

from dpbench.measure.settings import (
    DEFAULT_MAX_TRIALS,
    SessionSettings,
    build_settings,
    duration_text,
    parse_budget,
    parse_count,
    parse_trials,
)
from dpbench.strategies.configs import parse_configs


def _options(key: str) -> str:
    return "--" + key.replace("_", "-")


def test_the_settings_cross_to_pytest_as_one_json_value_and_come_back_equal_and_typed():
    settings = SessionSettings(
        profile="quick",
        world_sizes=(1, 2),
        workloads=("mlp", "hf:gpt2@n_layer=2"),
        workloads_chosen=True,
        strategies=parse_configs("x", "single,fsdp@reshard_after_forward=false,replicate=2", world_size=4),
        strategy_options={"ddp": {"precision": "bf16"}},
        until_settled=True,
        max_trials=8,
        budget_s=90.0,
        run_config={"trials": None, "budget": "90s"},
    )
    back = SessionSettings.from_json(settings.to_json())
    assert back == settings
    fsdp = back.strategies[1]
    assert type(fsdp.typed).__name__ == "FSDPOptions" and fsdp.typed == settings.strategies[1].typed
    assert (fsdp.typed.reshard_after_forward, fsdp.typed.replicate) == (False, 2)
    with pytest.raises(ValueError, match="^--dpbench-settings: expected the JSON dpbench run writes"):
        SessionSettings.from_json('{"trials": 3}')


def test_options_win_over_the_environment_which_fills_in_the_rest():
    environ = {"DPBENCH_WORLD_SIZES": "1,2,3", "DPBENCH_PROFILE": "full", "DPBENCH_WORKLOADS": "mlp,lenet"}
    settings = build_settings(
        {"world_sizes": "2", "workloads": ("transformer",)}, named=_options, environ=environ, settled_by_default=False
    )
    assert settings.world_sizes == (2,) and settings.profile == "full"
    assert settings.workloads == ("transformer",) and settings.workloads_chosen
    from_env = build_settings({}, named=_options, environ=environ, settled_by_default=False)
    assert from_env.workloads == ("mlp", "lenet") and not from_env.workloads_chosen


def test_the_default_design_is_the_sources_and_the_environments_trials_only_fix_a_fixed_one():
    environ = {"DPBENCH_TRIALS": "3"}
    suites = build_settings({}, named=_options, environ=environ, settled_by_default=False)
    assert (suites.until_settled, suites.trials) == (False, 3)
    run = build_settings({}, named=_options, environ=environ, settled_by_default=True, default_budget="30m")
    assert (run.until_settled, run.trials, run.max_trials, run.budget_s) == (True, None, DEFAULT_MAX_TRIALS, 1800.0)
    capped = build_settings({"max_trials": "8"}, named=_options, environ={}, settled_by_default=True)
    assert (capped.until_settled, capped.max_trials, capped.budget_s) == (True, 8, None)


@pytest.mark.parametrize(
    ("given", "settled_by_default", "message"),
    [
        ({"trials": 3, "budget": "10m"}, True,
         "--budget: trials until the answer is settled, found with --trials 3 (a fixed number of trials per case): "
         "choose one"),
        ({"trials": "3", "until_settled": True}, False,
         "--trials: a fixed number of trials, found with --until-settled (trials until settled): choose one"),
        ({"max_trials": "8"}, False, "--max-trials: expected it with --until-settled, found it alone"),
        ({"max_trials": "2"}, True, "--max-trials: expected an int >= 3 (the fewest pairs a claim is read from)"),
        ({"until_settled": True, "budget": "soon"}, False, "--budget: expected a duration such as 90s, 10m, 1h"),
        ({"strategies": "fsdp@nosuch=1"}, True, "--strategies: 'fsdp@nosuch=1': fsdp has no option 'nosuch'"),
    ],
)  # fmt: skip
def test_a_setting_that_contradicts_another_or_does_not_parse_is_one_line_naming_it(given, settled_by_default, message):
    with pytest.raises(ValueError) as info:
        build_settings(given, named=_options, environ={}, settled_by_default=settled_by_default)
    assert str(info.value).startswith(message) and "\n" not in str(info.value), str(info.value)


def test_a_file_key_is_named_as_written_there():
    def named(key: str) -> str:
        return f"dpbench.toml: {key}"

    with pytest.raises(ValueError, match=r"^dpbench.toml: budget: .* found with dpbench.toml: trials = 3 \("):
        build_settings({"trials": 3, "budget": "1m"}, named=named, environ={}, settled_by_default=True)


def test_the_shared_parsers():
    assert parse_budget("--budget", " 1.5h ") == 5400.0 and parse_budget("--budget", "10 m") == 600.0
    with pytest.raises(ValueError, match=r"^--budget: expected a duration such as 90s, 10m or 1h, found '0s'$"):
        parse_budget("--budget", "0s", forms="90s, 10m or 1h")
    assert parse_count("--trials", " 6 ", minimum=1) == 6
    for bad in ("0", "-1", "+2", "1.5", "x", "²"):
        with pytest.raises(ValueError, match=r"^--trials: expected an int >= 1, found "):
            parse_count("--trials", bad, minimum=1)
    assert parse_trials("DPBENCH_TRIALS", "4") == 4
    with pytest.raises(ValueError, match=r"^DPBENCH_TRIALS must be an integer >= 1 \(fresh-process trials"):
        parse_trials("DPBENCH_TRIALS", "0")
    assert [duration_text(s) for s in (42, 480, 5400)] == ["42 s", "8 min", "1.5 h"]
    assert [duration_text(s, exact=True) for s in (42, 185, 3720)] == ["42 s", "3 min 5 s", "1 h 2 min"]


class _Config:
    def __init__(self, **values):
        self.values = values

    def getoption(self, name, default=None):
        return self.values.get(name, default)


def test_the_session_reads_the_one_value_and_refuses_an_option_beside_it(monkeypatch):
    from dpbench.measure.plugin.session import session_settings

    monkeypatch.setenv("DPBENCH_WORLD_SIZES", "1,2,3")  # the value says everything: the environment is not read
    handed = SessionSettings(trials=2, strategies=parse_configs("x", "ddp@bucket_cap_mb=100"))
    assert session_settings(_Config(dpbench_settings=handed.to_json())) == handed
    with pytest.raises(ValueError, match="^--dpbench-trials: expected it in dpbench run's options, found it beside"):
        session_settings(_Config(dpbench_settings=handed.to_json(), dpbench_trials="3"))
    read = session_settings(_Config(dpbench_trials="3", dpbench_strategies="ddp"))
    assert (
        read.world_sizes == (1, 2, 3)
        and read.trials == 3
        and read == dataclasses.replace(read, strategies=parse_configs("x", "ddp"))
    )


@pytest.mark.parametrize(
    "env, options, message",
    [
        (
            {"DPBENCH_TRIALS": "0"},
            {},
            "DPBENCH_TRIALS must be an integer >= 1 (fresh-process trials per case), got '0'",
        ),
        (
            {"DPBENCH_TRIALS": "2.5"},
            {},
            "DPBENCH_TRIALS must be an integer >= 1 (fresh-process trials per case), got '2.5'",
        ),
        (
            {},
            {"dpbench_trials": "x"},
            "--dpbench-trials must be an integer >= 1 (fresh-process trials per case), got 'x'",
        ),
    ],
    ids=["env-zero", "env-fraction", "option-word"],
)
def test_a_bad_trial_count_is_the_sessions_one_line_error(env, options, message, monkeypatch):
    # What the suites' pytest_configure turns into a usage error (exit 4, this line alone): one such
    # session runs end to end in tests/test_suites_smoke.py.
    from dpbench.measure.plugin.session import session_settings

    monkeypatch.delenv("DPBENCH_TRIALS", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as exc:
        session_settings(_Config(**options))
    assert str(exc.value) == message
