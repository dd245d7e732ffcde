"""runner: what ``dpbench run`` does beyond parsing its options — the main job as one command: the
packaged suites through pytest (the same engine and run format as ``pytest suites/``) on the
workloads, strategies and world sizes asked for, from the command line and the config file
(``[tool.dpbench]`` in pyproject.toml, or dpbench.toml), then the saved run, the HTML report and a
short decision per workload in the terminal.

:mod:`.config` (the config file, typed and validated), :mod:`.run` (the command line's and the
file's settings merged and checked, the session's settings parsed once from them
(:mod:`dpbench.measure.settings`), the torch probe, pytest's command line with those settings as
one JSON value, the slow-step estimate, the subprocess, the report), :mod:`.summary` (the terminal
decision). The subcommand's shape (its options, help, examples) is :mod:`dpbench.commands.run`.

May import: every layer below (workloads to check specs before anything starts, strategies'
configurations, measure's settings and profiles, results and report); nothing imports it but the
command line.
"""

from __future__ import annotations

from dpbench.runner.text import print_decision

__all__ = ["print_decision"]
