#!/usr/bin/env python
"""Simulate questions measured until settled against the fixed 5- and 8-trial designs: false claims
per job and trials used, drawn from the gate's noise models (validation.noise) with disturbed
trials from a real run. Seeded: the same arguments print the same numbers.

    python -m validation.simulate_sequential [--model quick-runs|history-runs|clean] [--jobs 1000] [--max-trials 12]

One job is one question: C configurations (2, 4, 8) whose trials are drawn from the model (each its
own trial spread, the run's offset shared), one of them ``gap`` faster than the others, which tie
(A/A: all tie); 1 trial in 50 is disturbed by a factor drawn from a real run's disturbed trials and
stays in (the spread guard and the t-interval's width, which one wild pair inflates, keep it from
moving a claim). The sequential
design runs through the real session (dpbench.measure.trials.TrialSession with
dpbench.measure.settle.Settling, fake cases returning the drawn trials); the fixed designs answer
the same question from the first 5 or 8 trials at the claim level (dpbench.decision.answer_question).

A false claim: ``faster``/``slower`` where the true ratio is 1 or the other way; ``level`` where the
true gap exceeds the margin (±5%).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import math
import random
import tempfile
import time
from pathlib import Path

from dpbench.decision.claims import CLAIM_LEVEL, LEVEL_MARGIN, Claim
from dpbench.decision.contention import CONTENDED
from dpbench.decision.model import AnswerOutcome, Entry, Question, answer_question
from dpbench.decision.sequential import plan_looks
from dpbench.decision.text import looks_text
from dpbench.measure.settle import Settling
from dpbench.measure.trials import TrialResult, TrialSession
from validation.noise import (
    MODELS,
    Disturbance,
    draw_case_params,
    draw_side,
    measured_disturbances,
)

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_RUN = ROOT / "tests" / "data" / "quick-run-disturbed-trial.json.gz"
SEQUENTIAL_MODELS = ("quick-runs", "history-runs", "clean")  # the fitted models and the provisional one
GAPS = (0.0, 0.05, 0.10, 0.20, 0.50)
CONFIGS = (2, 4, 8)
QUESTION = Question(workload="sim", optimizer="sgd", precision="fp32", global_batch=1.0)


@dataclasses.dataclass
class DrawnCase:
    """A fake training case whose trial t returns the drawn step time ``times[t]``."""

    name: str
    times: list[float]
    strategy: str = "ddp"
    world_size: int = 2
    workload: str = "sim"
    global_batch: int = 1
    options: dict = dataclasses.field(default_factory=dict)
    reference: None = None

    @property
    def key(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        return self.name

    def measure_trial(self, profile, *, trial, steps_per_round, timeline, first):
        value = self.times[trial]
        return TrialResult(
            trial=trial,
            order=-1,
            started_at=math.nan,
            steps_per_round=1,
            round_times=[value],
            unit_times=[value],
            control_s=0.001,
        )


def _frame(path: Path):
    from dpbench.results.frame import runs_frame
    from dpbench.results.load import read_run

    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "m" / "0001_run.json"
        plain.parent.mkdir()
        plain.write_bytes(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
        return runs_frame([read_run(plain)])


def draw_job(model, found, rng: random.Random, *, configs: int, gap: float, trials: int, rate: float):
    """Per configuration: its true throughput (1, or 1 + gap for the first) and ``trials`` drawn step times."""
    # Each configuration its own trial spread (on the model's trend); one workload, so one level.
    cases = [dataclasses.replace(c, level=0.0) for c in draw_case_params(model, rng, configs)]
    truth = [1.0 + gap if i == 0 else 1.0 for i in range(configs)]
    side = draw_side(model, cases, rng, runs=1, trials=trials, effects=[1 / t for t in truth])
    times = [list(p.runs[0]) for p in side]
    for series in times:
        for i in range(trials):
            if found and rng.random() < rate:
                series[i] *= rng.choice(found).step
    return truth, times


def false_claims(answer, truth: dict[str, float]) -> int:
    """The claims against the leader that the true throughputs contradict."""
    wrong = 0
    lead = truth[answer.leader]
    for s in answer.standings:
        if s.vs_leader is None:
            continue
        ratio = truth[s.name] / lead
        claim = s.vs_leader.claim
        if claim is Claim.FASTER and ratio <= 1 or claim is Claim.SLOWER and ratio >= 1:
            wrong += 1
        elif claim is Claim.LEVEL and abs(math.log(ratio)) > math.log1p(LEVEL_MARGIN) + 1e-12:
            wrong += 1
    return wrong


def fixed(names, times, n: int):
    entries = [
        Entry(name=name, strategy="ddp", throughputs=tuple(1 / t for t in series[:n]))
        for name, series in zip(names, times)
    ]
    return answer_question(QUESTION, entries, busy_limit=CONTENDED, level=CLAIM_LEVEL)


def sequential(names, times, settling: Settling):
    session = TrialSession(profile=None, trials=settling.plan.max_trials, until_settled=settling)
    for name, series in zip(names, times):
        session.add(DrawnCase(name=name, times=series))
    session.run()
    (answer,) = session.last_look.answers
    used = sum(len(r.trials) for r in session.results.values())
    return answer, used, session.stopped == "settled"


def run_cell(model, found, *, configs: int, gap: float, jobs: int, seed: int, plan, rate: float) -> dict:
    rng = random.Random(seed)
    settling = Settling(plan=plan, cpu_count=1)
    out = {"seq": 0, "fixed5": 0, "fixed8": 0, "trials": 0, "settled": 0, "jobs_seq": 0, "jobs5": 0, "jobs8": 0}
    out.update(settled5=0, settled8=0)
    names = [f"c{i}" for i in range(configs)]
    for _ in range(jobs):
        truth, times = draw_job(model, found, rng, configs=configs, gap=gap, trials=plan.max_trials, rate=rate)
        true = dict(zip(names, truth))
        answer, used, settled = sequential(names, times, settling)
        wrong = false_claims(answer, true)
        out["seq"] += wrong
        out["jobs_seq"] += wrong > 0
        out["trials"] += used
        out["settled"] += settled
        for n in (5, 8):
            answer = fixed(names, times, n)
            wrong = false_claims(answer, true)
            out[f"fixed{n}"] += wrong
            out[f"jobs{n}"] += wrong > 0
            out[f"settled{n}"] += answer.outcome is not AnswerOutcome.UNSETTLED
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=SEQUENTIAL_MODELS, default="quick-runs")
    p.add_argument("--run", type=Path, default=DEFAULT_RUN, help="a saved run whose disturbed trials are drawn from")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--max-trials", type=int, default=12)
    p.add_argument("--rate", type=float, default=0.02, help="the share of trials disturbed")
    p.add_argument("--gaps", default=",".join(f"{g:g}" for g in GAPS))
    p.add_argument("--configs", default=",".join(map(str, CONFIGS)))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    model = MODELS[args.model]
    found: list[Disturbance] = measured_disturbances(_frame(args.run)) if args.rate > 0 else []
    plan = plan_looks(args.max_trials)
    print(
        f"model {args.model} ({model.source}); {args.jobs} jobs a cell; disturbed: {args.rate:.0%} of trials, "
        f"{len(found)} measured disturbances; design: {looks_text(plan.looks)}, {plan.level:.0%} per question "
        f"split over its comparisons and {len(plan.looks)} looks"
    )
    print(
        "| true gap | configurations | false claims per job: sequential | fixed 5 | fixed 8 "
        "| jobs with a false claim: seq / 5 / 8 | mean trials: sequential | ÷ fixed 8 | settled: seq / 5 / 8 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    started = time.monotonic()
    for gap in (float(g) for g in args.gaps.split(",")):
        for configs in (int(c) for c in args.configs.split(",")):
            seed = args.seed * 1000 + int(round(gap * 100)) * 10 + configs
            r = run_cell(model, found, configs=configs, gap=gap, jobs=args.jobs, seed=seed, plan=plan, rate=args.rate)
            jobs = args.jobs
            mean = r["trials"] / (jobs * configs)
            print(
                f"| {'A/A' if gap == 0 else f'{gap:.0%}'} | {configs} | {r['seq'] / jobs:.3f} | "
                f"{r['fixed5'] / jobs:.3f} | {r['fixed8'] / jobs:.3f} | "
                f"{r['jobs_seq'] / jobs:.1%} / {r['jobs5'] / jobs:.1%} / {r['jobs8'] / jobs:.1%} | "
                f"{mean:.2f} | {mean / 8:.0%} | "
                f"{r['settled'] / jobs:.0%} / {r['settled5'] / jobs:.0%} / {r['settled8'] / jobs:.0%} |",
                flush=True,
            )
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
