"""The tables the documentation generates from the code (scripts/gen_docs.py) are up to date."""

from __future__ import annotations

import importlib.util

import pytest
from _docs_pages import ROOT


def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_table_is_what_the_code_writes(capsys):
    assert gen_docs().main(["--check"]) == 0, capsys.readouterr().err


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
