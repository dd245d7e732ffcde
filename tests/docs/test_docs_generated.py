"""The tables the documentation generates from the code (python -m tools.gen_docs) are up to date."""

from __future__ import annotations

import importlib.util

import pytest


def gen_docs():
    module = importlib.import_module("tools.gen_docs")
    return module


def test_every_generated_table_is_what_the_code_writes(capsys):
    assert importlib.import_module("tools.gen_docs").main(["--check", "--fast"]) == 0, capsys.readouterr().err


@pytest.mark.slow  # a pytest --collect-only of the suites: seconds
def test_the_quick_profiles_tests_and_skips_are_what_the_suites_collect(capsys):
    assert importlib.import_module("tools.gen_docs").main(["--check"]) == 0, capsys.readouterr().err


def test_a_case_the_strategy_refuses_on_a_cpu_is_counted_skipped_with_its_reason():
    module = gen_docs()
    row = {"suite": "test_throughput.py", "skip": None, "options": {}, "world_size": 2, "global_batch": 64}
    assert module._skip_reason_on_cpu({**row, "strategy": "ddp"}) is None
    assert module._skip_reason_on_cpu({**row, "strategy": "torch-dp"}).startswith("torch-dp needs CUDA")
    assert module._skip_reason_on_cpu({**row, "strategy": "ddp", "options": {"comm_hook": "bf16"}})
    assert module._skip_reason_on_cpu({"suite": "test_convergence.py", "skip": "opt-in"}) == "opt-in"


def test_a_stale_table_is_replaced():
    module = gen_docs()
    text = "before\n<!-- generated:t -->\nold\n<!-- end:generated:t -->\nafter\n"
    assert (
        module.render(text, {"t": lambda: "new"})
        == "before\n<!-- generated:t -->\nnew\n<!-- end:generated:t -->\nafter\n"
    )


def test_a_page_without_its_markers_is_an_error():
    with pytest.raises(SystemExit, match="no <!-- generated:t -->"):
        gen_docs().render("no markers here\n", {"t": lambda: "new"})


def test_the_options_table_names_every_strategy():
    from dpbench.strategies import list_strategies

    table = gen_docs().options_table()
    for name in list_strategies():
        assert f"| `{name}` |" in table or f"`{name}`," in table
