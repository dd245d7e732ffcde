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
from dpbench.decision.sequential import miss_probability, plan_looks
from validation.noise import CLEAN, QUICK_RUNS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim():
    module = importlib.import_module("validation.simulate_sequential")
    return module


def test_a_clear_gap_stops_at_the_minimum(sim):
    plan = plan_looks(12)
    r = sim.run_cell(CLEAN, [], configs=2, gap=0.5, jobs=40, seed=1, plan=plan, rate=0.0)
    assert r["trials"] / (40 * 2) < 6.5  # the minimum is 6; a fixed 8-trial design would use 8
    assert r["settled"] >= 36 and r["seq"] == 0


def test_the_null_never_claims_at_the_minimum_unless_every_pair_agrees(sim):
    # Two configurations, no difference: at the minimum a claim needs all six pairs on one side
    # (1/32 of null jobs); with one pair on the other side the question stays open.
    plan = plan_looks(12)
    times = [[1.0] * 12, [0.9, 0.9, 0.9, 0.9, 0.9, 1.1] + [1.1, 0.9] * 3]
    answer, used, settled = sim.sequential(["c0", "c1"], times, sim.Settling(plan=plan, cpu_count=1))
    assert used > 10 and not settled
    assert all(s.vs_leader is None or s.vs_leader.claim is Claim.UNSETTLED for s in answer.standings)


@pytest.mark.slow  # 4-5 s idle: past the fast tier's limit on a busy machine
def test_the_exact_bound_holds_in_a_seeded_monte_carlo_through_the_session(sim):
    # Two tied configurations: the share of jobs with a false claim is the design's exact error
    # (per comparison, one comparison per job), within the Monte Carlo's spread.
    plan = plan_looks(12)
    jobs = 300
    r = sim.run_cell(QUICK_RUNS, [], configs=2, gap=0.0, jobs=jobs, seed=7, plan=plan, rate=0.0)
    sd = math.sqrt(plan.error * (1 - plan.error) / jobs)
    assert r["jobs_seq"] / jobs <= plan.error + 3 * sd
    assert plan.error == pytest.approx(miss_probability(plan.cuts))


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
