"""``dpbench list``: the strategies, each with its options as its options dataclass declares them, and
the workloads."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from dpbench.commands.options import ExamplesFormatter, examples

if TYPE_CHECKING:
    from dpbench.strategies import OptionDoc

__all__ = ["register_list"]


def _list(args: argparse.Namespace) -> int:
    # Imported here: listing needs torch, the rest of the CLI does not.
    from dpbench.workloads import get_workload, list_workloads

    if args.json:
        from dpbench.results.console import write_json

        write_json(args.json, _list_json())
        return 0
    print("strategies (option=default  what it does):")
    _print_strategies()
    print("workloads:")
    for name in list_workloads():
        workload = get_workload(name)
        print(f"  {name:<12} {workload.description}".rstrip())
    return 0


def _print_strategies() -> None:
    """The options every strategy shares once, then each strategy's own, as its options dataclass declares them."""
    from dpbench.strategies import CommonOptions, describe_options, get_strategy, list_strategies

    shared = describe_options(CommonOptions)
    shared_names = {option.name for option in shared}
    print("  every strategy")
    _print_options(shared)
    for name in list_strategies():
        print(f"  {name}")
        options = describe_options(get_strategy(name).options_type)
        _print_options([option for option in options if option.name not in shared_names])


def _print_options(options: list[OptionDoc]) -> None:
    for option in options:
        print(f"    {f'{option.name}={option.default!r}':<30} {option.doc}".rstrip())
    if not options:
        print("    (no options of its own)")


def _list_json() -> dict:
    from dpbench.strategies import describe_options, get_strategy, list_strategies
    from dpbench.workloads import get_workload, list_workloads

    def plain(value):  # a default JSON cannot hold (a tuple of types, say) is shown as Python writes it
        return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)

    return {
        "strategies": [
            {
                "name": name,
                "options": [
                    {"name": o.name, "default": plain(o.default), "doc": o.doc}
                    for o in describe_options(get_strategy(name).options_type)
                ],
            }
            for name in list_strategies()
        ],
        "workloads": [{"name": n, "description": get_workload(n).description} for n in list_workloads()],
    }


def register_list(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "list",
        help="list the strategies (with their options) and workloads",
        epilog=examples("dpbench list", "dpbench list --json - | jq '.workloads[].name'"),
        formatter_class=ExamplesFormatter,
    )
    parser.add_argument("--json", metavar="FILE", help="write the lists as JSON (-: to stdout)")
    parser.set_defaults(handler=_list)
