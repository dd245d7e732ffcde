"""What the report's views are made of: tables, images, parts; and the figure helpers they share.

Figures are plain ``matplotlib.figure.Figure`` objects saved straight to SVG with the text kept as
text, never shown through pyplot: the report renders headless on CI, and importing it leaves a
notebook's backend untouched. SVG over PNG: sharp at any zoom, and 1.5–2.5× faster to write (Agg's
text rendering and the palette quantization a small PNG needs cost more than the SVG writer; a
128-colour PNG at 72 dpi was 3–4× smaller, but the page stays under its size target with SVG).
Each figure is sized to its content: its height grows with its rows.

One visual channel means one thing on the whole page: **colour = strategy** (the same colour
for ``ddp`` in every figure and in the decision view), **filled / solid = the newest run,
hollow / dashed = the first run** (the reference the comparisons are made against); what a
figure breaks down further (phases) is named in its legend.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import markupsafe
import matplotlib
import matplotlib.colors
import matplotlib.ticker
import matplotlib.transforms
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from dpbench.schema import StrategyName

__all__ = [
    "Image",
    "Part",
    "Table",
    "RUN_ALPHAS",
    "case_order",
    "category_labels",
    "finite",
    "numeric",
    "panels",
    "few_ticks",
    "plain_log_ticks",
    "row_heights",
    "run_colors",
    "run_offsets",
    "strategy_color",
    "strategy_legend",
    "svg",
    "title",
    "two_runs",
    "hbars",
    "hlines",
]

MAX_HEIGHT_IN = 120.0  # beyond this a PNG stops being an image one scrolls through
CHAR_WIDTH_IN = 0.075  # a 10 pt DejaVu Sans character, on average: room for the tick labels


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    sortable: bool = True  # click-to-sort headers and, when long, a text filter
    classes: list[str] | None = None  # a CSS class per row (the gate's verdicts)


@dataclass(kw_only=True)
class Image:
    title: str
    data: str  # base64 of the file
    mime: str = "image/svg+xml"

    @property
    def uri(self) -> markupsafe.Markup:
        # Markup: base64 and a fixed mime type hold nothing to escape, and escaping a page's
        # worth of image data is wasted work for the autoescaping templates.
        return markupsafe.Markup(f"data:{self.mime};base64,{self.data}")


@dataclass(kw_only=True)
class Part:
    """One view of one suite (throughput, step times, …): its figures, the numbers behind them."""

    key: str
    title: str
    description: str
    images: list[Image] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    note: str | None = None


def svg(fig: Figure, title_text: str) -> Image:
    """The figure as SVG with its text as text (not glyph paths); no date, so the same data gives the same bytes."""
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "dpbench"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return Image(title=title_text, data=base64.b64encode(buf.getvalue()).decode("ascii"), mime="image/svg+xml")


def panels(
    heights: Sequence[float],
    *,
    labels: Iterable[str] = (),
    width: float = 11.0,
    right: float = 0.3,
    cols: int = 1,
    gap: float = 0.8,
) -> tuple[Figure, list[list[Axes]]]:
    """Stacked panels, panel i ``heights[i]`` inches of plot, with room on the left for ``labels``
    (the y tick labels) and ``right`` inches on the right (an outside legend). Rows of axes."""
    heights = [max(0.6, h) for h in heights] or [1.0]
    top, bottom = 0.4, 0.6
    total = sum(heights) + gap * (len(heights) - 1) + top + bottom
    if total > MAX_HEIGHT_IN:  # squeeze the plots, never drop a panel
        scale = (MAX_HEIGHT_IN - top - bottom - gap * (len(heights) - 1)) / sum(heights)
        heights, total = [h * max(scale, 0.05) for h in heights], MAX_HEIGHT_IN
    longest = max((len(str(label)) for label in labels), default=4)
    left = min(0.6 * width, 0.35 + CHAR_WIDTH_IN * longest)
    fig = Figure(figsize=(width, total))
    grid = fig.add_gridspec(
        len(heights),
        cols,
        height_ratios=heights,
        left=left / width,
        right=1 - right / width,
        top=1 - top / total,
        bottom=bottom / total,
        hspace=gap / (sum(heights) / len(heights)),
        wspace=0.25,
    )
    axes = [[fig.add_subplot(grid[i, j]) for j in range(cols)] for i in range(len(heights))]
    for row in axes:
        for ax in row:
            few_ticks(ax)  # a later set_xscale("log") puts log locators back (plain_log_ticks)
    return fig, axes


def row_heights(counts: Iterable[int], *, per_row: float) -> list[float]:
    """Each panel as tall as its rows, so a one-case panel is not squashed by a forty-case one."""
    return [0.3 + per_row * max(1, n) for n in counts]


def finite(values: pd.Series) -> pd.Series:
    values = values.astype(float)
    return values.where(values.abs() < 1e300)  # beyond this, axis arithmetic overflows to inf


def numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as floats; anything not a finite number (text, lists, ±inf) becomes NaN."""
    if column not in frame:
        return pd.Series(math.nan, index=frame.index, dtype=float)
    return finite(pd.to_numeric(frame[column], errors="coerce"))


def case_order(frame: pd.DataFrame) -> list[str]:
    """The cases (``case``: the label inside its suite) in order of first appearance, every run's included."""
    return list(dict.fromkeys(frame["case"].astype(str)))


# A fixed colour per known strategy, so ddp is the same blue in every figure of every report: one
# per schema.StrategyName member, in its order (single, dp, torch-dp, ddp, manual, allreduce, fsdp,
# zero); a member past them takes the next of _MORE, as an unknown name does.
# Red and green are left out: the decision view uses them for slower / regressed and improved.
_KNOWN_COLOURS = ("#7f7f7f", "#ff7f0e", "#8c564b", "#1f77b4", "#9467bd", "#17becf", "#e377c2", "#bcbd22")
_STRATEGY_COLOURS = dict(zip((name.value for name in StrategyName), _KNOWN_COLOURS, strict=False))
_MORE = ["#393b79", "#8c6d31", "#7b4173", "#637939", "#5254a3", "#843c39"]  # unknown names, in order seen


def strategy_color(strategy: object) -> tuple:
    name = str(strategy) if isinstance(strategy, str) and strategy else "?"
    if name not in _STRATEGY_COLOURS:
        _STRATEGY_COLOURS[name] = _MORE[(len(_STRATEGY_COLOURS) - len(_KNOWN_COLOURS)) % len(_MORE)]
    return matplotlib.colors.to_rgba(_STRATEGY_COLOURS[name])


def strategy_legend(ax: Axes, strategies: Iterable[object], runs: Sequence[str], *, lines: bool = False) -> None:
    """One legend outside the panel: a colour per strategy, then what filled / hollow means."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    names = [s for s in dict.fromkeys(str(s) for s in strategies)]
    if lines:
        handles = [Line2D([], [], color=strategy_color(n), marker="o") for n in names]
    else:
        handles = [Patch(color=strategy_color(n)) for n in names]
    labels = list(names)
    if len(runs) > 1:
        first, last = two_runs(runs)
        if lines:
            handles += [
                Line2D([], [], color="dimgray", marker="o"),
                Line2D([], [], color="dimgray", linestyle="--", marker="o", markerfacecolor="white"),
            ]
        else:
            handles += [Patch(facecolor="dimgray"), Patch(facecolor="white", edgecolor="dimgray")]
        labels += [f"{last} (newest)", f"{first} (first)"]
    ax.legend(
        handles,
        labels,
        title="strategy" + (" · run" if len(runs) > 1 else ""),
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize="small",
        title_fontsize="small",
    )


def hbars(
    ax: Axes,
    ys: Sequence[float],
    widths: Sequence[float],
    *,
    height: float,
    left: Sequence[float] | float = 0.0,
    color=None,
    edgecolor=None,
    linewidth: float = 0.0,
    alpha: float = 1.0,
) -> None:
    """Horizontal bars as one PolyCollection: ``barh`` makes a Rectangle artist per bar and updates
    the axis limits bar by bar, which made bar figures of a few hundred bars the report's slowest part."""
    from matplotlib.collections import PolyCollection

    ys, widths = [float(y) for y in ys], [float(w) for w in widths]
    lefts = [float(left)] * len(ys) if isinstance(left, (int, float)) else [float(v) for v in left]
    keep = [i for i, w in enumerate(widths) if w == w and w != 0]  # no NaN, no empty bars
    if not keep:
        return
    half = height / 2
    verts = [
        [
            (lefts[i], ys[i] - half),
            (lefts[i] + widths[i], ys[i] - half),
            (lefts[i] + widths[i], ys[i] + half),
            (lefts[i], ys[i] + half),
        ]
        for i in keep
    ]

    def pick(value):
        return [value[i] for i in keep] if isinstance(value, list) else value

    ax.add_collection(
        PolyCollection(
            verts, facecolors=pick(color), edgecolors=pick(edgecolor) or "face", linewidths=linewidth, alpha=alpha
        )
    )
    xs = [lefts[i] for i in keep] + [lefts[i] + widths[i] for i in keep]
    ax.update_datalim([(min(xs), min(ys[i] for i in keep) - half), (max(xs), max(ys[i] for i in keep) + half)])
    ax.autoscale_view()


def hlines(
    ax: Axes,
    ys: Sequence[float],
    lo: Sequence[float],
    hi: Sequence[float],
    *,
    color,
    linewidth: float = 0.8,
    caps: float = 0.0,
) -> None:
    """Error bars (from ``lo`` to ``hi`` at each ``y``, optional caps) as one LineCollection."""
    from matplotlib.collections import LineCollection

    segments, colors = [], []
    for i, (y, a, b) in enumerate(zip(ys, lo, hi)):
        if not (a == a and b == b):
            continue
        c = color[i] if isinstance(color, list) else color
        segments.append([(a, y), (b, y)])
        colors.append(c)
        if caps:
            segments += [[(a, y - caps), (a, y + caps)], [(b, y - caps), (b, y + caps)]]
            colors += [c, c]
    if segments:
        ax.add_collection(LineCollection(segments, colors=colors, linewidths=linewidth))


def two_runs(runs: Sequence[str]) -> tuple[str, str]:
    """The runs a figure draws: the first (the comparisons' reference) and the newest. Runs in
    between are in the tables under each figure; drawing all of them would make every row
    taller with each run and the page slower with each run."""
    return str(runs[0]), str(runs[-1])


def run_colors(runs: list[str]) -> dict[str, tuple]:
    palette = matplotlib.colormaps["tab10"]
    return {run: palette(i % 10) for i, run in enumerate(runs)}


# Where colours already mean something (phases, devices), runs are told apart by shade: hatching
# would be clearer but costs Agg more than the rest of the figure.
RUN_ALPHAS = [1.0, 0.5, 0.3, 0.75, 0.4, 0.6, 0.2]


def title(ax: Axes, text: str, *, size: str = "medium") -> None:
    # A fixed y: matplotlib otherwise measures every tick label to place a title above them.
    ax.set_title(text, fontsize=size, y=1.0, pad=4)


def run_offsets(runs: list[str], height: float = 0.8) -> tuple[dict[str, float], float]:
    """Where each run's bar sits inside a case's row, and the bar's thickness."""
    n = max(1, len(runs))
    thickness = height / n
    return {run: -height / 2 + thickness * (i + 0.5) for i, run in enumerate(runs)}, thickness


def category_labels(ax: Axes, labels: Sequence[str]) -> None:
    """Row labels (top to bottom) left of the panel as plain texts, rows ``0 … n-1``: a matplotlib
    tick is five artists (two marks, a grid line, two labels), and with a row per configuration
    the ticks cost a third of the report's time."""
    transform = matplotlib.transforms.blended_transform_factory(ax.transAxes, ax.transData)
    ax.set_yticks([])
    for i, label in enumerate(labels):
        ax.text(-0.012, i, str(label), transform=transform, ha="right", va="center", fontsize="medium")
    ax.set_ylim(len(labels) - 0.5, -0.5)


def plain_log_ticks(axis) -> None:
    # text.parse_math is off (see build_sections), so the default "$10^{1}$" labels would show raw.
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    # No minor ticks: unlabelled, they were 16 of the 19 tick objects of each log panel, and a
    # tick (marks, grid line, labels) is what matplotlib spends most of a figure's time on.
    axis.set_minor_locator(matplotlib.ticker.NullLocator())
    # Labelled majors only where a decade alone gives fewer than three.
    axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0), numticks=6))


def few_ticks(ax: Axes, nbins: int = 5) -> None:
    """At most ``nbins`` + 1 labelled ticks per linear axis (matplotlib's default is up to 9): a
    grid as readable, in about half the tick objects (see :func:`plain_log_ticks`)."""
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10]))
