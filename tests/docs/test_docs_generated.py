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


def test_an_inline_fact_is_the_codes_and_keeps_its_code_style():
    module = gen_docs()
    known = {"level": lambda: "96.1%", "max": lambda: "12"}
    text = (
        "at <!-- generated:level -->90%<!-- end:generated:level --> each, "
        "default <!-- generated:max -->`9`<!-- end:generated:max --> "
        "(<!-- generated:max -->9<!-- end:generated:max -->)\n"
    )
    assert module.render_facts(text, known) == (
        "at <!-- generated:level -->96.1%<!-- end:generated:level --> each, "
        "default <!-- generated:max -->`12`<!-- end:generated:max --> "
        "(<!-- generated:max -->12<!-- end:generated:max -->)\n"
    )


def test_an_inline_fact_no_code_states_is_an_error():
    with pytest.raises(SystemExit, match="no fact named nope; known: level"):
        gen_docs().render_facts("<!-- generated:nope -->x<!-- end:generated:nope -->", {"level": lambda: "90%"})


def test_the_facts_are_the_constants_the_run_uses():
    from dpbench.decision.claims import CLAIM_LEVEL
    from dpbench.decision.sequential import DEFAULT_MAX_TRIALS, plan_looks
    from dpbench.runner.config import SUITES, WORKLOAD_SUITES

    facts = {name: make() for name, make in gen_docs().facts().items()}
    assert (facts["claim-level"], facts["max-trials"], facts["budget"]) == (f"{CLAIM_LEVEL:.0%}", "12", "30 min")
    assert (facts["claim-error"], facts["fewest-trials"], facts["shown-level"]) == ("10%", "3", "95%")
    assert facts["looks"] == "5, 8 and 12" and plan_looks(DEFAULT_MAX_TRIALS).looks == (5, 8, 12)
    assert (facts["first-look"], facts["look-count"]) == ("5", "3")
    assert facts["workload-suites"] == "`throughput`" and WORKLOAD_SUITES == ("throughput",)
    assert facts["suites"].count("`") == 2 * len(SUITES)
    assert (facts["profile-with-cuda"], facts["profile-without-cuda"]) == ("full", "quick")


def test_the_readme_states_its_claim_level_and_defaults_as_generated_facts():
    from pathlib import Path

    readme = (Path(gen_docs().ROOT) / "README.md").read_text()
    for name in ("claim-level", "claim-error", "max-trials", "budget"):
        assert f"<!-- generated:{name} -->" in readme, name
