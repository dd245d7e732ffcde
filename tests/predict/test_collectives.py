"""The collective model's answer: the measurement where a log holds it (interpolated between sizes),
the fit beyond, all_reduce's fit for a collective without logs, each saying which; and a stated
link that contradicts a log refused in one line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dpbench.errors import UsageError
from dpbench.predict.collectives import Basis, fit_collectives
from dpbench.predict.measurements import Measurement, read_measurements
from dpbench.predict.model import parse_link

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def logs() -> list[Measurement]:
    return read_measurements([DATA / f"nccl_{n}.log" for n in (1, 2, 4, 8, 16)], collective="all_reduce")


def test_a_measured_size_and_world_size_is_the_measurement(logs):
    model = fit_collectives(logs)
    p = model.predict("all_reduce", 1 << 20, 8)
    assert (p.time_us, p.lo_us, p.hi_us, p.basis) == (72.53, 72.53, 72.53, Basis.MEASURED)  # nccl_8.log's row
    assert model.time_us("all_reduce", 1 << 30, 16) == 16170.0
    assert model.predict("all_reduce", 1 << 30, 16).tier == "inter"


def test_between_two_measured_sizes_it_interpolates_in_log_size_and_log_time(logs):
    model = fit_collectives(logs)
    # 3 MiB at 8 GPUs: between 2 MiB (87.70 µs) and 4 MiB (105.7 µs)
    w = math.log(3 / 2) / math.log(2)
    p = model.predict("all_reduce", 3 << 20, 8)
    assert p.basis == Basis.INTERPOLATED
    assert p.time_us == pytest.approx(math.exp((1 - w) * math.log(87.70) + w * math.log(105.7)), rel=1e-12)
    # beyond the sizes measured at 8 GPUs (8 B … 1 GiB), and at a world size not measured: the fit
    beyond = model.predict("all_reduce", 4 << 30, 8)
    assert beyond.basis == Basis.FITTED
    assert beyond.time_us == model.tier("all_reduce", 8).time_us(4 << 30, 8)
    assert model.predict("all_reduce", 3 << 20, 32).basis == Basis.FITTED


def test_a_collective_without_logs_is_all_reduces_fit_and_says_so(logs):
    model = fit_collectives(logs)
    p = model.predict("all_gather", 1 << 20, 8)
    assert p.basis == Basis.FROM_ALL_REDUCE
    fit = model.tier("all_reduce", 8)
    # all_reduce's parameters with all_gather's hops (n − 1) and bus factor ((n − 1)/n)
    assert p.time_us == pytest.approx(fit.base_us + 7 * fit.step_us + 7 / 8 * (1 << 20) / 1e3 / fit.busbw_gbps)
    with pytest.raises(UsageError, match=r"^gather: no measurement of it: expected one of all_reduce"):
        model.predict("gather", 1 << 20, 8)


def test_a_stated_link_that_contradicts_a_log_is_refused_in_one_line(logs):
    with pytest.raises(UsageError) as e:
        fit_collectives(logs, link=parse_link("inter-busbw=400GB/s"))
    # the 16-GPU log's best bus bandwidth: 127.95 GB/s at 16 GiB
    assert str(e.value) == (
        "--link inter-busbw=400GB/s: 400 GB/s of bus bandwidth across nodes, over twice the 127.9 GB/s "
        f"{DATA / 'nccl_16.log'} measured (all_reduce, 16 ranks, 17179869184 B): expected a link the log "
        "agrees with, or the log alone"
    )
    with pytest.raises(UsageError, match=r"^--link inter-busbw=50GB/s: 50 GB/s .*, under half the 127.9 GB/s"):
        fit_collectives(logs, link=parse_link("inter-busbw=50GB/s"))
    with pytest.raises(UsageError, match=r"^--link inter=50GB/s: 400 GB/s of bus bandwidth across nodes \(8 GPUs"):
        fit_collectives(logs, link=parse_link("inter=50GB/s"))
    with pytest.raises(UsageError, match=r"^--link intra=600GB/s: 600 GB/s .* over twice the 230.9 GB/s"):
        fit_collectives(logs, link=parse_link("intra=600GB/s"))
    # the README's line rate agrees (200 GB/s for eight GPUs against 128 measured): the log times the tier
    model = fit_collectives(logs, link=parse_link("inter=25GB/s"))
    assert model.tier("all_reduce", 16).points == 25
    assert any("--link inter=25GB/s: not used for the inter tier" in note for note in model.notes)


def test_a_link_beside_a_saved_runs_collectives_is_not_refused_but_the_notes_say_the_run_won():
    from dpbench.predict.measurements import read_comm_run

    model = fit_collectives(read_comm_run(DATA / "step_run.json"), link=parse_link("intra=10GB/s"), gpus_per_node=8)
    assert [n for n in model.notes if n.startswith("--link")] == [
        f"--link intra=10GB/s: not used for the intra tier, which {DATA / 'step_run.json'} measured "
        "(at most 3.849 GB/s of bus bandwidth)"
    ]


def test_a_broadcast_without_logs_is_refused_not_taken_from_all_reduce(logs):
    with pytest.raises(UsageError, match=r"^broadcast: no measurement of it: expected one of all_reduce"):
        fit_collectives(logs).predict("broadcast", 1 << 20, 8)
