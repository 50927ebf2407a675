"""Drawing a timeline of measured work: which lane (stream, thread) ran what, and when.

A :class:`Span` is one piece of work on one lane, timed in seconds from a common
origin (CUDA events recorded on each stream, or a host clock);
:func:`plot_timeline` draws spans as bars, one row per lane, one colour per label.

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuguide.plotting import COLORS, label_device, style_axes

if TYPE_CHECKING:
    import torch
    from matplotlib.axes import Axes

    from gpuguide.device import DeviceInfo

__all__ = ["Span", "plot_timeline"]

_BAR_HEIGHT = 0.7  # a bar's share of the distance between two lanes
_LEGEND_ROOM = 0.5  # room above the first lane for the legend, in lanes


@dataclass(frozen=True)
class Span:
    """One piece of work on one lane of a timeline.

    ``lane`` is where it ran (a stream, a thread: one row per lane), ``label``
    what it was (``"H2D"``: one colour per label), ``start_s`` and ``end_s`` its
    times in seconds from the origin. Raises ``ValueError`` for an empty lane or
    label, a time that is not finite, or an end before the start.
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


def plot_timeline(
    ax: Axes, spans: Sequence[Span], *, title: str,
    device: torch.device | str | DeviceInfo | None = None,
) -> None:  # fmt: skip
    """Draw spans as horizontal bars in ms: one row per lane, one colour per label.

    Lanes are rows top to bottom, and labels take the palette's colours, in order
    of first appearance: two timelines with the same labels in the same order
    share colours. ``title`` and ``device`` are as for
    :func:`gpuguide.plotting.plot_sweep`. Raises ``ValueError`` for no spans.
    """
    spans = list(spans)
    if not spans:
        msg = "spans must hold at least one span, got none"
        raise ValueError(msg)
    rows = list(dict.fromkeys(s.lane for s in spans))
    labels = list(dict.fromkeys(s.label for s in spans))
    style_axes(ax)
    for i, label in enumerate(labels):
        first = rows.index(next(s.lane for s in spans if s.label == label))
        for row, lane in enumerate(rows):
            bars = [(s.start_s * 1e3, s.duration_s * 1e3) for s in spans
                    if s.lane == lane and s.label == label]  # fmt: skip
            if bars:
                ax.broken_barh(bars, (row - _BAR_HEIGHT / 2, _BAR_HEIGHT),
                               facecolors=COLORS[i % len(COLORS)], edgecolors="white",
                               linewidth=0.5, label=label if row == first else None)  # fmt: skip
    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(len(rows) - 0.5, -0.5 - _LEGEND_ROOM)
    ax.set_xlim(left=min(0.0, min(s.start_s for s in spans) * 1e3))
    ax.grid(False, axis="y")
    ax.set_xlabel("time (ms)")
    ax.set_title(title)
    ax.legend(loc="upper right", ncols=min(len(labels), 4))
    label_device(ax.figure, device)
