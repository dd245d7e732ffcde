"""The decision's headline: the fastest is crowned only when its trials beat every other one's;
a ratio to single whose interval holds 1 is no speed-up; one headline per workload."""

from __future__ import annotations

import pandas as pd

from dpbench.decision.configs import vs_single
from dpbench.report.decision_text import headline, summary_lines


def _row(case: str, strategy: str, times: list[float], batch: float = 64.0, **extra) -> dict:
    return {
        "case": case,
        "strategy": strategy,
        "batch": batch,
        "trial_times": times,
        "samples_per_s": batch / sorted(times)[len(times) // 2],
        "run": "0001_x",
        "workload": "mlp",
        "kind": "training",
        **extra,
    }


STEADY = [0.010, 0.0101, 0.0099, 0.0100, 0.0102]


def _frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def test_the_fastest_is_crowned_when_it_beats_every_other():
    group = _frame(
        _row("ddp w2", "ddp", [t * 0.5 for t in STEADY]),
        _row("dp w2", "dp", [t * 0.8 for t in STEADY]),
        _row("single w1", "single", STEADY),
    )
    single = group.iloc[2]
    r = vs_single(group.iloc[0], single)
    assert headline("mlp", group, single) == (
        f"mlp: the fastest is ddp w2 at 12,800 samples/s ({r.ratio:.2f}× single, CI {r.lo:.2f}–{r.hi:.2f}); "
        "it is significantly faster than all 2 others."
    )


def test_no_crown_and_no_speed_up_from_an_interval_that_holds_one():
    # ddp's trials swing both ways against single's: its median is higher, its interval holds 1.
    noisy = [0.004, 0.02, 0.005, 0.018, 0.006]
    group = _frame(_row("ddp w1", "ddp", noisy), _row("single w1", "single", STEADY))
    text = headline("mlp", group, group.iloc[1], batch="32")
    assert text.startswith("mlp at global batch 32: no single fastest: ddp w1 has the highest median at ")
    assert text.endswith("but with these trials it is level with single w1.")
    assert "× single" not in text


def test_one_headline_per_workload_at_the_batch_with_most_configurations():
    rows = _frame(
        _row("ddp w2", "ddp", [t * 0.5 for t in STEADY], peak_memory_bytes_rank0=None),
        _row("dp w2", "dp", [t * 0.8 for t in STEADY]),
        _row("single w1", "single", STEADY),
        _row("single w1 · batch 32", "single", STEADY, batch=32.0),
        _row("ddp w1", "ddp", STEADY, batch=32.0),
    )
    rows["peak_memory_bytes.cpu:rank0"] = [2**20 * 300, None, None, None, None]
    lines = summary_lines(rows, ["0001_x"])
    headlines = [line for line in lines if not line.startswith("  ")]
    assert len(headlines) == 1 and headlines[0].startswith("mlp at global batch 64: the fastest is ddp w2")
    assert lines[1].split() == ["ddp", "w2", "the", "fastest", "peak", "300", "MiB", "per", "rank"]
    assert lines[2].startswith("  dp w2") and "slower" in lines[2]


def test_every_pair_slower_but_too_few_pairs_is_neither_slower_nor_level():
    # dp's 4 trials (one left out as disturbed: NaN) are each 2× the best's time: the [min, max]
    # interval excludes 1 but covers 87.5% < the 90% claim level, so dp is "too few pairs", not
    # "level with it" (what the decision said before) and not "slower".
    group = _frame(
        _row("ddp w2", "ddp", [t * 0.5 for t in STEADY]),
        _row("dp w2", "dp", [STEADY[0], STEADY[1], float("nan"), STEADY[3], STEADY[4]], samples_per_s=6400.0),
        _row("single w1", "single", STEADY),
    )
    single = group.iloc[2]
    r = vs_single(group.iloc[0], single)
    assert headline("mlp", group, single) == (
        f"mlp: ddp w2 has the highest median at 12,800 samples/s ({r.ratio:.2f}× single, CI {r.lo:.2f}–{r.hi:.2f}); "
        "it is significantly faster than 1 of the 2 others; too few paired trials to rank dp w2 "
        "(90% intervals need 5 pairs)."
    )
    lines = summary_lines(group, ["0001_x"])
    (dp,) = [line for line in lines if line.lstrip().startswith("dp w2")]
    assert dp.split("  ")[-1].strip() == "too few pairs (4) to claim"
