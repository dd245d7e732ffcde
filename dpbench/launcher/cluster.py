"""Deprecated alias: ``python -m dpbench.launcher.cluster`` runs ``python -m dpbench.cluster``.

Kept for one release (the cluster runner moved to its own package); it says so on stderr. Run as
a module only: the launcher itself never loads the cluster code (``runpy`` runs it by name).
"""

import runpy
import sys

if __name__ == "__main__":
    print(
        "dpbench: `-m dpbench.launcher.cluster` is deprecated and will be removed in the next release; "
        "use `-m dpbench.cluster`",
        file=sys.stderr,
        flush=True,
    )
    runpy.run_module("dpbench.cluster", run_name="__main__", alter_sys=True)
