"""runner: what ``dpbench run`` does beyond parsing its options — the main job as one command: the
packaged suites through pytest (the same engine and run format as ``pytest suites/``) on the
workloads, strategies and world sizes asked for, from the command line and the config file
(``[tool.dpbench]`` in pyproject.toml, or dpbench.toml), then the saved run, the HTML report and a
short decision per workload in the terminal.

:mod:`.config` (the config file, typed and validated), :mod:`.summary` (the terminal decision).
The subcommand itself is :mod:`dpbench.commands.run`.

May import: every layer below (workloads to check specs before anything starts, measure's
profiles, results and report); nothing imports it but the command line.
"""

from __future__ import annotations

from dpbench.runner.summary import print_decision

__all__ = ["print_decision"]
