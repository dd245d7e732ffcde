"""docs/cli.md lists exactly the options each `dpbench` subcommand's parser has, with the code's defaults.

The parsers are built by `dpbench.cli.build_parser` (every subcommand registers itself); the page
has one `## dpbench <command>` section per subcommand, each with a table whose first cell names the
option (`-o FILE`, `--output FILE`) and whose second cell is the default.
"""

from __future__ import annotations

import argparse
import re

import pytest
from _docs_pages import page, section, table_rows

from dpbench.cli import build_parser

CLI = page("cli.md")
_OPTION = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]*)")


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def parser_options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` but -h/--help."""
    return {s for a in parser._actions for s in a.option_strings if s not in ("-h", "--help")}


def documented_options(text: str) -> dict[str, str]:
    """{option string: its default cell} of the option tables in ``text`` (positionals left out)."""
    out = {}
    for cells in table_rows(text):
        first = cells[0]
        if not first.startswith("`-") or first.startswith("`-- "):
            continue  # a positional, or `-- PYTEST_ARGS`
        for option in _OPTION.findall(first):
            out[option] = cells[1] if len(cells) > 1 else ""
    return out


def test_every_subcommand_has_a_section():
    headings = set(re.findall(r"^## dpbench (\w[\w-]*)$", CLI, flags=re.M))
    assert headings == set(subparsers()), "docs/cli.md: one '## dpbench <command>' section per subcommand"


@pytest.mark.parametrize("command", sorted(subparsers()))
def test_the_section_lists_exactly_the_parsers_options(command):
    documented = set(documented_options(section(CLI, f"## dpbench {command}")))
    declared = parser_options(subparsers()[command])
    assert documented - declared == set(), f"dpbench {command}: documented but not in the parser"
    assert declared - documented == set(), f"dpbench {command}: in the parser but not in docs/cli.md"


def test_the_global_options_are_listed():
    parser = build_parser()
    declared = {s for a in parser._actions if a.option_strings for s in a.option_strings} - {"-h", "--help"}
    assert set(documented_options(section(CLI, "## Global options"))) == declared


@pytest.mark.parametrize("command", sorted(subparsers()))
def test_a_parser_default_is_the_documented_one(command):
    # A literal default in the parser (a path, a title, "10%") must be the one the page shows;
    # defaults computed at run time (None in the parser) are checked against the code's constants
    # in test_docs_defaults.py.
    documented = documented_options(section(CLI, f"## dpbench {command}"))
    for action in subparsers()[command]._actions:
        if not action.option_strings or action.default in (None, False, [], "", argparse.SUPPRESS):
            continue
        cell = documented[action.option_strings[-1]]
        assert f"`{action.default}`" in cell, (
            f"dpbench {command} {action.option_strings[-1]}: parser default {action.default!r}, documented {cell!r}"
        )


def test_the_pytest_plugin_options_are_listed():
    from dpbench.measure.plugin import pytest_addoption

    names: list[str] = []

    class Group:
        def addoption(self, *opts, **kwargs):
            names.extend(opts)

    class Parser:
        def getgroup(self, *args, **kwargs):
            return Group()

    pytest_addoption(Parser())
    documented = set(documented_options(section(CLI, "## The suites' pytest options")))
    assert documented == set(names)


def test_the_extractor_can_fail():
    # A page that names an option the parser lacks must be told apart.
    text = "| option | default | meaning |\n|---|---|---|\n| `-o FILE`, `--output FILE` | `x` | |\n| `--nope` | | |\n"
    assert set(documented_options(text)) == {"-o", "--output", "--nope"}


def test_compare_help_says_what_a_directory_stands_for(tmp_path, capsys):
    # A directory is one run for compare (its newest), several for report (one per machine).
    from dpbench.results.load import resolve_run, resolve_runs

    for machine, names in {"a": ["0001_x.json", "0002_y.json"], "b": ["0001_z.json"]}.items():
        (tmp_path / machine).mkdir()
        for name in names:
            (tmp_path / machine / name).write_text("{}")
    assert resolve_run(tmp_path).name in {"0002_y.json", "0001_z.json"}  # exactly one run
    assert len(resolve_runs([tmp_path])) == 2  # the newest of each machine
    assert "a directory (its newest run) or" in " ".join(subparsers()["compare"].format_help().split())
    assert "a directory (its newest run per machine)" in " ".join(subparsers()["report"].format_help().split())


def test_the_gate_page_explains_every_verdict_and_no_other():
    from _docs_pages import page as doc_page

    from dpbench.gate.verdicts import Verdict

    text = section(doc_page("gate.md"), "## Verdicts, and what to do next")
    documented = {cells[0].strip("`") for cells in table_rows(text) if cells[0] != "verdict"}
    assert documented == {v.value for v in Verdict}


def test_the_exit_codes_are_the_codes():
    from dpbench import cli
    from dpbench.ab import job as ab

    rows = {cells[0]: cells[1] for cells in table_rows(section(CLI, "## Exit codes"))}
    assert "unusable input" in rows[str(cli.EXIT_INPUT)] and "internal error" in rows[str(cli.EXIT_INTERNAL)]
    assert "`ab`" in rows[str(ab.EXIT_SUITE_FAILED)] and "SIGTERM" in rows[str(ab.EXIT_TERMINATED)]
    assert "Ctrl-C" in rows[str(ab.EXIT_INTERRUPTED)]
