"""The traces step's verification on real CPU traces of ddp w2, as recorded and rewritten so that
the collectives come from another thread than the step's, as on CUDA (the autograd engine's
device thread runs the backward pass and DDP's gradient hooks there): both must pass."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

import dpbench
from dpbench.traces.analysis import analyse_case

ROOT = Path(__file__).resolve().parents[2]
# A thread id no recorded trace holds, named as torch names the autograd engine's device threads.
AUTOGRAD_TID = 999_999


def _verify():
    module = importlib.import_module("tools.gpu_check_verify")
    return module


def as_if_from_the_autograd_thread(trace: dict) -> tuple[dict, int]:
    """The trace with every ``c10d::*`` op, and every op it encloses on its thread, moved to
    AUTOGRAD_TID; and how many ops were moved."""
    events = trace["traceEvents"]
    calls = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("c10d::")]
    moved = set()
    for call in calls:
        lo, hi = call["ts"], call["ts"] + call["dur"]
        for e in events:
            inside = e.get("ph") == "X" and lo <= e["ts"] and e["ts"] + e["dur"] <= hi
            if inside and (e.get("pid"), e.get("tid")) == (call.get("pid"), call.get("tid")):
                moved.add(id(e))
    rewritten = [{**e, "tid": AUTOGRAD_TID} if id(e) in moved else e for e in events]
    pid = calls[0].get("pid") if calls else 0
    rewritten.append(
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": AUTOGRAD_TID, "args": {"name": "pt_autograd_0"}}
    )
    return {**trace, "traceEvents": rewritten}, len(moved)


def _problems(files, name):
    breakdown = analyse_case(files)
    benchmark = {"name": name, "extra_info": {"world_size": 2, "trace_breakdown": breakdown}}
    return breakdown, _verify().traced_case_problems(benchmark)


@pytest.mark.slow  # two worker processes, traced
def test_the_traces_verification_passes_with_collectives_from_another_thread(tmp_path):
    with dpbench.launch("ddp", "mlp", world_size=2, global_batch=16) as run:
        run.step(2)  # untimed warm-up, as a trial does before tracing
        result = run.trace(3, tmp_path / "recorded")
    (tmp_path / "rewritten").mkdir()
    rewritten = []
    for path in result.files:
        trace, moved = as_if_from_the_autograd_thread(json.loads(gzip.decompress(path.read_bytes())))
        assert moved > 0, f"{path.name}: no c10d:: op to move"
        rewritten.append(tmp_path / "rewritten" / path.name)
        rewritten[-1].write_bytes(gzip.compress(json.dumps(trace).encode()))
    recorded, (line, problems) = _problems(result.files, "ddp-mlp-w2 as recorded")
    assert problems == [], line
    moved, (line, problems) = _problems(rewritten, "ddp-mlp-w2 from another thread")
    assert problems == [], line
    # The same collectives, arriving at the same times: only the issuing thread differs.
    assert moved["collectives"] == recorded["collectives"] and moved["skew"] == recorded["skew"]
    assert recorded["skew"]["collectives"] >= 3
