"""Where a session's trace files live until the run is saved: a staging directory, then
``results/<machine-id>/traces/<run-id>/<case>/rank<r>.json.gz``, published in one rename.

The same habit as the sampler's timelines (dpbench/measure/plugin/storage.py): nothing appears under
``results/`` unless the run itself is saved, and a published directory is complete or absent.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

__all__ = ["TRACES_DIR", "TraceStore"]

TRACES_DIR = "traces"


class TraceStore:
    """Stages per-case trace directories during a session; publishes them when the run is saved."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.staging = Path(tempfile.mkdtemp(prefix="dpbench-traces-"))
        self.published: Path | None = None

    def dir_for(self, name: str) -> tuple[Path, str]:
        """``(staged directory, its path relative to the machine directory once published)``."""
        safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)
        return self.staging / safe, f"{TRACES_DIR}/{self.run_id}/{safe}"

    def publish(self, machine_dir: Path) -> Path | None:
        if self.published is not None or not any(self.staging.iterdir()):
            return self.published
        final = machine_dir / TRACES_DIR / self.run_id
        partial = machine_dir / TRACES_DIR / f".{self.run_id}.partial"
        partial.parent.mkdir(parents=True, exist_ok=True)
        # Half-written files a failed rank left behind (".*.partial", ".*.tmp") stay out.
        shutil.copytree(self.staging, partial, ignore=shutil.ignore_patterns(".*"))
        os.replace(partial, final)  # atomic: the directory appears complete or not at all
        self.published = final
        return final

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
