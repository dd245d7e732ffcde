"""The config file of ``dpbench run``: found in the working directory, typed and validated (errors
name the file, the key and what was expected), overridden by the command line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dpbench.cli import build_parser
from dpbench.commands.run import run_options
from dpbench.runner.config import ConfigError, RunConfig, find_config, load_config
from dpbench.runner.run import pytest_command, resolve_run, resolve_run_config

PYPROJECT = """
[project]
name = "mine"

[tool.dpbench]
workloads = ["mlp@hidden=64", {spec = "hf:gpt2@n_layer=1", global_batch = 8, seq_len = 16}]
strategies = ["single", "ddp"]
world_sizes = [1, 2]
trials = 3
profile = "quick"
precision = "bf16"

[tool.dpbench.strategy_options.ddp]
bucket_cap_mb = 5
"""


def _args(*argv: str):
    return run_options(build_parser().parse_args(["run", *argv]))


def _settings(cmd: list[str]) -> dict:
    """The one value the pytest session is handed."""
    import json

    (handed,) = [a for a in cmd if a.startswith("--dpbench-settings=")]
    return json.loads(handed.partition("=")[2])


def test_pyproject_tool_dpbench_is_read_and_typed(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    path, table = find_config(tmp_path)
    config = load_config(path, table)
    assert config.workloads == ("mlp@hidden=64", "hf:gpt2@n_layer=1,global_batch=8,seq_len=16")
    assert config.strategies == ("single", "ddp") and config.world_sizes == (1, 2) and config.trials == 3
    assert config.profile == "quick" and config.precision == "bf16"
    assert config.strategy_options == {"ddp": {"bucket_cap_mb": 5}}
    assert config.source == str(tmp_path / "pyproject.toml")


def test_dpbench_toml_wins_over_pyproject_and_the_command_line_over_both(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "dpbench.toml").write_text('workloads = ["mlp"]\ntrials = 4\nworld_sizes = [1, 2, 3]\n')
    plan = resolve_run(_args("--trials", "2", "--strategies", "single,fsdp"), tmp_path, environ={})
    config = plan.config
    assert config.workloads == ("mlp",) and config.trials == 2 and config.world_sizes == (1, 2, 3)
    assert config.strategies == ("single", "fsdp") and config.source == str(tmp_path / "dpbench.toml")
    cmd, env = pytest_command(plan, ["--", "-x"])
    settings = _settings(cmd)
    assert settings["workloads"] == ["mlp"] and settings["workloads_chosen"] and cmd[-1] == "-x"
    assert "dpbench.suites.test_throughput" in cmd and "dpbench.suites.test_comm" not in cmd
    assert settings["trials"] == 2 and not settings["until_settled"] and settings["world_sizes"] == [1, 2, 3]
    assert [c["strategy"] for c in settings["strategies"]] == ["single", "fsdp"]
    assert settings["run_config"]["trials"] == 2  # the resolved configuration, saved with the run
    assert not any(key.startswith("DPBENCH_") and key not in os.environ for key in env)


@pytest.mark.parametrize(
    "text, message",
    [
        ("trials = 0", "tool.dpbench.trials: expected an int >= 1, found 0"),
        (
            "trails = 3",
            r"tool.dpbench.trails: unknown key \(did you mean 'trials', 'strategies' or 'max_trials'\?\); "
            r"known keys: budget, device",
        ),
        ('world_sizes = "1,2"', "tool.dpbench.world_sizes: expected a non-empty list of ints >= 1, found '1,2'"),
        ('profile = "fast"', "tool.dpbench.profile: expected 'quick' or 'full', found 'fast'"),
        ("workloads = [3]", r"tool.dpbench.workloads\[0\]: expected a spec string or a table"),
        ('workloads = [{spec = "mlp", batch = 3}]', r"workloads\[0\]: expected only the keys spec, global_batch"),
        ("strategy_options = 3", "tool.dpbench.strategy_options: expected a table of tables"),
        ('trials = 3\nprofile = "quick', r"not valid TOML: .*\(at line 3, column 17\)"),
    ],
)
def test_a_bad_config_names_the_file_the_key_and_what_was_expected(tmp_path, text, message):
    (tmp_path / "pyproject.toml").write_text(f"[tool.dpbench]\n{text}\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_config(*find_config(tmp_path))
    assert str(info.value).startswith(str(tmp_path / "pyproject.toml") + ": ")
    assert "\n" not in str(info.value)


def test_unknown_strategies_and_options_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match=r"^--strategies: expected strategy names from single, .*found 'ddpp'"):
        resolve_run_config(_args("--strategies", "single,ddpp"), tmp_path)
    (tmp_path / "dpbench.toml").write_text('strategies = ["single", "ddpp"]\n')
    with pytest.raises(ValueError, match=r"dpbench.toml: strategies: expected strategy names from single, .*'ddpp'"):
        resolve_run_config(_args(), tmp_path)
    (tmp_path / "dpbench.toml").write_text("[strategy_options.ddp]\nbucket_cap = 5\n")
    with pytest.raises(
        ConfigError, match=r"strategy_options.ddp \(from .*dpbench.toml\): Unknown option\(s\) 'bucket_cap'"
    ):
        resolve_run_config(_args(), tmp_path)


def test_until_settled_is_the_default_and_trials_a_fixed_design(tmp_path):
    def handed(*argv: str) -> dict:
        return _settings(pytest_command(resolve_run(_args(*argv), tmp_path, environ={}), [])[0])

    settings = handed()
    assert settings["until_settled"] and settings["trials"] is None
    assert settings["max_trials"] == 12 and settings["budget_s"] == 30 * 60  # DEFAULT_BUDGET
    settings = handed("--max-trials", "8", "--budget", "90s")
    assert settings["until_settled"] and settings["max_trials"] == 8 and settings["budget_s"] == 90
    settings = handed("--trials", "3")
    assert not settings["until_settled"] and settings["trials"] == 3 and settings["budget_s"] is None


def test_the_command_line_design_wins_over_the_files(tmp_path):
    (tmp_path / "dpbench.toml").write_text("trials = 4\n")
    config = resolve_run_config(_args("--until-settled"), tmp_path)
    assert config.trials is None and config.until_settled
    (tmp_path / "dpbench.toml").write_text('max_trials = 8\nbudget = "5m"\n')
    config = resolve_run_config(_args("--trials", "3"), tmp_path)
    assert config.trials == 3 and config.max_trials is None and config.budget is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("trials = 3\nuntil_settled = true", "dpbench.toml: until_settled: trials until the answer is settled, found "
         "with .*dpbench.toml: trials = 3 \\(a fixed number of trials per case\\): choose one"),
        ('budget = "soon"', "dpbench.toml: budget: expected a duration such as 90s, 10m, 1h, found 'soon'"),
        ("max_trials = 2", "dpbench.toml: max_trials: expected an int >= 3"),
        ('until_settled = "yes"', "dpbench.toml: until_settled: expected true or false, found 'yes'"),
    ],
)  # fmt: skip
def test_a_config_files_design_is_checked(tmp_path, text, message):
    (tmp_path / "dpbench.toml").write_text(text + "\n")
    with pytest.raises((ConfigError, ValueError), match=message):
        resolve_run_config(_args(), tmp_path)


def test_no_config_file_means_the_defaults(tmp_path):
    assert find_config(tmp_path) is None
    assert resolve_run_config(_args(), tmp_path) == RunConfig()
    assert RunConfig().to_dict()["save"] == "run"
    assert Path(RunConfig().results).name == "results"
