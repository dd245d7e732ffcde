"""The one "did you mean" of every message that refuses a name (dpbench.errors.did_you_mean)."""

from __future__ import annotations

from dpbench.errors import did_you_mean


def test_the_closest_name_is_offered_quoted_in_one_wording():
    assert did_you_mean("lst", ["list", "report", "compare"]) == " (did you mean 'list'?)"


def test_several_close_names_are_offered_closest_first_up_to_most():
    known = ["gpt2", "gptj", "bert", "t5"]
    assert did_you_mean("gpt3", known, most=3) == " (did you mean 'gptj' or 'gpt2'?)"
    assert did_you_mean("gpt3", [*known, "gpt-sw3"], most=3) == " (did you mean 'gptj', 'gpt2' or 'gpt-sw3'?)"


def test_nothing_close_says_nothing():
    assert did_you_mean("zzzz", ["list", "report"]) == ""
    assert did_you_mean("list", []) == ""
