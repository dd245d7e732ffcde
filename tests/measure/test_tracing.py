"""Tracing in the measuring engine: the switch, who is asked to trace, what extra_info gets."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from dpbench.measure.tracing import trace_env, trace_extra_info
from dpbench.measure.trials import TrialResult, TrialSession
from tests.traces._kineto import cpu_rank, write


def test_dpbench_trace_values():
    assert [trace_env({"DPBENCH_TRACE": v}) for v in ("1", "true", "YES", "on")] == [True] * 4
    assert [trace_env(e) for e in ({}, {"DPBENCH_TRACE": ""}, {"DPBENCH_TRACE": "0"}, {"DPBENCH_TRACE": "no"})] == [
        False
    ] * 4
    with pytest.raises(ValueError, match="DPBENCH_TRACE must be 1 or 0 .* got 'maybe'"):
        trace_env({"DPBENCH_TRACE": "maybe"})


def test_a_bad_dpbench_trace_value_is_the_sessions_usage_error(monkeypatch):
    # The suites' pytest_configure asks _trace_store; pytest prints a UsageError as one line, exit 4.
    from dpbench.measure.plugin.session import _trace_store

    monkeypatch.setenv("DPBENCH_TRACE", "maybe")
    config = SimpleNamespace(getoption=lambda name, default=None: default)
    with pytest.raises(pytest.UsageError) as exc:
        _trace_store(config, run_id="r")
    assert str(exc.value) == "DPBENCH_TRACE must be 1 or 0 (true/false, yes/no), got 'maybe'"


class _Case:
    def __init__(self, key, traceable):
        self.key, self.label, self.seen = key, key, []
        if traceable:
            self.traceable = True

    def measure_trial(self, profile, *, trial, steps_per_round, timeline, first, **kwargs):
        self.seen.append(kwargs)
        return TrialResult(
            trial=trial, order=-1, started_at=0.0, steps_per_round=1, round_times=[1.0], unit_times=[1.0], control_s=1.0
        )


def test_only_traceable_cases_are_asked_to_trace_and_only_when_tracing_is_on():
    def where(name):
        return Path("/staged") / name, f"traces/r/{name}"

    traced, other = _Case("a", True), _Case("b", False)
    session = TrialSession(None, 2, trace=where)
    session.add(traced), session.add(other)
    session.run()
    assert traced.seen == [{"trace": where}] * 2 and other.seen == [{}, {}]
    plain = _Case("c", True)
    untraced = TrialSession(None, 1)
    untraced.add(plain)
    untraced.run()
    assert plain.seen == [{}]


def test_extra_info_holds_the_breakdown_overhead_and_two_pass_or_the_skip(tmp_path):
    files = [write(tmp_path / "rank0.json.gz", cpu_rank(70))]
    traced = {
        "staged": [str(f) for f in files],
        "files": ["traces/r/c/rank0.json.gz"],
        "memory_files": [],
        "traced_step_s": 0.012,
        "untraced_step_s": 0.010,
    }
    info = trace_extra_info(traced, {"exposed_comm_s": 7e-6, "overlap_fraction": 0.5})
    assert info["files"] == ["traces/r/c/rank0.json.gz"] and info["ranks"][0]["exposed_comm_s"] == pytest.approx(7e-6)
    assert info["overhead"] == {"traced_step_s": 0.012, "untraced_step_s": 0.010, "ratio": pytest.approx(1.2)}
    assert info["two_pass"]["difference_of_step"] == pytest.approx(0.0, abs=1e-9) and not info["two_pass"]["disagree"]
    assert trace_extra_info({"skipped": "why"}, {}) == {"skipped": "why"}
    assert trace_extra_info(None, {}) is None


def test_a_trace_that_fails_costs_only_the_trace():
    from dpbench.measure.tracing import trace_trial

    class _Run:
        def trace(self, k, path, *, warmup):
            raise RuntimeError("rank 1 failed:\nTraceback ...\nOSError: disk full")

    traced = trace_trial(_Run(), lambda name: (Path("/staged") / name, f"traces/r/{name}"), "c", untraced_step_s=0.01)
    assert traced == {"skipped": "tracing failed: RuntimeError: OSError: disk full"}
