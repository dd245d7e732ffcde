"""The most frugal configuration (least GPU energy per sample) beside the fastest: named by the decision
model only where the two differ, its energy against the leader's as a claim on their paired ratio, and
said in one line generated from those values — in the terminal's lines and the JSON."""

from __future__ import annotations

import json
import math

import pytest

from dpbench.decision.claims import Claim
from dpbench.decision.model import Decision, Entry, Question, answer_question
from dpbench.decision.text import energy_gap_text, frugal_text, summary_lines

Q = Question(workload="mlp", optimizer="sgd", precision="fp32", global_batch=64)
STEADY = (100.0, 101.0, 99.0, 100.0, 102.0)  # samples/s per trial
JOULES = (0.0100, 0.0101, 0.0099, 0.0100, 0.0102)  # J/sample per trial


def _entry(name: str, strategy: str, speed: float, energy: float | tuple[float, ...] | None) -> Entry:
    factors = energy if isinstance(energy, tuple) else (energy,) * len(JOULES)
    joules = () if energy is None else tuple(j * f for j, f in zip(JOULES, factors))
    return Entry(name=name, strategy=strategy, throughputs=tuple(s * speed for s in STEADY), joules_per_sample=joules)


def _answer(*entries: Entry):
    return answer_question(Q, entries, run="0001_x", busy_limit=0.2)


def test_the_most_frugal_is_named_when_it_is_not_the_fastest():
    # ddp w2 is twice single's speed on two ranks but spends 1.6× its energy per sample.
    a = _answer(
        _entry("single w1", "single", 1.0, 1.0), _entry("ddp w2", "ddp", 2.0, 1.6), _entry("dp w2", "dp", 1.25, 1.3)
    )
    assert a.leader == "ddp w2" and a.frugal is not None
    f = a.frugal
    assert (f.name, f.joules_per_sample, f.leader_joules_per_sample) == ("single w1", 0.0100, 0.0100 * 1.6)
    assert f.vs_leader.claim is Claim.FASTER and f.vs_leader.ratio.pairs == 5
    assert math.isclose(f.vs_leader.ratio.ratio, 1.6)
    line = (
        "The most frugal is single w1 at 0.01 J/sample, not the fastest, ddp w2, at 0.016 J/sample: "
        "1.60× the energy per sample (CI 1.60–1.60, 5 pairs): the fastest uses more."
    )
    assert frugal_text(a) == line
    # The terminal: under the question's headline, wrapped at its width.
    assert summary_lines(Decision(answers=(a,)))[4:6] == [
        "  The most frugal is single w1 at 0.01 J/sample, not the fastest, ddp w2, at 0.016 J/sample: 1.60×",
        "    the energy per sample (CI 1.60–1.60, 5 pairs): the fastest uses more.",
    ]
    # --json: the same values.
    saved = json.loads(json.dumps(Decision(answers=(a,)).to_dict()))["questions"][0]
    assert (
        saved["frugal"]["configuration"] == "single w1" and saved["frugal"]["leader_over_frugal"]["claim"] == "faster"
    )
    assert [c["joules_per_sample"] for c in saved["configurations"]] == pytest.approx([0.016, 0.013, 0.01])


def test_no_line_when_the_fastest_is_the_most_frugal_or_no_energy_was_read():
    fastest_frugal = _answer(_entry("single w1", "single", 1.0, 1.0), _entry("ddp w2", "ddp", 2.0, 0.8))
    assert fastest_frugal.frugal is None and frugal_text(fastest_frugal) is None
    unread = _answer(_entry("single w1", "single", 1.0, None), _entry("ddp w2", "ddp", 2.0, None))
    assert unread.frugal is None and unread.to_dict()["frugal"] is None
    assert unread.to_dict()["configurations"][0]["joules_per_sample"] is None  # absent, never 0
    # Only one configuration read its counter: nothing to compare it with.
    one = _answer(_entry("single w1", "single", 1.0, 1.0), _entry("ddp w2", "ddp", 2.0, None))
    assert one.frugal is None


def test_energy_whose_paired_interval_holds_one_inside_the_margin_is_said_level():
    a = _answer(_entry("single w1", "single", 1.0, 1.0), _entry("ddp w2", "ddp", 2.0, (1.02, 0.99, 1.01, 1.01, 1.03)))
    assert a.frugal is not None and a.frugal.vs_leader.claim is Claim.LEVEL
    assert frugal_text(a).endswith("1.01× the energy per sample (CI 0.99–1.03, 5 pairs): level.")


def test_why_an_energy_reading_is_absent_is_said_from_its_kind_and_numbers():
    assert energy_gap_text({"absent": "no_counter"}) == (
        "no readable energy counter (a CPU run, or NVML reads none on this GPU)"
    )
    short = {"absent": "short_window", "window_s": 0.8, "needed_s": 2.0, "absent_device": "cuda:1"}
    assert energy_gap_text(short) == "cuda:1: a 0.80 s window, shorter than the 2.0 s the energy counter needs"
    assert energy_gap_text({"absent": "stalled", "held_s": 3.0}) == (
        "the energy counter stood still for 3.0 s (stalled, not 0 W)"
    )
    assert energy_gap_text({"absent": "reset"}) == "the energy counter went back or jumped (a reset, not a wrap)"
