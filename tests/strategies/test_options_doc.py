"""Strategy options are documented where they are declared, and the README's table says the same.

Each strategy's options are a frozen dataclass with an attribute docstring per field; ``dpbench list``
reads those docs back, and the README's option table must list exactly the dataclasses' options
with their defaults.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from dpbench.strategies import CommonOptions, describe_options, get_strategy, list_strategies
from dpbench.strategies._options import CompileOptions, field_docs

README = Path(__file__).resolve().parents[2] / "README.md"
TABLE_HEADER = "| strategy | option | default | what it does |"
EVERY_STRATEGY = "every strategy"
NO_OPTIONS = "—"


def readme_option_rows() -> list[tuple[list[str], str, str]]:
    """(strategies, option, default) of each row of the README's option table, cells unquoted."""
    lines = README.read_text().splitlines()
    start = lines.index(TABLE_HEADER) + 2  # past the header and its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        strategy, option, default = (cell.strip() for cell in line.strip("|").split("|")[:3])
        names = list_strategies() if strategy == EVERY_STRATEGY else re.findall(r"`([^`]+)`", strategy)
        rows.append((names, option.strip("`"), default.strip("`")))
    return rows


def shared_names(name: str) -> set[str]:
    """The options ``name`` takes from the shared classes (CommonOptions, CompileOptions)."""
    options_type = get_strategy(name).options_type
    shared = CompileOptions if issubclass(options_type, CompileOptions) else CommonOptions
    return {field.name for field in dataclasses.fields(shared)}


def test_the_readme_table_lists_every_option_with_its_default():
    rows = readme_option_rows()
    assert rows, f"no option table ({TABLE_HEADER!r}) in the README"
    listed = {}
    for names, option, default in rows:
        assert set(names) <= set(list_strategies()), f"unknown strategy in the README row for {option!r}: {names}"
        if option == NO_OPTIONS:
            for name in names:  # a note row: the strategy has nothing beyond the shared options
                assert set(get_strategy(name).option_defaults) == shared_names(name), name
            continue
        for name in names:
            assert (name, option) not in listed, f"{name} {option} is in the README table twice"
            listed[(name, option)] = repr(ast.literal_eval(default))
    declared = {
        (name, option): repr(default)
        for name in list_strategies()
        for option, default in get_strategy(name).option_defaults.items()
    }
    assert listed == declared


@pytest.mark.parametrize("name", list_strategies())
def test_every_option_has_a_one_line_doc(name):
    for option in describe_options(get_strategy(name).options_type):
        assert option.doc.strip(), f"{name} option {option.name} has no docstring"
        assert "\n" not in option.doc


@pytest.mark.parametrize("name", list_strategies())
def test_each_strategy_declares_a_frozen_keyword_only_options_class_named_for_it(name):
    options_type = get_strategy(name).options_type
    assert options_type.strategy == name  # error messages name the strategy
    params = dataclasses.fields(options_type)
    assert all(field.kw_only for field in params)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options_type().optimizer = "adamw"  # type: ignore[misc]


def test_field_docs_reads_the_string_after_each_field_and_nothing_else():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Example(CommonOptions):
        strategy = "example"

        documented: int = 1
        """First line.

        More detail.
        """

        undocumented: bool = False
        # a comment is not a docstring

    docs = field_docs(Example)
    assert docs["documented"] == "First line.\n\nMore detail."
    assert "undocumented" not in docs
    assert docs["optimizer"].startswith('``"sgd"``')  # inherited fields keep their base's doc
