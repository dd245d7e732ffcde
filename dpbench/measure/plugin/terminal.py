"""What a measuring session says on the terminal: its progress lines and the note under
pytest-benchmark's table."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["say", "table_note"]


def say(config: Any, text: str) -> None:
    """One ``dpbench: …`` line, through pytest's terminal when it is set up."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"dpbench: {text}")
    else:  # pytest's terminal is not set up yet: interrupted while the session was configured
        print(f"dpbench: {text}", file=sys.stderr, flush=True)


def table_note(profile: Any) -> str:
    """What pytest-benchmark's table shows when the plugin measured it."""
    return (
        f"dpbench: pytest-benchmark's table shows seconds per step (per call for collectives), measured in "
        f"the workers: one round = one fresh-process trial's median ({profile.trials} trials × "
        f"{profile.rounds} timed rounds per case), so its Median is the headline step_time_s that "
        f"`dpbench report` and `dpbench compare` use."
    )
