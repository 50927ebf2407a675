"""Drawing a timeline of measured work: which lane (stream, thread) ran what, and when.

A :class:`Span` is one piece of work on one lane, with start and end times in
seconds from a common origin (a page reads them from CUDA events recorded on
each stream, or from a host clock). :func:`plot_timeline` draws spans as
horizontal bars, one row per lane, one colour per label, in the guide's style.

Examples
--------
>>> import matplotlib.pyplot as plt
>>> from gpuguide.chapters.timeline import Span, plot_timeline
>>> spans = [
...     Span("copy stream", "H2D", 0.000, 0.002),
...     Span("compute stream", "compute", 0.002, 0.005),
...     Span("copy stream", "H2D", 0.002, 0.004),
... ]
>>> fig, ax = plt.subplots()
>>> plot_timeline(ax, spans, title="Copies hide behind compute", device="cpu")
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuguide.plotting import COLORS, label_device, require_unit, style_axes

if TYPE_CHECKING:
    import torch
    from matplotlib.axes import Axes

    from gpuguide.device import DeviceInfo

__all__ = ["Span", "plot_timeline"]

#: Height of a bar, as a share of the distance between two lanes.
_BAR_HEIGHT = 0.7
#: Space above the first lane for the legend, in lanes.
_LEGEND_ROOM = 0.5


@dataclass(frozen=True)
class Span:
    """One piece of work on one lane of a timeline.

    Attributes
    ----------
    lane : str
        Where it ran: a stream (``"copy stream"``) or a thread. One row of the
        plot per lane.
    label : str
        What it was (``"H2D"``, ``"compute"``): one colour per label.
    start_s, end_s : float
        Start and end, in seconds from the timeline's origin
        (``end_s >= start_s``).

    Raises
    ------
    ValueError
        For an empty lane or label, a time that is not finite, or an end
        before the start.
    """

    lane: str
    label: str
    start_s: float
    end_s: float

    def __post_init__(self) -> None:
        for name in ("lane", "label"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                msg = f"{name} must be a non-empty str, got {value!r}"
                raise ValueError(msg)
        start, end = float(self.start_s), float(self.end_s)
        if not (math.isfinite(start) and math.isfinite(end)):
            msg = f"start_s and end_s must be finite, got {start!r}, {end!r}"
            raise ValueError(msg)
        if end < start:
            msg = f"end_s must be >= start_s ({start}), got {end}"
            raise ValueError(msg)
        object.__setattr__(self, "start_s", start)
        object.__setattr__(self, "end_s", end)

    @property
    def duration_s(self) -> float:
        """``end_s - start_s``, in seconds."""
        return self.end_s - self.start_s


def _first_seen(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def plot_timeline(
    ax: Axes,
    spans: Sequence[Span],
    *,
    title: str,
    device: torch.device | str | DeviceInfo | None = None,
    xlabel: str = "time (ms)",
    lanes: Sequence[str] | None = None,
) -> None:
    """Draw spans as horizontal bars: one row per lane, one colour per label.

    Times are drawn in milliseconds from the origin. The first lane is the
    top row. Each label gets the next colour of the guide's palette in order
    of first appearance, so two timelines whose spans carry the same labels in
    the same order share colours; the legend lists the labels.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    spans : sequence of Span
        The timeline (at least one span).
    title, device
        As for :func:`gpuguide.plotting.plot_sweep`: the finding, and the device
        named on the figure.
    xlabel : str
        Axis label with its unit in parentheses; the times are drawn in ms.
    lanes : sequence of str, optional
        The rows, top to bottom; default the lanes in order of first
        appearance. Every span's lane must be among them.

    Raises
    ------
    ValueError
        For no spans, an ``xlabel`` without a unit, or a span whose lane is
        not in ``lanes``.
    """
    require_unit(xlabel)
    spans = list(spans)
    if not spans:
        msg = "spans must hold at least one span, got none"
        raise ValueError(msg)
    rows = _first_seen(s.lane for s in spans) if lanes is None else list(lanes)
    missing = sorted({s.lane for s in spans} - set(rows))
    if missing:
        msg = f"lanes must hold every span's lane, {missing} not in {rows}"
        raise ValueError(msg)
    labels = _first_seen(s.label for s in spans)
    colors = {label: COLORS[i % len(COLORS)] for i, label in enumerate(labels)}
    style_axes(ax)
    for label in labels:
        for row, lane in enumerate(rows):
            bars = [
                (s.start_s * 1e3, s.duration_s * 1e3)
                for s in spans
                if s.lane == lane and s.label == label
            ]
            if not bars:
                continue
            ax.broken_barh(
                bars,
                (row - _BAR_HEIGHT / 2, _BAR_HEIGHT),
                facecolors=colors[label],
                edgecolors="white",
                linewidth=0.5,
                label=label if row == rows.index(_first_lane(spans, label)) else None,
            )
    ax.set_yticks(range(len(rows)), rows)
    # Half a lane of headroom above the first row keeps the legend off the bars.
    ax.set_ylim(len(rows) - 0.5, -0.5 - _LEGEND_ROOM)
    ax.set_xlim(left=min(0.0, min(s.start_s for s in spans) * 1e3))
    ax.grid(False, axis="y")
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(loc="upper right", ncols=min(len(labels), 4))
    label_device(ax.figure, device)


def _first_lane(spans: Sequence[Span], label: str) -> str:
    return next(s.lane for s in spans if s.label == label)
