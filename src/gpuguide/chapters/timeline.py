"""A timeline of measured work: which lane (stream, thread) ran what, and when.

:class:`Marks` records spans of work (CUDA events on each stream, or a host clock);
its spans say how much of one lane's work ran beside another's, and draw
themselves. :func:`synchronizes` says whether a call makes the host wait for the
GPU's queue.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuguide.device import as_device
from gpuguide.plotting import COLORS, label_device, style_axes
from gpuguide.quiet import warning_text

if TYPE_CHECKING:
    import torch
    from matplotlib.axes import Axes

__all__ = ["Marks", "synchronizes"]

_BAR_HEIGHT = 0.7  # a bar's share of the distance between two lanes
_LEGEND_ROOM = 0.5  # room above the first lane for the legend, in lanes


@dataclass(frozen=True)
class _Span:
    """One piece of work: its ``lane`` (a stream, a thread), ``label`` and times in
    seconds from the origin."""

    lane: str
    label: str
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        """``end_s - start_s``, in seconds."""
        return self.end_s - self.start_s


class Marks:
    """Spans of work, each marked with :meth:`span` on the stream that runs it.

    On CUDA a mark is an event recorded on the current stream: it completes when the
    work queued on that stream before it is done, so two marks bracket the work as
    the GPU ran it, whatever the host did meanwhile. Elsewhere a mark synchronizes
    and reads the host clock. Times count from a mark made when ``Marks`` is made.
    """

    def __init__(self, device: str | torch.device) -> None:
        import torch

        self.cuda = as_device(device).type == "cuda"
        self.sync = getattr(torch, as_device(device).type).synchronize
        self.marks: list[tuple[str, str, Any, Any]] = []
        self.sync()
        self.origin = self.now()

    def now(self) -> Any:
        import torch

        if not self.cuda:
            self.sync()
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()  # on the current stream
        return event

    @contextmanager
    def span(self, lane: str, label: str) -> Iterator[None]:
        start = self.now()
        yield
        self.marks.append((lane, label, start, self.now()))

    def spans(self) -> _Timeline:
        """Wait for the marked work, then read each span from the origin."""
        self.sync()

        def read(mark: Any) -> float:
            if self.cuda:
                return float(self.origin.elapsed_time(mark)) / 1e3
            return float(mark - self.origin)

        return _Timeline(
            _Span(lane, label, read(s), read(e)) for lane, label, s, e in self.marks
        )


class _Timeline(list[_Span]):
    """The spans :meth:`Marks.spans` read, in the order they were marked."""

    def overlap(self, lane: str, other: str) -> float:
        """The share of ``lane``'s busy time during which ``other`` also ran (0 when
        ``lane`` did nothing)."""
        mine = [s for s in self if s.lane == lane]
        busy = sum(s.duration_s for s in mine)
        if busy <= 0:
            return 0.0
        both = sum(
            max(0.0, min(a.end_s, b.end_s) - max(a.start_s, b.start_s))
            for a in mine
            for b in self
            if b.lane == other
        )
        return both / busy

    def plot(self, ax: Axes, *, title: str) -> None:
        """Draw the spans as bars in ms: a row per lane, a colour per label, each in
        order of first appearance (timelines with the same labels share colours)."""
        if not self:
            msg = "a timeline must hold at least one span, got none"
            raise ValueError(msg)
        rows = list(dict.fromkeys(s.lane for s in self))
        labels = list(dict.fromkeys(s.label for s in self))
        style_axes(ax)
        for i, label in enumerate(labels):
            legend: str | None = label  # on the label's first row of bars only
            for row, lane in enumerate(rows):
                bars = [
                    (s.start_s * 1e3, s.duration_s * 1e3)
                    for s in self
                    if s.lane == lane and s.label == label
                ]
                if bars:
                    ax.broken_barh(
                        bars,
                        (row - _BAR_HEIGHT / 2, _BAR_HEIGHT),
                        facecolors=COLORS[i % len(COLORS)],
                        edgecolors="white",
                        linewidth=0.5,
                        label=legend,
                    )
                    legend = None
        ax.set_yticks(range(len(rows)), rows)
        ax.set_ylim(len(rows) - 0.5, -0.5 - _LEGEND_ROOM)
        ax.set_xlim(left=min(0.0, min(s.start_s for s in self) * 1e3))
        ax.grid(False, axis="y")
        ax.set_xlabel("time (ms)")
        ax.set_title(title)
        ax.legend(loc="upper right", ncols=min(len(labels), 4))
        label_device(ax.figure, None)


def synchronizes(fn: Callable[[], Any]) -> bool:
    """Whether ``fn()`` makes the host wait for the GPU, run after the queue drains:
    CUDA's sync debug mode warns at each operation that does (its notice that the
    mode is a prototype aside)."""
    import torch

    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return any("prototype" not in warning_text(w) for w in caught)
