"""The decision model on hand-built questions: the leader by the paired estimator, and each claim
exactly where its interval puts it — faster/slower only when the interval at the claim level
excludes 1, level only inside the margin, unsettled otherwise (with the trials that would settle it)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dpbench.decision.claims import Claim, claim_of, trials_to_settle
from dpbench.decision.model import AnswerOutcome, Entry, Question, answer_question
from dpbench.decision.text import headline
from dpbench.stats import paired_ratio

Q = Question(workload="mlp", optimizer="sgd", precision="fp32", global_batch=64)
STEADY = (100.0, 101.0, 99.0, 100.0, 102.0)  # samples/s per trial


def _entry(name: str, strategy: str, factor: float | tuple[float, ...], **kw) -> Entry:
    factors = factor if isinstance(factor, tuple) else (factor,) * len(STEADY)
    return Entry(name=name, strategy=strategy, throughputs=tuple(s * f for s, f in zip(STEADY, factors)), **kw)


def _answer(*entries: Entry):
    return answer_question(Q, entries, run="0001_x", busy_limit=0.2)


def test_the_fastest_is_crowned_when_every_other_is_slower():
    a = _answer(_entry("single w1", "single", 1.0), _entry("ddp w2", "ddp", 2.0), _entry("dp w2", "dp", 1.25))
    assert (a.outcome, a.leader) == (AnswerOutcome.FASTEST, "ddp w2")
    assert [s.name for s in a.standings] == ["ddp w2", "dp w2", "single w1"]
    assert [s.vs_leader.claim for s in a.standings[1:]] == [Claim.SLOWER, Claim.SLOWER]
    assert headline(a) == (
        "mlp (sgd · fp32 · global batch 64): the fastest is ddp w2 at 200 samples/s "
        "[2.00× single: faster]; slower: all 2 others."
    )


def test_a_lone_configuration_has_nothing_to_rank_and_says_so():
    a = _answer(_entry("single w1", "single", 1.0, busy_share=0.9))
    assert (a.outcome, a.leader, a.open_configurations()) == (AnswerOutcome.ALONE, "single w1", ())
    assert (
        headline(a)
        == "mlp (sgd · fp32 · global batch 64): nothing to rank: one configuration: single w1 at 100 samples/s."
    )


def test_an_interval_that_holds_one_but_is_wider_than_the_margin_is_unsettled_never_no_difference():
    swings = (0.5, 2.0, 0.6, 1.8, 1.02)
    a = _answer(_entry("single w1", "single", 1.0), _entry("ddp w1", "ddp", swings))
    ddp = a.standing("ddp w1")
    assert a.outcome is AnswerOutcome.UNSETTLED
    assert (ddp.vs_single or a.standing("single w1").vs_leader).claim is Claim.UNSETTLED
    assert "the fastest" not in headline(a) and "no difference" not in headline(a)
    assert headline(a).startswith("mlp (sgd · fp32 · global batch 64): not settled: ")


def test_level_only_inside_the_margin():
    a = _answer(_entry("single w1", "single", 1.0), _entry("ddp w2", "ddp", (1.01, 0.99, 1.02, 1.0, 0.995)))
    assert a.outcome is AnswerOutcome.LEVEL
    assert a.level_with in (("single w1",), ("ddp w2",))
    assert "level with" in headline(a)


def test_two_pairs_that_agree_are_too_few_to_claim_and_say_how_many_would():
    # three of ddp's five trials were disturbed and left out (NaN): 2 pairs, below MIN_PAIRS (3).
    a = _answer(_entry("single w1", "single", 1.0), _entry("ddp w2", "ddp", (2.0, math.nan, math.nan, 2.1, math.nan)))
    s = next(s for s in a.standings if s.vs_leader is not None)
    assert s.vs_leader.ratio.pairs == 2 and s.vs_leader.claim is Claim.UNSETTLED
    assert s.vs_leader.settle_trials == 3
    assert "it settles at ~3 trials" in headline(a)


def test_a_busy_leader_leaves_the_question_unsettled_at_any_trial_count():
    a = _answer(_entry("single w1", "single", 1.0, busy_share=0.8), _entry("ddp w2", "ddp", 0.5))
    assert a.leader == "single w1" and a.outcome is AnswerOutcome.UNSETTLED
    assert a.reasons == ("other processes used 80% of the CPUs during single w1's trials",)
    assert set(a.open_configurations()) == {"single w1", "ddp w2"}


def test_a_departing_configuration_is_never_ranked_and_says_why():
    a = _answer(_entry("single w1", "single", 1.0), _entry("ddp w2", "ddp", 3.0, departs="loss 2.31 vs 2.30"))
    assert a.leader == "single w1" and a.outcome is AnswerOutcome.ALONE
    assert a.excluded == (("ddp w2", "computes something else than single: loss 2.31 vs 2.30"),)


def test_the_leader_is_never_one_a_claim_beats():
    # b is ahead of single by its median; a beats b in every pair.
    a = _answer(
        _entry("single w1", "single", 1.0),
        _entry("a w2", "a", (1.5, 1.5, 1.5, 1.5, 1.5)),
        _entry("b w2", "b", (1.4, 1.4, 1.4, 1.4, 1.4)),
    )
    assert a.leader == "a w2" and a.standing("b w2").vs_leader.claim is Claim.SLOWER


@pytest.mark.parametrize(
    "ratios, expected",
    [
        ((1.2, 1.3, 1.1, 1.25, 1.22), Claim.FASTER),
        ((0.8, 0.7, 0.9, 0.85, 0.82), Claim.SLOWER),
        ((1.01, 0.99, 1.02, 1.0, 0.98), Claim.LEVEL),
        ((1.01, 0.96, 1.08, 1.0, 0.98), Claim.UNSETTLED),  # the interval reaches past the +5% margin
        ((1.2, 1.3, 1.1, 1.25), Claim.FASTER),  # 4 pairs: enough for the t-interval ([min, max] was not)
        ((1.2, 1.3), Claim.UNSETTLED),  # 2 pairs: no interval
    ],
)
def test_claim_of_reads_the_interval(ratios, expected):
    assert claim_of(paired_ratio(list(ratios), [1.0] * len(ratios))) is expected


def test_trials_to_settle_grows_as_the_gap_nears_the_margin():
    clear = paired_ratio([1.3, 1.32], [1.0] * 2)  # 2 pairs: one more settles it
    near = paired_ratio([1.03, 0.95, 1.08, 1.0, 0.97], [1.0] * 5)  # the spread of the margin itself
    nearer = paired_ratio([1.04, 0.93, 1.1, 1.0, 0.96], [1.0] * 5)
    assert {claim_of(r) for r in (clear, near, nearer)} == {Claim.UNSETTLED}
    assert trials_to_settle(clear) == 3
    assert 5 < trials_to_settle(near) < trials_to_settle(nearer)


def test_a_long_spec_is_never_broken_across_lines():
    from dpbench.decision.model import Decision
    from dpbench.decision.text import summary_lines

    spec = "hf:vit@num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64," + (
        "image_size=16,patch_size=8"
    )
    q = Question(workload=spec, optimizer="sgd", precision="fp32", global_batch=64)
    answer = answer_question(q, [_entry("single w1", "single", 1.0), _entry("ddp w2", "ddp", 0.5)], busy_limit=0.2)
    lines = summary_lines(Decision(answers=(answer,)))
    assert any(spec in line for line in lines)


def test_a_long_configuration_keeps_its_name_and_its_memory_in_the_terminal():
    """``fsdp(reshard_after_forward=False) w2``'s row was too wide for its peak memory, which was
    dropped (the number it was run for), and a name over 36 characters was cut: now every row's
    numbers and memory fit, and a name too long for the column takes a line of its own."""
    from dpbench.decision.model import Decision
    from dpbench.decision.text import WIDTH, summary_lines

    mib = 2**20
    answer = _answer(
        _entry("single w1", "single", 1.0, memory_bytes=348 * mib),
        _entry("fsdp(reshard_after_forward=False) w2", "fsdp", (0.6, 0.9, math.nan, 0.5, 0.7), memory_bytes=395 * mib),
        _entry("fsdp(reshard_after_forward=False, checkpoint=True) w2", "fsdp", 0.5, memory_bytes=300 * mib),
    )
    lines = summary_lines(Decision(answers=(answer,)))
    assert lines[4:] == [  # the level line and the headline take two lines each
        "  configuration                 × the leader (CI, pairs)  claim",
        "  single w1                     leads  peak 348 MiB/rank",
        "  fsdp(reshard_after_forward=False) w2",
        "                                0.65× (0.41–1.05, 4 pairs)  unsettled (~5 trials)  peak 395 MiB/rank",
        "  fsdp(reshard_after_forward=False, checkpoint=True) w2",
        "                                0.50× (0.50–0.50, 5 pairs)  slower  peak 300 MiB/rank",
    ]
    assert max(map(len, lines)) <= WIDTH


def test_a_question_is_built_one_way_for_a_saved_row_and_a_measured_case():
    from dpbench.decision.questions import question_of
    from dpbench.schema import DEFAULT_OPTIMIZER, DEFAULT_PRECISION

    # A case that names no optimizer or precision trains with the strategies' defaults.
    assert Question.of(workload="mlp", global_batch=64, options={}) == Question(
        workload="mlp", optimizer=DEFAULT_OPTIMIZER, precision=DEFAULT_PRECISION, global_batch=64.0
    )
    row = pd.Series({"workload": "mlp", "batch": 64.0, "optimizer": "adamw", "precision": "bf16"})
    case = Question.of(workload="mlp", global_batch=64, options={"optimizer": "adamw", "precision": "bf16"})
    assert question_of(row) == case
    # A saved row that recorded no recipe says nothing about it.
    assert question_of(pd.Series({"workload": "mlp", "batch": float("nan")})).title == "mlp"


def test_a_busy_case_is_judged_and_said_one_way():
    from dpbench.decision.contention import CONTENDED, contention_text, is_busy

    assert is_busy(CONTENDED + 0.01) and not is_busy(CONTENDED) and not is_busy(math.nan)
    assert contention_text(0.78, "ddp w2's") == "other processes used 78% of the CPUs during ddp w2's trials"


def test_every_claim_says_it_holds_for_this_session():
    from dpbench.decision.model import Decision
    from dpbench.decision.text import level_line

    decision = Decision(answers=(_answer(_entry("single w1", "single", 1.0), _entry("ddp w2", "ddp", 2.0)),))
    assert decision.to_dict()["scope"] == "session"
    assert level_line(decision) == (
        "claims at 90% per question (a 10% chance of any false claim, split over its comparisons), in this session; "
        "level = within ±5%; unsettled = more trials needed"
    )
