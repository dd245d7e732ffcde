"""The gate's noise model and its rates against the simulation: the fit recovers the model it was
drawn from, and seeded jobs of the simulation fail and catch what they should.

The simulation here is the one ``python -m validation.simulate_gate`` runs at full size (1,000 jobs of 70
benchmarks; docs/validation/gate.md), kept small and seeded: a rate check that fails when the gate changes.
"""

from __future__ import annotations

import importlib
import math
import random
import re
import statistics

import pytest

from validation.noise import CLEAN, TrialNoiseModel, draw_case_params, draw_side, fit_noise_model

UNIFORM = TrialNoiseModel(**{**CLEAN.to_dict(), "case_run_sd_spread": 0.0})


# ---------------------------------------------------------------- the noise model
@pytest.mark.slow
def test_the_fit_recovers_the_model_it_was_drawn_from():
    """200 cases, 4 runs of 5 trials (what validation.aa_check fits from): the medians and spreads across cases
    of the within-run trial sd and of the per-case-per-run offset, and the controls' sd, are the drawn ones."""
    import pandas as pd

    model = TrialNoiseModel(
        trial_sd=0.05,
        trial_sd_spread=0.5,
        case_run_sd=0.04,
        case_run_sd_spread=0.5,
        run_sd=0.03,
        control_sd=0.01,
        control_run_sd=0.0,
    )
    rng = random.Random(3)
    cases = draw_case_params(model, rng, 200)
    runs = [draw_side(model, cases, rng, runs=1, trials=5) for _ in range(4)]
    frames = [
        pd.DataFrame(
            {
                "run_id": [f"r{r}"] * 200,
                "fullname": [f"b{i}" for i in range(200)],
                "case_key": [f"k{i}" for i in range(200)],
                "trial_times": [p.times for p in side],
                "trial_controls": [p.controls for p in side],
                "incomparable": [None] * 200,
            }
        )
        for r, side in enumerate(runs)
    ]
    fitted = fit_noise_model(frames)
    assert fitted.trial_sd == pytest.approx(0.05, rel=0.1) and fitted.trial_sd_spread == pytest.approx(0.5, abs=0.1)
    assert fitted.case_run_sd == pytest.approx(0.04, rel=0.3)
    assert fitted.case_run_sd_spread == pytest.approx(0.5, abs=0.25)
    assert fitted.control_sd == pytest.approx(0.01, rel=0.2)
    assert fitted.fitted["runs"] == 4 and fitted.fitted["cases"] == 200


def test_lognormal_ml_is_the_log_normal_fit_when_each_estimate_is_exact_and_sees_through_noisy_ones():
    """With near-exact estimates (1,000 df) the fit is the mean and population sd of the logs; with 3 df per
    benchmark (4 runs) it still recovers the spread that the benchmarks' own estimates overstate."""
    import numpy as np

    from validation.noise import lognormal_ml

    sds = [0.02, 0.03, 0.05, 0.08, 0.04, 0.06]
    logs = [math.log(x) for x in sds]
    big = 1000
    median_sd, spread = lognormal_ml([x * x * big for x in sds], [big] * len(sds))
    assert median_sd == pytest.approx(math.exp(statistics.fmean(logs)), rel=2e-3)
    assert spread == pytest.approx(statistics.pstdev(logs), rel=2e-2)
    rng = np.random.default_rng(5)
    true = 0.04 * np.exp(rng.normal(0, 0.5, 400))
    trial_part = np.full(400, 0.03**2)  # each benchmark's run means also scatter by its trials
    squares = (true**2 + trial_part) * rng.chisquare(3, 400)
    median_sd, spread = lognormal_ml(list(squares), [3] * 400, list(trial_part))
    assert median_sd == pytest.approx(0.04, rel=0.2) and spread == pytest.approx(0.5, abs=0.2)
    naive = np.log(np.sqrt(np.maximum(squares / 3 - trial_part, 4e-6)))
    assert float(np.std(naive)) > 2 * spread  # what the old fit took as the spread: mostly the estimator's noise
    with pytest.raises(ValueError, match="expected three or more benchmarks with a sum of squares, found 2"):
        lognormal_ml([1.0, 2.0], [3, 3])


def test_lognormal_ml_of_a_component_that_is_not_there_is_tiny_and_warns_of_nothing():
    """The fresh-helper runs of 2026-12-02: every case's run means scatter by their trials alone. The
    fit walks below its grid; the prior is normalised in logs there (it made 0/0 before: a warning)."""
    import warnings

    import numpy as np

    from validation.noise import lognormal_ml

    rng = np.random.default_rng(7)
    trial_part = np.full(300, 0.05**2)
    squares = trial_part * rng.chisquare(3, 300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning fails the test
        median_sd, spread = lognormal_ml(list(squares), [3] * 300, list(trial_part))
    assert math.isfinite(spread) and median_sd < 0.005  # well under a tenth of the trial part


# ---------------------------------------------------------------- rates, against the simulation
def _jobs(
    model: TrialNoiseModel,
    *,
    jobs: int,
    seed: int,
    benchmarks: int,
    trials: int,
    paired: bool,
    effect: float = 1.0,
    target_sd: float | None = None,
    machine: float = 1.0,
    aa_runs: int = 0,
) -> tuple[int, int]:
    import importlib.util

    sim = importlib.import_module("validation.simulate_gate")
    failed, caught, _ = sim.rate(
        model,
        jobs=jobs,
        seed=seed,
        benchmarks=benchmarks,
        trials=trials,
        paired=paired,
        target_effect=effect,
        target_sd=target_sd,
        machine=machine,
        aa_runs=aa_runs,
    )
    return failed, caught


@pytest.mark.parametrize("paired", [False, True])
def test_simulated_aa_jobs_do_not_fail(paired):
    failed, _ = _jobs(UNIFORM, jobs=20, seed=1, benchmarks=30, trials=5, paired=paired)
    assert failed == 0


@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
@pytest.mark.parametrize("paired", [False, True])
def test_simulated_large_slowdown_of_a_steady_case_is_caught(paired):
    _, caught = _jobs(UNIFORM, jobs=20, seed=2, benchmarks=30, trials=5, paired=paired, effect=2.0, target_sd=0.02)
    assert caught >= 19


@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
def test_simulated_machine_slowdown_alone_fails_no_job_and_a_real_one_beyond_it_is_caught():
    failed, _ = _jobs(UNIFORM, jobs=15, seed=3, benchmarks=30, trials=5, paired=False, machine=1.12)
    assert failed == 0
    _, caught = _jobs(
        UNIFORM, jobs=15, seed=4, benchmarks=30, trials=5, paired=False, effect=2.0, target_sd=0.02, machine=1.12
    )
    # 13 of 15: the job's two broad tests join the Holm family (31 hypotheses), which puts one job's
    # p = 0.00033 at 0.0103; the other miss is the heavy-tailed between-run allowance (p = 0.00079).
    assert caught >= 13


@pytest.mark.slow
def test_with_aa_runs_a_25pc_slowdown_of_a_steady_case_is_caught_far_more_often_and_aa_jobs_still_pass():
    """Without --aa one comparison fits the between-run offset's median but must allow for cases that a
    session moves unequally (spread ≥ 0.7); 3 --aa runs measure each case's. On the uniform model (3%
    for every case), 20 seeded jobs of 30 cases, a +25% slowdown at CV 2%: caught in 9 with them, 2
    without (seed 6); A/A with them fails none of 20."""
    without = _jobs(UNIFORM, jobs=20, seed=6, benchmarks=30, trials=5, paired=False, effect=1.25, target_sd=0.02)[1]
    with_aa = _jobs(
        UNIFORM, jobs=20, seed=6, benchmarks=30, trials=5, paired=False, effect=1.25, target_sd=0.02, aa_runs=3
    )[1]
    assert with_aa >= 7 and with_aa >= without + 5
    failed, _ = _jobs(UNIFORM, jobs=20, seed=5, benchmarks=30, trials=5, paired=False, aa_runs=3)
    assert failed <= 1  # the full simulation's A/A rate with --aa is ~0.3-1.3%: 2 of 20 would be p < 0.03


@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
def test_the_program_prints_every_target_line_of_compare(capsys):
    """``python -m validation.simulate_gate`` itself, at 20 jobs of 5 cases, compare only."""
    argv = ["--jobs", "20", "--benchmarks", "5", "--compare-only"]
    assert importlib.import_module("validation.simulate_gate").main(argv) == 0
    out = capsys.readouterr().out
    assert "5 benchmarks, 5 trials a side for compare" in out
    targets = [line for line in out.splitlines() if re.fullmatch(r"  compare    .*:\s+\d+/20 = .*", line)]
    assert len(targets) == 6 and "\n  paired ab " not in out
