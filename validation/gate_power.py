#!/usr/bin/env python
"""The gate's power table: CV × trials × effect, for ``dpbench compare`` and paired ``dpbench ab``.

A thin front to ``python -m validation.simulate_gate`` (the one simulation of the gate, through the real
``judge_family``); kept under its old name because older notes point here.

    .venv/bin/python -m validation.gate_power [--model model.json | --scenario uniform] [--power-jobs 200]
"""

from __future__ import annotations

import sys
from pathlib import Path


from validation import simulate_gate

if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(simulate_gate.main(["--power", "--jobs", "0", *args] if "--jobs" not in args else ["--power", *args]))
