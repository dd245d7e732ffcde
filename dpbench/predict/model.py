"""The collective cost model: per collective and link tier (inside a node, across nodes), an
alpha–beta time whose latency grows with the hops of the algorithm and whose bandwidth term carries
the collective's bus factor (nccl-tests' PERFORMANCE.md). Inside one node, a ring:

    time_us(bytes, n) = base_us + step_us · steps(n) + factor(n) · bytes / (busbw_gbps · 10³)

with ``steps``: all_reduce 2(n−1), all_gather, reduce_scatter and broadcast n−1 (a ring's hops),
and ``factor``: all_reduce 2(n−1)/n, all_gather and reduce_scatter (n−1)/n, broadcast 1.

Across nodes a hop through the network costs its own latency (``net_step_us``), and the time is
that of the cheaper of the routes NCCL chooses between (:func:`routes`, after NCCL's own tuning
model): the ring, whose 2(n−1) steps (all_reduce) cross the network 2·nodes times, the others
nodes − 1 times; and for all_reduce the tree, 2·(ranks per node − 1) hops inside the nodes and
2·⌈log2 nodes⌉ across them, moving the whole buffer up and then down (factor 2). So the latency of
a small message grows with the node count as a tree's does (log2), that of a ring with the ranks.

The parameters are fitted by least squares on log time (relative error counts the same at 8 B and
16 GiB), in log space so they stay positive; the residuals' spread gives the parameters' intervals
and each prediction's interval. Across nodes the fixed latency and the hop latency inside a node
are the intra fit's where there is one, so one node count is enough to fit the network's hop
latency. A tier without measurements comes from a stated :class:`Link`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from dpbench.errors import UsageError
from dpbench.predict.measurements import COLLECTIVES, Measurement

__all__ = [
    "INTER",
    "INTRA",
    "RING",
    "TREE",
    "Link",
    "Route",
    "TierFit",
    "bus_factor",
    "fit_tier",
    "latency_steps",
    "parse_link",
    "routes",
    "stated_tier",
    "tier_time_us",
]

INTRA = "intra"
"""The tier of a group inside one node."""
INTER = "inter"
"""The tier of a group that spans nodes."""
RING = "ring"
"""The ring: every collective, inside a node and across nodes."""
TREE = "tree"
"""NCCL's tree: all_reduce across nodes."""
_LEVEL = 0.95  # the intervals' coverage


def bus_factor(collective: str, world_size: int) -> float:
    """nccl-tests' factor from algorithm bandwidth to bus bandwidth (PERFORMANCE.md)."""
    n = world_size
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    if collective == "broadcast":
        return 1.0
    raise UsageError(f"collective: expected one of {', '.join(COLLECTIVES)}, found {collective!r}")


def latency_steps(collective: str, world_size: int) -> int:
    """The hops a ring takes: all_reduce 2(n−1) (reduce-scatter then all-gather), the others n−1."""
    bus_factor(collective, world_size)  # the same check of the name
    return (2 if collective == "all_reduce" else 1) * (world_size - 1)


@dataclass(kw_only=True, frozen=True)
class Route:
    """One way a collective can run among the ranks of some nodes: its hops and the bytes it moves."""

    algorithm: str
    """``ring`` or ``tree``."""
    intra_hops: int
    """Hops inside a node on the critical path."""
    net_hops: int
    """Hops across the network on it."""
    factor: float
    """Bytes through each GPU's link per byte of message (the bus factor; a tree's 2)."""


def routes(collective: str, world_size: int, nodes: int) -> tuple[Route, ...]:
    """The routes NCCL's tuning chooses between (the cheaper wins): inside one node the ring alone;
    across nodes the ring with 2·nodes of its 2(n−1) steps through the network for all_reduce
    (nodes − 1 of n − 1 for the others), and all_reduce's tree, 2·(ranks per node − 1) hops inside
    the nodes and 2·⌈log2 nodes⌉ across them, each byte going up and then down the tree."""
    steps = latency_steps(collective, world_size)
    factor = bus_factor(collective, world_size)
    if nodes <= 1:
        return (Route(algorithm=RING, intra_hops=steps, net_hops=0, factor=factor),)
    net = min(2 * nodes if collective == "all_reduce" else nodes - 1, steps)
    out = [Route(algorithm=RING, intra_hops=steps - net, net_hops=net, factor=factor)]
    if collective == "all_reduce":
        per_node = -(-world_size // nodes)
        out.append(
            Route(algorithm=TREE, intra_hops=2 * (per_node - 1), net_hops=2 * math.ceil(math.log2(nodes)), factor=2.0)
        )
    return tuple(out)


def _shape(collective: str, sizes: np.ndarray, worlds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    steps = np.array([latency_steps(collective, int(n)) for n in worlds], dtype=float)
    moved = np.array([bus_factor(collective, int(n)) for n in worlds]) * sizes / 1e3  # bytes / (GB/s) in µs
    return steps, moved


def _route_arrays(collective: str, sizes, worlds, nodes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(intra hops, network hops, moved µs·GB/s) per point and route; a route a point lacks moves ∞."""
    shape = (len(sizes), 2)
    intra, net, moved = np.zeros(shape), np.zeros(shape), np.full(shape, np.inf)
    for i, (b, n, k) in enumerate(zip(sizes, worlds, nodes, strict=True)):
        for j, r in enumerate(routes(collective, int(n), int(k))):
            intra[i, j], net[i, j], moved[i, j] = r.intra_hops, r.net_hops, r.factor * float(b) / 1e3
    return intra, net, moved


@dataclass(kw_only=True, frozen=True)
class TierFit:
    """One collective's model on one link tier: its parameters, where they came from, how well they fit."""

    collective: str
    """The collective it times."""
    tier: str
    """``intra`` (every rank in one node) or ``inter`` (the group spans nodes)."""
    base_us: float
    """The fixed cost of a call (launch, synchronisation), µs."""
    step_us: float
    """The latency of one ring hop, µs: the part of the latency that grows with the group."""
    busbw_gbps: float
    """Bus bandwidth, GB/s (10⁹ B/s): nccl-tests' busbw that large messages approach."""
    base_interval: tuple[float, float] | None
    """95% interval of ``base_us`` from the fit (None: stated or held fixed, not fitted)."""
    step_interval: tuple[float, float] | None
    """95% interval of ``step_us`` (None: stated or held fixed)."""
    busbw_interval: tuple[float, float] | None
    """95% interval of ``busbw_gbps`` (None: stated, not fitted)."""
    residual_sd: float
    """Standard deviation of the log-time residuals (0.1: about 10% per point); for a stated tier, that
    of the tier it was built on (0: a stated link alone, no interval)."""
    points: int
    """Measurements fitted (0: stated)."""
    world_sizes: tuple[int, ...]
    """The world sizes fitted."""
    origin: str
    """Where the parameters came from, in words: the fit, or the stated link and the fitted tier."""
    log_params: tuple[float, ...] = ()
    """The fitted parameters' logs, in the order ``fitted`` names them (busbw last)."""
    covariance: tuple[tuple[float, ...], ...] = ()
    """Their covariance (log scale), for prediction intervals; empty for a stated tier."""
    dof: int = 0
    """Residual degrees of freedom (points − parameters fitted)."""
    net_step_us: float | None = None
    """The latency of one hop through the network, µs (the inter tier; None: one node's ring, every
    hop at ``step_us``)."""
    net_step_interval: tuple[float, float] | None = None
    """95% interval of ``net_step_us`` (None: stated, taken from the intra tier or held fixed)."""
    gpus_per_node: int = 0
    """GPUs per node, for the inter tier's node count (0: not needed)."""
    fitted: tuple[str, ...] = ()
    """The parameters ``log_params`` holds (``base``, ``step``, ``net``, ``busbw``); empty with
    ``log_params``: base, step, busbw (three) or base, busbw (two)."""

    def time_us(self, nbytes: float, world_size: int) -> float:
        """The modelled time of one call of ``nbytes`` among ``world_size`` ranks, µs."""
        return tier_time_us(self, nbytes, world_size)

    def nodes(self, world_size: int) -> int:
        """The nodes a group of ``world_size`` spans under this tier (an inter group spans two or more)."""
        if self.net_step_us is None:
            return 1
        per_node = self.gpus_per_node or world_size
        return max(2, -(-world_size // per_node))

    def route(self, nbytes: float, world_size: int) -> Route:
        """The route the model times: the cheapest of :func:`routes`."""
        options = routes(self.collective, world_size, self.nodes(world_size))
        return min(options, key=lambda r: self._route_us(r, nbytes))

    def _route_us(self, r: Route, nbytes: float) -> float:
        net = self.step_us if self.net_step_us is None else self.net_step_us
        return self.step_us * r.intra_hops + net * r.net_hops + r.factor * nbytes / 1e3 / self.busbw_gbps

    def _names(self) -> tuple[str, ...]:
        if self.fitted:
            return self.fitted
        return ("base", "step", "busbw") if len(self.log_params) == 3 else ("base", "busbw")

    def interval_us(self, nbytes: float, world_size: int) -> tuple[float, float]:
        """The 95% prediction interval of one call: the residual spread plus the parameters' uncertainty."""
        time = self.time_us(nbytes, world_size)
        if self.residual_sd == 0:
            return time, time
        from scipy.stats import t

        var = self.residual_sd**2
        if self.covariance:
            g = self._gradient(nbytes, world_size)
            var += float(g @ np.asarray(self.covariance) @ g)
        half = float(t.ppf(0.5 + _LEVEL / 2, max(self.dof, 1))) * math.sqrt(var)
        return time * math.exp(-half), time * math.exp(half)

    def _gradient(self, nbytes: float, world_size: int) -> np.ndarray:
        """d log time / d log params at one point (on the route the model takes there)."""
        r = self.route(nbytes, world_size)
        net = self.step_us if self.net_step_us is None else self.net_step_us
        steps = r.intra_hops if self.net_step_us is not None else r.intra_hops + r.net_hops
        term = {
            "base": self.base_us,
            "step": self.step_us * steps,
            "net": net * r.net_hops,
            "busbw": -r.factor * nbytes / 1e3 / self.busbw_gbps,  # d(moved/bw)/d log bw = −moved/bw
        }
        return np.array([term[name] for name in self._names()]) / self.time_us(nbytes, world_size)


def tier_time_us(tier: TierFit, nbytes: float, world_size: int) -> float:
    """``base + step · intra hops + net step · network hops + factor · bytes / busbw`` for one tier
    on its cheapest route, µs (inside one node: ``base + step · steps(n) + factor(n) · bytes / busbw``)."""
    if world_size < 1:
        raise UsageError(f"world size: expected >= 1, found {world_size}")
    return tier.base_us + tier._route_us(tier.route(nbytes, world_size), nbytes)


def fit_tier(
    measurements: list[Measurement],
    *,
    collective: str,
    tier: str,
    gpus_per_node: int = 0,
    intra: TierFit | None = None,
) -> TierFit:
    """Least squares on log time over ``measurements`` (one collective, one tier, world sizes ≥ 2).

    Inside a node, with one group size the latency cannot be split into its fixed and per-hop
    parts: the hop latency is held at 0 and the whole latency is the fixed part (said in
    ``origin``). Across nodes see :func:`_fit_inter` (``intra``: the same collective's intra fit)."""
    if tier == INTER:
        return _fit_inter(measurements, collective=collective, gpus_per_node=gpus_per_node, intra=intra)
    from scipy.optimize import least_squares
    from scipy.stats import t

    sizes = np.array([m.bytes for m in measurements], dtype=float)
    worlds = np.array([m.world_size for m in measurements], dtype=float)
    observed = np.log([m.time_us for m in measurements])
    steps, moved = _shape(collective, sizes, worlds)
    groups = tuple(sorted({m.world_size for m in measurements}))
    with_steps = len(groups) > 1
    n_params = 3 if with_steps else 2
    if len(measurements) <= n_params:
        raise UsageError(
            f"{collective} ({tier} tier): {len(measurements)} measurements cannot fit {n_params} parameters: "
            f"expected at least {n_params + 1} message sizes"
        )

    def unpack(x: np.ndarray) -> tuple[float, float, float]:
        return (math.exp(x[0]), math.exp(x[1]), math.exp(x[2])) if with_steps else (math.exp(x[0]), 0.0, math.exp(x[1]))

    def residuals(x: np.ndarray) -> np.ndarray:
        base, step, bw = unpack(x)
        return np.log(base + step * steps + moved / bw) - observed

    start = _start(observed, steps, moved, sizes, with_steps)
    result = least_squares(residuals, start, method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=20000)
    base, step, bw = unpack(result.x)
    dof = len(measurements) - n_params
    sd = float(math.sqrt(float(result.fun @ result.fun) / dof))
    covariance = sd**2 * np.linalg.pinv(result.jac.T @ result.jac)
    se = np.sqrt(np.clip(np.diag(covariance), 0, None))
    q = float(t.ppf(0.5 + _LEVEL / 2, dof))

    def interval(i: int) -> tuple[float, float]:
        return math.exp(result.x[i] - q * se[i]), math.exp(result.x[i] + q * se[i])

    held = "" if with_steps else "; one group size: its latency held constant (hop latency 0)"
    return TierFit(
        collective=collective,
        tier=tier,
        base_us=base,
        step_us=step,
        busbw_gbps=bw,
        base_interval=interval(0),
        step_interval=interval(1) if with_steps else None,
        busbw_interval=interval(n_params - 1),
        residual_sd=sd,
        points=len(measurements),
        world_sizes=groups,
        origin=f"fit on {len(measurements)} points at world sizes {','.join(map(str, groups))}{held}",
        log_params=tuple(float(v) for v in result.x),
        covariance=tuple(tuple(float(v) for v in row) for row in covariance),
        dof=dof,
    )


def _fit_inter(
    measurements: list[Measurement], *, collective: str, gpus_per_node: int, intra: TierFit | None
) -> TierFit:
    """The inter tier: each point on its cheapest route (:func:`routes`) at the nodes it ran on.

    With the intra fit, its fixed latency and hop latency inside a node are taken as they are and
    the network's hop latency and the bus bandwidth are fitted: one node count is enough. Without
    it, hops inside a node cost nothing beyond the fixed latency; two node counts or more fit the
    fixed latency, the network's hop latency and the bus bandwidth, one node count only the first
    and the last (the network's hop latency held at 0, said in ``origin``)."""
    from scipy.optimize import least_squares
    from scipy.stats import t

    sizes = [m.bytes for m in measurements]
    worlds = [m.world_size for m in measurements]
    intra_hops, net_hops, moved = _route_arrays(collective, sizes, worlds, [m.nodes for m in measurements])
    observed = np.log([m.time_us for m in measurements])
    groups = tuple(sorted(set(worlds)))
    node_counts = sorted({m.nodes for m in measurements})
    if intra is not None:
        names = ("net", "busbw")
        fixed = {"base": intra.base_us, "step": intra.step_us}
    elif len(node_counts) > 1:
        names = ("base", "net", "busbw")
        fixed = {"step": 0.0}
    else:
        names = ("base", "busbw")
        fixed = {"step": 0.0, "net": 0.0}
    if len(measurements) <= len(names):
        raise UsageError(
            f"{collective} (inter tier): {len(measurements)} measurements cannot fit {len(names)} parameters: "
            f"expected at least {len(names) + 1} message sizes"
        )

    def unpack(x: np.ndarray) -> dict[str, float]:
        return {**fixed, **{name: math.exp(v) for name, v in zip(names, x, strict=True)}}

    def residuals(x: np.ndarray) -> np.ndarray:
        p = unpack(x)
        cost = p["step"] * intra_hops + p["net"] * net_hops + moved / p["busbw"]
        return np.log(p["base"] + cost.min(axis=1)) - observed

    small, big = int(np.argmin(sizes)), int(np.argmax(sizes))
    bw = max(float(moved[big, 0]) / math.exp(observed[big]), 1e-6)
    start_values = {"base": math.exp(observed[small]) / 2, "busbw": bw}
    floor = fixed.get("base", 0.0) + fixed.get("step", 0.0) * float(intra_hops[small].min())
    start_values["net"] = max((math.exp(observed[small]) - floor) / max(float(net_hops[small].max()), 1.0), 0.1)
    start = np.log([start_values[name] for name in names])
    result = least_squares(residuals, start, method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=20000)
    p = unpack(result.x)
    dof = len(measurements) - len(names)
    sd = float(math.sqrt(float(result.fun @ result.fun) / dof))
    covariance = sd**2 * np.linalg.pinv(result.jac.T @ result.jac)
    se = np.sqrt(np.clip(np.diag(covariance), 0, None))
    q = float(t.ppf(0.5 + _LEVEL / 2, dof))
    intervals = {
        name: (math.exp(result.x[i] - q * se[i]), math.exp(result.x[i] + q * se[i])) for i, name in enumerate(names)
    }
    if intra is not None:
        how = (
            f"; the intra fit's latency ({intra.base_us:.3g} µs + {intra.step_us:.3g} µs per hop inside a node), "
            f"{p['net']:.3g} µs per hop across nodes fitted"
        )
    elif "net" in names:
        how = f"; {p['net']:.3g} µs per hop across nodes fitted, hops inside a node not measured (0)"
    else:
        how = (
            "; one node count (one group size) and no measurement inside a node: its latency held constant "
            "(hop latency 0)"
        )
    return TierFit(
        collective=collective,
        tier=INTER,
        base_us=p["base"],
        step_us=p["step"],
        busbw_gbps=p["busbw"],
        base_interval=intervals.get("base"),
        step_interval=None,
        busbw_interval=intervals["busbw"],
        residual_sd=sd,
        points=len(measurements),
        world_sizes=groups,
        origin=f"fit on {len(measurements)} points at world sizes {','.join(map(str, groups))}{how}",
        log_params=tuple(float(v) for v in result.x),
        covariance=tuple(tuple(float(v) for v in row) for row in covariance),
        dof=dof,
        net_step_us=p["net"],
        net_step_interval=intervals.get("net"),
        gpus_per_node=gpus_per_node,
        fitted=names,
    )


def _start(observed: np.ndarray, steps, moved, sizes, with_steps: bool) -> np.ndarray:
    """A starting point: latency from the smallest messages, bandwidth from the largest."""
    small = float(np.exp(observed[np.argmin(sizes)]))
    big = int(np.argmax(sizes))
    bw = max(float(moved[big]) / float(np.exp(observed[big])), 1e-6) if moved[big] > 0 else 1.0
    if with_steps:
        return np.log([small / 2, small / 2 / max(float(steps.mean()), 1.0), bw])
    return np.log([small, bw])


@dataclass(kw_only=True, frozen=True)
class Link:
    """Links stated by the user (``--link intra=450GB/s,inter=25GB/s,latency=10us``)."""

    intra_gbps: float | None = None
    """Bus bandwidth inside a node, GB/s (None: not stated)."""
    inter_gbps: float | None = None
    """Bandwidth each GPU has to other nodes (its own NIC), GB/s (None: not stated)."""
    inter_busbw_gbps: float | None = None
    """The bus bandwidth a collective across nodes reaches, GB/s: nccl-tests' ``busbw`` of one
    run across nodes at a large message (None: not stated). It replaces ``inter``'s line rate."""
    latency_us: float | None = None
    """Latency of one hop across the stated link, µs (None: not stated)."""

    def text(self) -> str:
        """The link as the option states it."""
        parts = [
            f"{name}={value:g}{unit}"
            for name, value, unit in (
                ("intra", self.intra_gbps, "GB/s"),
                ("inter", self.inter_gbps, "GB/s"),
                ("inter-busbw", self.inter_busbw_gbps, "GB/s"),
                ("latency", self.latency_us, "us"),
            )
            if value is not None
        ]
        return "--link " + ",".join(parts)


# Case matters: GB/s are bytes, Gb/s bits (a NIC's 200 Gb/s is 25 GB/s).
_BANDWIDTH_UNITS = {
    "GB/s": 1.0,
    "MB/s": 1e-3,
    "TB/s": 1e3,
    "Gb/s": 1 / 8,
    "Gbit/s": 1 / 8,
    "Mb/s": 1e-3 / 8,
    "Mbit/s": 1e-3 / 8,
    "Tb/s": 1e3 / 8,
    "Tbit/s": 1e3 / 8,
}
_TIME_UNITS = {"us": 1.0, "µs": 1.0, "ms": 1e3, "ns": 1e-3, "s": 1e6}
_LINK_KEYS = ("intra", "inter", "inter-busbw", "latency")


def parse_link(text: str) -> Link:
    """``intra=450GB/s,inter=25GB/s,latency=10us`` (or ``inter-busbw=124GB/s``): bandwidths in GB/s,
    MB/s, TB/s (bytes) or Gb/s, Gbit/s, Mb/s, Tb/s (bits); times in us, ms, ns, s."""
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in _LINK_KEYS:
            raise UsageError(
                f"--link: expected intra=BW, inter=BW, inter-busbw=BW or latency=TIME, found {part!r}"
                f"{_did_you_mean_link(key)}"
            )
        units = _TIME_UNITS if key == "latency" else _BANDWIDTH_UNITS
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*([^\s0-9].*)?", value, flags=re.I)
        unit = (m.group(2) or "").strip() if m else ""
        if not m or unit not in units or float(m.group(1)) <= 0:
            example = "10us" if key == "latency" else "25GB/s"
            raise UsageError(f"--link {key}: expected a positive number with a unit like {example}, found {value!r}")
        values[key] = float(m.group(1)) * units[unit]
    if not values:
        raise UsageError(f"--link: expected intra=BW, inter=BW, inter-busbw=BW or latency=TIME, found {text!r}")
    if "inter" in values and "inter-busbw" in values:
        raise UsageError(
            "--link: expected inter=BW (each GPU's line rate) or inter-busbw=BW (the bus bandwidth measured "
            "across nodes), found both"
        )
    return Link(
        intra_gbps=values.get("intra"),
        inter_gbps=values.get("inter"),
        inter_busbw_gbps=values.get("inter-busbw"),
        latency_us=values.get("latency"),
    )


def _did_you_mean_link(key: str) -> str:
    """`` (did you mean 'inter'?)`` for a mistyped ``--link`` key."""
    from dpbench.errors import did_you_mean

    return did_you_mean(key, _LINK_KEYS)


def stated_tier(*, collective: str, tier: str, link: Link, gpus_per_node: int, intra: TierFit | None) -> TierFit | None:
    """A tier built from the stated link (and, for the inter tier, the fitted intra one); None when not stated.

    Inter, from each GPU's line rate (``inter``): a group across nodes runs one ring per GPU of a
    node, each through its own GPU's link, so the bus bandwidth is the smaller of the node's links
    together (``gpus_per_node · inter``) and the fitted intra tier's. From a measured bus bandwidth
    (``inter-busbw``): that bandwidth as it is — what the collective library reached across these
    nodes, which a line rate does not say. Either way the fixed latency and the hop latency inside
    a node are the intra tier's, a hop across the network takes ``latency`` when stated (else the
    intra tier's hop latency, said in ``origin``: nothing measured it), and the interval is the
    intra fit's residual spread (the link itself has none stated)."""
    if tier == INTRA:
        if link.intra_gbps is None:
            return None
        step = link.latency_us or 0.0
        return TierFit(
            collective=collective,
            tier=tier,
            base_us=0.0,
            step_us=step,
            busbw_gbps=link.intra_gbps,
            base_interval=None,
            step_interval=None,
            busbw_interval=None,
            residual_sd=0.0,
            points=0,
            world_sizes=(),
            origin=f"stated: {link.text()} (no interval)",
        )
    if (link.inter_gbps is None and link.inter_busbw_gbps is None) or intra is None:
        return None
    if link.latency_us is not None:
        net, net_said = link.latency_us, f"{link.latency_us:g} µs per hop across nodes (stated)"
    else:
        net = intra.step_us
        net_said = (
            f"{intra.step_us:.3g} µs per hop across nodes: the intra tier's, as nothing measured or stated it "
            "(state latency=TIME)"
        )
    if link.inter_busbw_gbps is not None:
        bw = link.inter_busbw_gbps
        limit = "as measured across nodes"
    else:
        node_bw = gpus_per_node * link.inter_gbps
        bw = min(node_bw, intra.busbw_gbps)
        limit = f"{gpus_per_node} × {link.inter_gbps:g} GB/s" if node_bw <= intra.busbw_gbps else "the intra tier's"
    return TierFit(
        collective=collective,
        tier=tier,
        base_us=intra.base_us,
        step_us=intra.step_us,
        busbw_gbps=bw,
        base_interval=None,
        step_interval=None,
        busbw_interval=None,
        residual_sd=intra.residual_sd,
        points=0,
        world_sizes=(),
        dof=intra.dof,
        origin=f"stated {link.text()} with the intra fit's latency; bus bandwidth {limit}; {net_said}",
        net_step_us=net,
        gpus_per_node=gpus_per_node,
    )
