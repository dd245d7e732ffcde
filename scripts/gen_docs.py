#!/usr/bin/env python3
"""Write the documentation's generated tables from the code: `scripts/gen_docs.py` rewrites them,
`scripts/gen_docs.py --check` exits 1 when a page differs from what the code says (what
tests/docs/test_generated.py runs).

A generated table sits between `<!-- generated:NAME -->` and `<!-- end:generated:NAME -->` in its
page; everything else on the page is written by hand.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def options_table() -> str:
    """Every strategy option with its default and its field docstring, as the dataclasses declare them."""
    from dpbench.strategies import CommonOptions, describe_options, get_strategy, list_strategies
    from dpbench.strategies._options import CompileOptions

    rows = ["| strategy | option | default | what it does |", "|---|---|---|---|"]
    shared = describe_options(CommonOptions)
    shared_names = {option.name for option in shared}
    for option in shared:
        rows.append(f"| every strategy | `{option.name}` | `{option.default!r}` | {_cell(option.doc)} |")
    compiling = [n for n in list_strategies() if issubclass(get_strategy(n).options_type, CompileOptions)]
    compile_names = {o.name for o in describe_options(CompileOptions)} - shared_names
    for option in describe_options(CompileOptions):
        if option.name in compile_names:
            names = ", ".join(f"`{n}`" for n in compiling)
            rows.append(f"| {names} | `{option.name}` | `{option.default!r}` | {_cell(option.doc)} |")
    for name in list_strategies():
        own = [
            o for o in describe_options(get_strategy(name).options_type) if o.name not in shared_names | compile_names
        ]
        if not own:
            rows.append(f"| `{name}` | — | | no options of its own |")
        for option in own:
            rows.append(f"| `{name}` | `{option.name}` | `{option.default!r}` | {_cell(option.doc)} |")
    return "\n".join(rows)


# page (relative to docs/) -> {table name: generator}
GENERATED: dict[str, dict[str, Callable[[], str]]] = {
    "strategies.md": {"options": options_table},
}


def render(text: str, tables: dict[str, Callable[[], str]]) -> str:
    """``text`` with each generated table replaced by what its generator writes now."""
    for name, make in tables.items():
        pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- end:generated:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"gen_docs: no <!-- generated:{name} --> ... <!-- end:generated:{name} --> block")
        table = make()
        text = pattern.sub(lambda m, table=table: m.group(1) + table + "\n" + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a page is not what the code generates")
    args = parser.parse_args(argv)
    stale = []
    for page, tables in GENERATED.items():
        path = ROOT / "docs" / page
        old = path.read_text()
        new = render(old, tables)
        if new != old:
            stale.append(page)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"gen_docs: out of date with the code: {', '.join(stale)} (run scripts/gen_docs.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
