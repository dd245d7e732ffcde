"""``dpbench list``: the strategies (with their options and defaults) and workloads by name."""
from __future__ import annotations

import argparse

__all__ = ["register_list"]


def _list(args: argparse.Namespace) -> int:
    # Imported here: listing needs torch, the rest of the CLI does not.
    from dpbench.strategies import get_strategy, list_strategies
    from dpbench.workloads import get_workload, list_workloads

    print("strategies:")
    for name in list_strategies():
        defaults = get_strategy(name).option_defaults
        options = ", ".join(f"{k}={v!r}" for k, v in defaults.items()) or "no options"
        print(f"  {name:<10} {options}")
    print("workloads:")
    for name in list_workloads():
        workload = get_workload(name)
        print(f"  {name:<12} {workload.description}".rstrip())
    return 0


def register_list(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("list", help="list the strategies (with option defaults) and workloads")
    parser.set_defaults(handler=_list)
