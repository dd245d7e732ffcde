"""commands: the command line, one module per subcommand, each of one shape — a ``register_<name>``
that adds its parser to argparse's subparsers (options, help, examples) and sets ``handler``
(``Namespace -> int``, the exit code) as its default; the handler checks the options, calls its
package's public function and prints. :data:`SUBCOMMANDS` lists them in ``--help`` order;
``dpbench.cli`` builds the parser from it and turns a failure into an exit code. To add a
subcommand, write such a module and add its line here.

May import: every layer below (the gate, ab, history, predict, the report, the runner, measure's
settings, results, and — only inside ``list`` and ``estimate``'s handlers — strategies and
workloads, which need torch); nothing imports it but ``dpbench.cli``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from dpbench.commands.ab import register_ab
from dpbench.commands.compare import register_compare
from dpbench.commands.estimate import register_estimate
from dpbench.commands.history import register_history
from dpbench.commands.list import register_list
from dpbench.commands.predict import register_predict
from dpbench.commands.report import register_report
from dpbench.commands.run import register_run
from dpbench.commands.runs import register_runs

__all__ = ["SUBCOMMANDS"]

SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    register_report,
    register_compare,
    register_list,
    register_ab,
    register_history,
    register_runs,
    register_run,
    register_estimate,
    register_predict,
]
