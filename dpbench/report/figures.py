"""What the report's views are made of: tables, images, parts; and the figure helpers they share.

Figures are plain ``matplotlib.figure.Figure`` objects saved straight to PNG (Agg), never shown
through pyplot: the report renders headless on CI, and importing it leaves a notebook's
backend untouched. Each figure is sized to its content: its height grows with its rows.
"""
from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import matplotlib
import matplotlib.ticker
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["Image", "Part", "Table", "RUN_ALPHAS", "case_order", "finite", "numeric", "panels", "plain_log_ticks",
           "png", "row_heights", "run_colors", "run_offsets", "title"]

MAX_HEIGHT_IN = 120.0  # beyond this a PNG stops being an image one scrolls through
CHAR_WIDTH_IN = 0.075  # a 10 pt DejaVu Sans character, on average: room for the tick labels


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]


@dataclass(kw_only=True)
class Image:
    title: str
    png_b64: str


@dataclass(kw_only=True)
class Part:
    """One view of one suite (throughput, step times, …): its figures, the numbers behind them."""

    key: str
    title: str
    description: str
    images: list[Image] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    note: str | None = None


def png(fig: Figure) -> str:
    """The figure as base64 PNG text for a ``data:`` URI."""
    buf = io.BytesIO()
    # No bbox_inches="tight": :func:`panels` leaves the margins its labels need, and a tight box
    # would draw every figure twice (text layout dominates the report's rendering time).
    fig.savefig(buf, format="png", dpi=72, pil_kwargs={"compress_level": 1})  # speed over bytes
    return base64.b64encode(buf.getvalue()).decode("ascii")


def panels(heights: Sequence[float], *, labels: Iterable[str] = (), width: float = 10.0, right: float = 0.3,
           cols: int = 1, gap: float = 0.8) -> tuple[Figure, list[list[Axes]]]:
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
    grid = fig.add_gridspec(len(heights), cols, height_ratios=heights, left=left / width, right=1 - right / width,
                            top=1 - top / total, bottom=bottom / total, hspace=gap / (sum(heights) / len(heights)),
                            wspace=0.25)
    return fig, [[fig.add_subplot(grid[i, j]) for j in range(cols)] for i in range(len(heights))]


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


def plain_log_ticks(axis) -> None:
    # text.parse_math is off (see build_sections), so the default "$10^{1}$" labels would show raw.
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
