#!/usr/bin/env python
"""Simulate questions measured beside a busy neighbour: false claims per job, with the decision's
contention guard (a busy or too-spread configuration claims nothing) and without it. Seeded: the
same arguments print the same numbers.

    python -m validation.simulate_contention [--model quick-runs] [--jobs 1000] [--rates 0,0.2,0.5,1]
                                             [--unsampled 0,1] [--configs 2,4,8] [--gaps 0,0.2]

One job is one question: C configurations (the first is ``single``) whose trials are drawn from the
gate's fitted noise model (validation.noise), one of them ``gap`` faster than the others, which tie
(A/A: all tie). A busy neighbour overlaps each pass of trials with probability ``rate``; each
configuration's trial in such a pass is slowed by a factor drawn from the real contended runs
(``tests/gate/data/aa-contended-*``, over the same cases of the quiet ``quick-throughput`` run),
and the sampler reads the share measured beside it — or, with probability ``unsampled``, nothing
(the sampler missed the neighbour: only the spread guard is left). The decision answers from the
first 5 and 8 trials at the claim level (:func:`dpbench.decision.answer_question`, a configuration's
share the median over its trials, as the session reads it); "unguarded" is the same answer with
the contention limits off (what the decision claimed before it had them).

A false claim: ``faster``/``slower`` against the leader or against single where the true ratio is 1
or the other way; ``level`` where the true gap exceeds the margin (±5%). The stated level is per
comparison (each interval covers 90%): a comparison's false-claim rate may reach 10%, and so may a
job's with two configurations (one comparison); a job with more compares more, and even a quiet
machine's jobs then claim falsely more often (docs/validation/sequential.md). Beside a neighbour,
the guarded rates are to stay within the quiet machine's (the 0% rows).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import random
import time
from pathlib import Path

from dpbench.decision.claims import CLAIM_LEVEL, LEVEL_MARGIN, Claim
from dpbench.decision.contention import CONTENDED
from dpbench.decision.model import Entry, Question, answer_question
from dpbench.stats import median
from validation.contention import Contention, ContentionModel, measured_contention
from validation.noise import MODELS, draw_case_params, draw_side

ROOT = Path(__file__).resolve().parents[1]
GATE_DATA = ROOT / "tests" / "gate" / "data"
CONTENDED_RUNS = (GATE_DATA / "aa-contended-base.json.gz", GATE_DATA / "aa-contended-same.json.gz")
QUIET_RUN = GATE_DATA / "quick-throughput.json.gz"
QUESTION = Question(workload="sim", optimizer="sgd", precision="fp32", global_batch=1.0)
DESIGNS = (5, 8)
ARMS = ("guarded", "unguarded")


def _load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def measured_neighbour() -> tuple[Contention, ...]:
    """The contended trials of the stored real runs (:data:`CONTENDED_RUNS`, each trial against the
    same case on :data:`QUIET_RUN`): what the simulated neighbour draws from."""
    return tuple(measured_contention([_load(r) for r in CONTENDED_RUNS], _load(QUIET_RUN)))


def draw_job(model, contention: ContentionModel, rng: random.Random, *, configs: int, gap: float, trials: int):
    """The true throughputs (1, or 1 + gap for the second configuration), the drawn step times and
    the shares the sampler read, per configuration and trial."""
    cases = [dataclasses.replace(c, level=0.0) for c in draw_case_params(model, rng, configs)]
    truth = [1.0 + gap if i == 1 else 1.0 for i in range(configs)]
    side = draw_side(model, cases, rng, runs=1, trials=trials, effects=[1 / t for t in truth])
    times = [list(p.runs[0]) for p in side]
    shares = contention.draw(times, rng)
    return truth, times, shares


def answer(names, times, shares, n: int, *, guarded: bool):
    entries = []
    for i, (name, series, read) in enumerate(zip(names, times, shares)):
        seen = [s for s in read[:n] if s == s]
        entries.append(
            Entry(
                name=name,
                strategy="single" if i == 0 else "ddp",
                throughputs=tuple(1 / t for t in series[:n]),
                busy_share=median(seen) if seen else math.nan,
            )
        )
    limits = {} if guarded else {"busy_limit": math.inf, "spread_limit": math.inf}
    return answer_question(QUESTION, entries, **{"busy_limit": CONTENDED, **limits}, level=CLAIM_LEVEL)


def _wrong(claim: Claim, ratio: float) -> bool:
    if claim is Claim.FASTER:
        return ratio <= 1
    if claim is Claim.SLOWER:
        return ratio >= 1
    return claim is Claim.LEVEL and abs(math.log(ratio)) > math.log1p(LEVEL_MARGIN) + 1e-12


def false_claims(ans, truth: dict[str, float]) -> tuple[int, int]:
    """The claims against the leader and against single that the true throughputs contradict, and
    the comparisons made."""
    wrong = made = 0
    for s in ans.standings:
        for c, other in ((s.vs_leader, ans.leader), (s.vs_single, ans.single)):
            if c is not None and other is not None:
                wrong += _wrong(c.claim, truth[s.name] / truth[other])
                made += 1
    return wrong, made


def run_cell(model, contention, *, configs: int, gap: float, jobs: int, seed: int) -> dict[str, int]:
    """Per design and arm, the jobs with a false claim (``{n}-{arm}``), those whose answer claimed
    anything at all (``{n}-{arm}-claimed``), the false claims (``-false``) and the comparisons
    (``-comparisons``)."""
    rng = random.Random(seed)
    names = [f"c{i}" for i in range(configs)]
    kinds = ("", "-claimed", "-false", "-comparisons")
    out = {f"{n}-{arm}{what}": 0 for n in DESIGNS for arm in ARMS for what in kinds}
    for _ in range(jobs):
        truth, times, shares = draw_job(model, contention, rng, configs=configs, gap=gap, trials=max(DESIGNS))
        true = dict(zip(names, truth))
        for n in DESIGNS:
            for arm in ARMS:
                ans = answer(names, times, shares, n, guarded=arm == "guarded")
                wrong, made = false_claims(ans, true)
                out[f"{n}-{arm}"] += wrong > 0
                out[f"{n}-{arm}-false"] += wrong
                out[f"{n}-{arm}-comparisons"] += made
                out[f"{n}-{arm}-claimed"] += any(
                    c is not None and c.claim is not Claim.UNSETTLED
                    for s in ans.standings
                    for c in (s.vs_leader, s.vs_single)
                )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="quick-runs")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--rates", default="0,0.2,0.5,1", help="the share of passes a busy neighbour overlaps")
    p.add_argument("--unsampled", default="0,1", help="the share of contended trials the sampler misses")
    p.add_argument("--configs", default="2,4,8")
    p.add_argument("--gaps", default="0,0.2")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    model = MODELS[args.model]
    found = measured_neighbour()
    steps = sorted(c.step for c in found)
    print(
        f"model {args.model} ({model.source}); {args.jobs} jobs a cell; {len(found)} measured contended trials "
        f"(step factor median {median(steps):.2f}, from {steps[0]:.2f} to {steps[-1]:.2f})"
    )
    print(
        "| busy passes | sampler missed | true gap | configurations | jobs with a false claim, 5 trials: "
        "guarded / unguarded | 8 trials: guarded / unguarded | false claims per comparison, 8 trials: "
        "guarded / unguarded | jobs with any claim, 8 trials: guarded / unguarded |"
    )
    print("|---|---|---|---|---|---|---|---|")
    started = time.monotonic()
    for rate in (float(r) for r in args.rates.split(",")):
        for unsampled in (float(u) for u in args.unsampled.split(",")):
            if rate == 0 and unsampled > 0:
                continue  # nothing to miss
            contention = ContentionModel(found=found, rate=rate, unsampled=unsampled)
            for gap in (float(g) for g in args.gaps.split(",")):
                for configs in (int(c) for c in args.configs.split(",")):
                    seed = args.seed * 100_000 + int(rate * 100) * 1000 + int(unsampled * 10) * 100
                    seed += int(round(gap * 100)) * 10 + configs
                    r = run_cell(model, contention, configs=configs, gap=gap, jobs=args.jobs, seed=seed)
                    j = args.jobs
                    print(
                        f"| {rate:.0%} | {unsampled:.0%} | {'A/A' if gap == 0 else f'{gap:.0%}'} | {configs} | "
                        f"{r['5-guarded'] / j:.1%} / {r['5-unguarded'] / j:.1%} | "
                        f"{r['8-guarded'] / j:.1%} / {r['8-unguarded'] / j:.1%} | "
                        f"{r['8-guarded-false'] / max(r['8-guarded-comparisons'], 1):.1%} / "
                        f"{r['8-unguarded-false'] / max(r['8-unguarded-comparisons'], 1):.1%} | "
                        f"{r['8-guarded-claimed'] / j:.0%} / {r['8-unguarded-claimed'] / j:.0%} |",
                        flush=True,
                    )
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
