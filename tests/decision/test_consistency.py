"""No view contradicts the decision model: over many seeded synthetic runs shaped like real ones
(5–8 configurations a question, 2–12 trials, a 10–15% spread between fresh processes, disturbed
trials left out as NaN, some cases on a busy machine), every claim the JSON holds is the one its
interval supports, the terminal and the HTML view name the JSON's leader, every ratio they quote
is in the JSON, and nothing is crowned from an unsettled comparison."""

from __future__ import annotations

import math
import random
import re

import pandas as pd
import pytest

from dpbench.decision.claims import LEVEL_MARGIN
from dpbench.decision.questions import decide
from dpbench.decision.text import headline, summary_lines
from dpbench.report.decision import decisions

STRATEGIES = ["ddp", "dp", "fsdp", "zero", "allreduce", "manual", "ddp(bucket_cap_mb=1.0)"]


def _run(seed: int) -> pd.DataFrame:
    rng = random.Random(seed)
    trials = rng.randint(2, 12)
    rows = []
    for workload, optimizer in (("mlp", "sgd"), ("mlp", "adamw"), ("tiny", "sgd")):
        names = ["single"] + rng.sample(STRATEGIES, rng.randint(1, 6))
        if optimizer == "adamw" and rng.random() < 0.5:
            names.remove("single")  # a recipe without single: ranked among themselves
        slot = [math.exp(rng.gauss(0, 0.1)) for _ in range(trials)]  # what the machine did in each pass
        for name in names:
            speed = 1.0 if name == "single" else rng.choice([0.5, 0.8, 0.97, 1.0, 1.02, 1.2, 2.0])
            times = [0.01 / speed * s * math.exp(rng.gauss(0, 0.03)) for s in slot]
            if trials >= 3 and rng.random() < 0.3:
                times[rng.randrange(trials)] = math.nan  # a disturbed trial, left out
            kept = sorted(t for t in times if t == t)
            ws = 1 if name == "single" else 2
            rows.append(
                {
                    "run": "0001_x",
                    "workload": workload,
                    "kind": "training",
                    "strategy": name.split("(")[0],
                    "case": f"{name} w{ws}",
                    "batch": 64.0,
                    "world_size": ws,
                    "trial_times": times,
                    "samples_per_s": 64.0 / kept[len(kept) // 2],
                    "optimizer": optimizer,
                    "precision": "fp32",
                    "foreign_cpu": rng.choice([0.0, 0.01, 0.05, 0.6]),
                    "fullnames": (f"test[{name}-{workload}-{optimizer}]",),
                }
            )
    return pd.DataFrame(rows)


def test_the_decision_cannot_be_asked_for_without_the_fingerprint_departures():
    # A configuration whose fingerprint departs from single's computes something else: a decision
    # that forgot the departures would rank it. Neither the model nor the report's view has a default.
    frame = _run(0)
    with pytest.raises(TypeError, match="departures"):
        decide(frame, ["0001_x"])
    with pytest.raises(TypeError, match="decision"):
        decisions(frame, ["0001_x"])


RATIO = re.compile(r"(\d+\.\d\d)×")


@pytest.mark.parametrize("seed", range(150))
def test_no_view_contradicts_the_model(seed):
    frame = _run(seed)
    decision = decide(frame, ["0001_x"], departures={})  # no fingerprints: nothing departs
    doc = decision.to_dict()
    level = doc["level"]
    terminal = summary_lines(decision)
    views = decisions(frame, ["0001_x"], decision=decision)
    assert len(views) == len(decision.answers) == len(doc["questions"])
    for answer, q, view in zip(decision.answers, doc["questions"], views):
        quoted = set()
        contended = {c["configuration"]: c["contended"] for c in q["configurations"]}
        # the question's level split over every pair of its ranked configurations (and the energy claim)
        k = len(q["configurations"])
        energy = sum(c["joules_per_sample"] is not None for c in q["configurations"]) >= 2
        assert q["level"] == level and q["comparisons"] == max(k * (k - 1) // 2, 1) + energy and q["looks"] == 1
        each = 1 - (1 - level) / q["comparisons"]
        for c in q["configurations"]:
            for side, other in (("vs_leader", q["leader"]), ("vs_single", q["single"])):
                claim = c[side]
                if claim is None:
                    continue
                quoted.add(f"{claim['ratio']:.2f}")
                # a contended side (busy, or spread past the noise model) is never claimed on, and says so
                assert bool(claim["why"]) == bool(contended[c["configuration"]] or contended[other])
                lo, hi = claim["lo"], claim["hi"]
                assert claim["coverage"] == pytest.approx(each, abs=1e-15)
                claimed = lo is not None and claim["pairs"] >= 3 and not claim["why"]
                expected = (
                    "faster"
                    if claimed and lo > 1
                    else "slower"
                    if claimed and hi < 1
                    else "level"
                    if claimed and lo >= 1 / (1 + LEVEL_MARGIN) and hi <= 1 + LEVEL_MARGIN
                    else "unsettled"
                )
                assert claim["claim"] == expected, (c["configuration"], side, claim)
            # the leader is never one that a claim beats
            assert c["vs_leader"] is None or c["vs_leader"]["claim"] != "faster"
        said = headline(answer)
        # the HTML view prints the model's own sentence, under the heading that names the question
        assert view.sentences == [headline(answer, named=False)]
        assert said in " ".join(terminal).replace("\n    ", " ") or any(line.startswith(said[:60]) for line in terminal)
        if q["leader"] is not None:
            assert f" {q['leader']} " in f" {said} "
        if q["outcome"] == "unsettled":
            assert "the fastest" not in said
        for why in filter(None, contended.values() if len(contended) > 1 else ()):  # alone: nothing claimed
            assert why in said  # every view states what contended the trials
        assert "no difference" not in said and "no significant difference" not in said
        if q["outcome"] == "fastest":
            assert all(c["vs_leader"]["claim"] == "slower" for c in q["configurations"][1:])
        # every ratio the words quote is one the JSON holds
        assert set(RATIO.findall(said)) <= quoted, (said, quoted)
        for claim_line in view.claims:
            assert set(RATIO.findall(claim_line)) <= quoted
    block = "\n".join(terminal)
    every = {
        f"{c[s]['ratio']:.2f}"
        for q in doc["questions"]
        for c in q["configurations"]
        for s in ("vs_leader", "vs_single")
        if c[s]
    }
    assert set(RATIO.findall(block)) <= every
    assert all(len(line) <= 100 for line in terminal), [line for line in terminal if len(line) > 100]


def test_the_decision_and_the_tables_show_one_throughput_per_configuration(tmp_path):
    """The real quick run: a configuration with 4 kept trials (mlp's manual w2, lenet's manual w2) has
    its throughput in the decision equal to the tables' (global batch / the median step time), not
    the median of its trials' rates (which averages the two middle rates: 2,542 against 2,536)."""
    import gzip
    from pathlib import Path

    from dpbench.report.data import report_data
    from dpbench.results.frame import runs_frame
    from dpbench.results.load import read_run

    path = tmp_path / "0001_quick.json"
    path.write_bytes(gzip.decompress((Path(__file__).parents[1] / "gate/data/quick-throughput.json.gz").read_bytes()))
    frame = runs_frame([read_run(path)])
    table = {(r.workload, r.strategy, r.world_size): r.samples_per_s for r in frame.itertuples()}
    decision = report_data(frame).decided()
    shown = {
        (a.question.workload, s.entry.strategy, s.entry.world_size): s.samples_per_s
        for a in decision.answers
        for s in a.standings
    }
    assert len(shown) == len(table) == 21
    assert [k for k in table if shown[k] != pytest.approx(table[k], rel=1e-12)] == []
    assert sum(1 for a in decision.answers for s in a.standings if s.trials == 4) == 7  # even counts checked
    lenet = next(a for a in decision.answers if a.question.workload == "lenet")
    assert headline(lenet).startswith("lenet (sgd · fp32 · global batch 64): not settled: manual w2 leads at 2,536 ")
