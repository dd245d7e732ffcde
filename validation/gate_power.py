#!/usr/bin/env python
"""The gate's power table: CV × trials × effect, for ``dpbench compare`` and paired ``dpbench ab``.

A thin front to ``scripts/simulate_gate.py`` (the one simulation of the gate, through the real
``judge_family``); kept under its old name because older notes point here.

    .venv/bin/python scripts/bench_gate_power.py [--model model.json | --scenario uniform] [--power-jobs 200]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import simulate_gate  # noqa: E402

if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(simulate_gate.main(["--power", "--jobs", "0", *args] if "--jobs" not in args else ["--power", *args]))
