"""The collective model: its form (nccl-tests' bus factors, a ring's hops), the fit recovering the
parameters of data it generated itself, the stated links, and the tier a world size needs."""

from __future__ import annotations

import math

import pytest

from dpbench.errors import UsageError
from dpbench.predict.collectives import Basis, fit_collectives, predict_collectives
from dpbench.predict.measurements import Measurement
from dpbench.predict.model import (
    INTER,
    INTRA,
    RING,
    TREE,
    Link,
    Route,
    TierFit,
    bus_factor,
    fit_tier,
    latency_steps,
    parse_link,
    routes,
)

SIZES = [8 << k for k in range(0, 28, 2)]  # 8 B … 512 MiB


def test_bus_factors_and_hops_are_nccl_tests_and_a_rings():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 8) == bus_factor("reduce_scatter", 8) == pytest.approx(7 / 8)
    assert bus_factor("broadcast", 8) == 1.0
    assert [latency_steps(c, 8) for c in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")] == [14, 7, 7, 7]
    with pytest.raises(UsageError, match="collective: expected one of all_reduce, .*found 'gather'"):
        bus_factor("gather", 2)


def _synthetic(collective: str, base: float, step: float, bw: float, worlds, nodes: int = 1) -> list[Measurement]:
    truth = TierFit(
        collective=collective,
        tier=INTRA,
        base_us=base,
        step_us=step,
        busbw_gbps=bw,
        base_interval=None,
        step_interval=None,
        busbw_interval=None,
        residual_sd=0.0,
        points=0,
        world_sizes=(),
        origin="truth",
    )
    return [
        Measurement(
            collective=collective,
            bytes=b,
            world_size=n,
            nodes=nodes,
            ranks_per_node=n // nodes,
            time_us=truth.time_us(b, n),
            source="synthetic",
        )
        for n in worlds
        for b in SIZES
    ]


def _across_nodes(base: float, step: float, net: float, bw: float, worlds, per_node: int = 8) -> list[Measurement]:
    truth = TierFit(
        collective="all_reduce",
        tier=INTER,
        base_us=base,
        step_us=step,
        busbw_gbps=bw,
        base_interval=None,
        step_interval=None,
        busbw_interval=None,
        residual_sd=0.0,
        points=0,
        world_sizes=(),
        origin="truth",
        net_step_us=net,
        gpus_per_node=per_node,
    )
    return [
        Measurement(
            collective="all_reduce",
            bytes=b,
            world_size=n,
            nodes=n // per_node,
            ranks_per_node=per_node,
            time_us=truth.time_us(b, n),
            source="synthetic",
        )
        for n in worlds
        for b in SIZES
    ]


def test_routes_are_nccls_ring_and_tree_hops():
    # inside one node: the ring alone, every hop inside
    assert routes("all_reduce", 8, 1) == (Route(algorithm=RING, intra_hops=14, net_hops=0, factor=1.75),)
    # 4 nodes of 8: the ring crosses the network 2·nodes times of its 62 steps; the tree 2·log2(4)
    assert routes("all_reduce", 32, 4) == (
        Route(algorithm=RING, intra_hops=54, net_hops=8, factor=pytest.approx(62 / 32)),
        Route(algorithm=TREE, intra_hops=14, net_hops=4, factor=2.0),
    )
    assert routes("all_gather", 32, 4) == (Route(algorithm=RING, intra_hops=28, net_hops=3, factor=31 / 32),)
    assert routes("broadcast", 16, 2) == (Route(algorithm=RING, intra_hops=14, net_hops=1, factor=1.0),)
    assert routes("all_reduce", 3, 3)[0].net_hops == 4  # one GPU a node: every step crosses (never more)


def test_the_inter_fit_on_one_node_count_recovers_the_network_hop_and_the_latency_grows_with_the_nodes():
    intra = fit_tier(_synthetic("all_reduce", 12.0, 1.5, 230.0, (2, 4, 8)), collective="all_reduce", tier=INTRA)
    inter = fit_tier(
        _across_nodes(12.0, 1.5, 8.0, 120.0, (16,)), collective="all_reduce", tier=INTER, gpus_per_node=8, intra=intra
    )
    assert (inter.base_us, inter.step_us) == (intra.base_us, intra.step_us)  # taken as they are
    assert inter.net_step_us == pytest.approx(8.0, rel=1e-6) and inter.busbw_gbps == pytest.approx(120.0, rel=1e-6)
    assert inter.fitted == ("net", "busbw") and inter.net_step_interval is not None
    assert "8 µs per hop across nodes fitted" in inter.origin
    # a small message across 2, 4, 16 nodes: the tree's latency, 2·log2(nodes) network hops
    small = [inter.time_us(1024, n) - 2 * 1024 / 120e3 for n in (16, 32, 128)]
    assert small == pytest.approx([12.0 + 1.5 * 14 + 8.0 * k for k in (2, 4, 8)])
    assert {inter.route(1024, n).algorithm for n in (16, 32, 128)} == {TREE}
    assert inter.route(1 << 30, 16).algorithm == RING


def test_without_a_node_two_node_counts_fit_the_fixed_and_the_network_latency():
    data = _across_nodes(20.0, 0.0, 6.0, 100.0, (16, 32))
    fit = fit_tier(data, collective="all_reduce", tier=INTER, gpus_per_node=8)
    assert (fit.base_us, fit.net_step_us, fit.busbw_gbps) == pytest.approx((20.0, 6.0, 100.0), rel=1e-6)
    lo, hi = fit.interval_us(1 << 20, 64)
    assert lo <= fit.time_us(1 << 20, 64) <= hi


@pytest.mark.parametrize(
    ("collective", "base", "step", "bw"),
    [("all_reduce", 12.0, 1.5, 230.0), ("all_gather", 8.0, 0.7, 180.0), ("broadcast", 20.0, 3.0, 90.0)],
)
def test_the_fit_recovers_the_parameters_of_its_own_model(collective, base, step, bw):
    fit = fit_tier(_synthetic(collective, base, step, bw, (2, 4, 8)), collective=collective, tier=INTRA)
    assert fit.base_us == pytest.approx(base, rel=1e-6)
    assert fit.step_us == pytest.approx(step, rel=1e-6)
    assert fit.busbw_gbps == pytest.approx(bw, rel=1e-6)
    assert fit.residual_sd < 1e-6
    assert fit.points == 3 * len(SIZES) and fit.world_sizes == (2, 4, 8)


def test_one_group_size_holds_the_hop_latency_at_zero():
    fit = fit_tier(_synthetic("all_reduce", 30.0, 0.0, 100.0, (16,), nodes=2), collective="all_reduce", tier=INTER)
    assert (fit.base_us, fit.step_us, fit.busbw_gbps) == pytest.approx((30.0, 0.0, 100.0), rel=1e-6)
    assert fit.step_interval is None and "one group size" in fit.origin


def test_too_few_points_are_refused():
    with pytest.raises(UsageError, match=r"all_reduce \(intra tier\): 2 measurements cannot fit 2 parameters"):
        fit_tier(_synthetic("all_reduce", 10.0, 0.0, 100.0, (2,))[:2], collective="all_reduce", tier=INTRA)


def test_the_prediction_interval_covers_the_residual_spread():
    noisy = [
        Measurement(**{**m.__dict__, "time_us": m.time_us * math.exp(0.05 * (-1) ** i)})
        for i, m in enumerate(_synthetic("all_reduce", 12.0, 1.5, 230.0, (2, 4, 8)))
    ]
    model = fit_collectives(noisy)
    (p,) = predict_collectives(model, noisy, [6], sizes=[2 << 20])  # a world size not measured: the fit
    assert p.basis == Basis.FITTED
    assert p.lo_us < p.time_us < p.hi_us
    assert math.log(p.hi_us / p.time_us) > 1.96 * 0.05 * 0.9  # at least the residual spread's 95%
    (at8,) = predict_collectives(model, noisy, [8], sizes=[2 << 20])
    assert at8.measured_us is not None and at8.error == pytest.approx(at8.time_us / at8.measured_us - 1)


def test_parse_link_reads_units_and_refuses_in_one_line():
    assert parse_link("intra=450GB/s,inter=200Gbit/s,latency=10us") == Link(
        intra_gbps=450.0, inter_gbps=25.0, latency_us=10.0
    )
    assert parse_link("latency=0.5ms") == Link(latency_us=500.0)
    assert parse_link("inter=200Gb/s") == Link(inter_gbps=25.0)  # bits, not bytes
    with pytest.raises(
        UsageError, match=r"--link inter: expected a positive number with a unit like 25GB/s, found '25gb/s'"
    ):
        parse_link("inter=25gb/s")
    with pytest.raises(
        UsageError,
        match=r"--link: expected intra=BW, inter=BW, inter-busbw=BW or latency=TIME, found 'intr=4GB/s' "
        r"\(did you mean 'intra'\?\)",
    ):
        parse_link("intr=4GB/s")
    with pytest.raises(
        UsageError, match=r"--link inter: expected a positive number with a unit like 25GB/s, found '25'"
    ):
        parse_link("inter=25")


def test_sixteen_from_one_node_needs_the_inter_link_and_says_where_it_came_from():
    one_node = _synthetic("all_reduce", 12.0, 1.5, 230.0, (2, 4, 8))
    with pytest.raises(UsageError, match=r"world size 16: spans 2 nodes of 8 GPUs.*--link inter=25GB/s"):
        fit_collectives(one_node).predict("all_reduce", 1 << 20, 16)
    model = fit_collectives(one_node, link=parse_link("inter=25GB/s,latency=5us"))
    inter = model.tier("all_reduce", 16)
    assert (inter.tier, inter.base_us, inter.step_us, inter.net_step_us, inter.busbw_gbps) == (
        INTER,
        pytest.approx(12.0),
        pytest.approx(1.5),
        5.0,
        pytest.approx(200.0),
    )
    assert "stated --link inter=25GB/s,latency=5us" in inter.origin and "8 × 25 GB/s" in inter.origin
    assert "5 µs per hop across nodes (stated)" in inter.origin
    # 1 GiB: the ring (26 hops inside the nodes, 4 across); 1 KiB: the tree (2 × 7 inside, 2 × 1 across)
    assert model.time_us("all_reduce", 1 << 30, 16) == pytest.approx(
        12.0 + 1.5 * 26 + 5.0 * 4 + 1.875 * (1 << 30) / 200e3
    )
    assert model.time_us("all_reduce", 1024, 16) == pytest.approx(12.0 + 1.5 * 14 + 5.0 * 2 + 2 * 1024 / 200e3)
    assert model.predict("all_reduce", 1024, 16).basis == Basis.STATED
    # a fit that includes data across nodes wins over the stated link, and the notes say so
    two_nodes = _across_nodes(12.0, 1.5, 8.0, 120.0, (16,))
    model = fit_collectives(one_node + two_nodes, link=parse_link("inter=25GB/s"))
    fitted = model.tier("all_reduce", 16)
    assert fitted.origin.startswith("fit on") and fitted.busbw_gbps == pytest.approx(120.0, rel=1e-6)
    assert any(
        n.startswith("--link inter=25GB/s: not used for the inter tier, which synthetic measured") for n in model.notes
    )


def test_a_measured_bus_bandwidth_across_nodes_is_taken_as_it_is():
    one_node = _synthetic("all_reduce", 12.0, 1.5, 230.0, (2, 4, 8))
    assert parse_link("inter-busbw=1000Gb/s") == Link(inter_busbw_gbps=125.0)
    inter = fit_collectives(one_node, link=parse_link("inter-busbw=125GB/s")).tier("all_reduce", 16)
    # not 8 GPUs' line rates, not capped by the intra tier: the measured bus bandwidth, with the intra latency
    assert (inter.base_us, inter.step_us, inter.busbw_gbps) == (pytest.approx(12.0), pytest.approx(1.5), 125.0)
    assert inter.net_step_us == pytest.approx(1.5)  # nothing measured or stated it: the intra tier's, said
    assert inter.origin == (
        "stated --link inter-busbw=125GB/s with the intra fit's latency; bus bandwidth as measured across nodes; "
        "1.5 µs per hop across nodes: the intra tier's, as nothing measured or stated it (state latency=TIME)"
    )
    with pytest.raises(UsageError, match=r"^--link: expected inter=BW .* or inter-busbw=BW .*, found both$"):
        parse_link("inter=25GB/s,inter-busbw=125GB/s")


def test_the_interval_widens_where_the_fit_extrapolates():
    from scipy.stats import t

    noisy = [
        Measurement(**{**m.__dict__, "time_us": m.time_us * math.exp(0.05 * (-1) ** (i // 3))})
        for i, m in enumerate(_synthetic("all_reduce", 12.0, 1.5, 230.0, (2, 4, 8)))
    ]
    fit = fit_collectives(noisy, gpus_per_node=64).tier("all_reduce", 8)
    residual_only = float(t.ppf(0.975, fit.dof)) * fit.residual_sd

    def half_width(nbytes: int, n: int) -> float:
        lo, hi = fit.interval_us(nbytes, n)
        return math.log(hi / fit.time_us(nbytes, n))

    assert residual_only < half_width(8, 8) < half_width(8, 64)  # the hop latency's uncertainty × 126 hops
