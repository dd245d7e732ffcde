"""Imported first by the forkserver helper (:data:`dpbench.workers.forkserver.PRELOAD`): Ctrl-C is
the parent's.

A terminal's Ctrl-C goes to the whole foreground process group, the helper with it. CPython's
forkserver ignores SIGINT only once its preload is imported, and importing torch takes seconds (far
more on a busy machine): a Ctrl-C then killed the helper with a KeyboardInterrupt traceback printed
below dpbench's own "interrupted" line. The parent stops everything it started itself (the workers
ignore SIGINT for the same reason, :mod:`dpbench.workers.worker`), and the helper leaves when the
parent's pipe to it closes.
"""

from __future__ import annotations

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
