"""python -m validation.simulate_sequential, small and seeded: the full 1,000-job cells are on
docs/validation/sequential.md."""

from __future__ import annotations

import importlib.util
import math
import random
import re
from pathlib import Path

import pytest

from dpbench.decision.claims import Claim
from dpbench.decision.sequential import plan_looks
from validation.noise import CLEAN, QUICK_RUNS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim():
    module = importlib.import_module("validation.simulate_sequential")
    return module


def test_a_clear_gap_stops_at_the_minimum(sim):
    plan = plan_looks(12)
    r = sim.run_cell(CLEAN, [], configs=2, gap=0.5, jobs=40, seed=1, plan=plan, rate=0.0)
    assert r["trials"] / (40 * 2) < 5.5  # the first look is at 5; a fixed 8-trial design would use 8
    assert r["settled"] >= 36 and r["seq"] == 0


def test_a_tie_wider_than_the_margin_runs_to_the_maximum_and_claims_nothing(sim):
    # Two configurations, no difference, pairs 10% apart either way: no look's interval excludes 1
    # or fits inside ±5%, so both run to the last look (12) and the question stays open.
    plan = plan_looks(12)
    times = [[1.0] * 12, [0.9, 1.1] * 6]
    answer, used, settled = sim.sequential(["c0", "c1"], times, sim.Settling(plan=plan, cpu_count=1))
    assert used == 24 and not settled
    assert all(s.vs_leader is None or s.vs_leader.claim is Claim.UNSETTLED for s in answer.standings)


@pytest.mark.slow  # 4-5 s idle: past the fast tier's limit on a busy machine
def test_the_per_question_level_holds_in_a_seeded_monte_carlo_through_the_session(sim):
    # Three tied configurations (three comparisons, three looks): the share of jobs with a false
    # claim stays within the stated 10%, within the Monte Carlo's spread.
    plan = plan_looks(12)
    jobs = 300
    r = sim.run_cell(QUICK_RUNS, [], configs=3, gap=0.0, jobs=jobs, seed=7, plan=plan, rate=0.0)
    error = 1 - plan.level
    assert r["jobs_seq"] / jobs <= error + 3 * math.sqrt(error * (1 - error) / jobs)


def test_the_cells_are_seeded(sim):
    plan = plan_looks(8)
    one = sim.run_cell(CLEAN, [], configs=3, gap=0.1, jobs=10, seed=3, plan=plan, rate=0.0)
    random.seed(0)  # the cells draw from their own generator, not the module's
    assert one == sim.run_cell(CLEAN, [], configs=3, gap=0.1, jobs=10, seed=3, plan=plan, rate=0.0)


def test_main_prints_one_row_per_gap_and_configuration_count(capsys):
    argv = ["--jobs", "20", "--gaps", "0,0.5", "--configs", "2"]
    assert importlib.import_module("validation.simulate_sequential").main(argv) == 0
    out = capsys.readouterr().out
    assert "| true gap | configurations | false claims per job: sequential | fixed 5 | fixed 8 " in out
    rows = [line for line in out.splitlines() if re.fullmatch(r"\| (A/A|50%) \| 2 \|( [^|]+ \|){7}", line)]
    assert [row.split(" | ")[0] for row in rows] == ["| A/A", "| 50%"]
    assert "20 jobs a cell; disturbed: 2% of trials, 16 measured disturbances" in out  # the default run's 16
