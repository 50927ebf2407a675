"""Timelines of measured work: which lane (stream, thread) ran what, and when.

A :class:`Span` is one piece of work on one lane, with start and end times in
seconds from a common origin. :func:`record_timeline` collects spans: on CUDA it
brackets each piece of work with two timing events recorded on the current stream
(``torch.Event`` where torch has it, else ``torch.cuda.Event``) and reads them as
``origin.elapsed_time(event)``, where ``origin`` is an event recorded when the
recording starts; elsewhere it synchronizes and reads a host clock.
:func:`synchronize` waits for a device (``torch.accelerator.synchronize`` where
torch has it, else the device module's own). :func:`plot_timeline` draws spans
as horizontal bars, one row per lane, one colour per label, in the guide's
style; :func:`busy_s` and :func:`overlap_s` say how long lanes were busy, and
busy at the same time. :func:`stage_overlap` says, from timed runs, how much
of the shorter of two stages a pipeline hid, with the spread.

Examples
--------
>>> import matplotlib.pyplot as plt
>>> from gpuguide.chapters.timeline import Span, overlap_s, plot_timeline
>>> spans = [
...     Span("copy stream", "H2D", 0.000, 0.002),
...     Span("compute stream", "compute", 0.002, 0.005),
...     Span("copy stream", "H2D", 0.002, 0.004),
... ]
>>> overlap_s(spans, "copy stream", "compute stream")
0.002
>>> fig, ax = plt.subplots()
>>> plot_timeline(ax, spans, title="Copies hide behind compute", device="cpu")
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuguide.device import DeviceInfo, as_device
from gpuguide.plotting import COLORS, label_device, require_unit, style_axes
from gpuguide.timing import Measurement

if TYPE_CHECKING:
    import torch
    from matplotlib.axes import Axes

__all__ = [
    "NO_OVERLAP",
    "Span",
    "StageOverlap",
    "TimelineRecorder",
    "busy_s",
    "overlap_s",
    "plot_timeline",
    "record_timeline",
    "stage_overlap",
    "synchronize",
]

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


class TimelineRecorder:
    """Records spans of work on a device; made by :func:`record_timeline`.

    Use it as a context manager: entering synchronizes and marks the origin,
    :meth:`span` brackets each piece of work, and leaving synchronizes and
    fills :attr:`spans`.

    Parameters
    ----------
    device : str or torch.device or None
        ``"cuda"`` (CUDA events on the current stream), ``"cpu"`` or
        ``"mps"`` (synchronize, then a host clock); None picks the default.
    enabled : bool
        False makes :meth:`span` do nothing, so a function can take a recorder
        and be timed without one: pass a disabled recorder.
    clock, event_factory, synchronize : callable, optional
        Stand-ins for ``time.perf_counter``, the timing event
        (``torch.Event`` on the device, or ``torch.cuda.Event``; called as
        ``event_factory(enable_timing=True)``) and :func:`synchronize` for the
        device (tests pass fakes).

    Attributes
    ----------
    spans : list of Span
        The recorded spans, in the order they were issued; filled on leaving
        the ``with`` block.
    """

    def __init__(
        self,
        device: str | torch.device | None = None,
        *,
        enabled: bool = True,
        clock: Callable[[], float] | None = None,
        event_factory: Callable[..., Any] | None = None,
        synchronize: Callable[[], None] | None = None,
    ) -> None:
        self.device = as_device(device)
        self.enabled = enabled
        self.spans: list[Span] = []
        self._cuda = self.device.type == "cuda"
        self._clock = clock or time.perf_counter
        self._event_factory = event_factory
        self._synchronize = synchronize
        self._origin: Any = None
        self._marks: list[tuple[str, str, Any, Any]] = []

    def __repr__(self) -> str:
        state = "" if self.enabled else ", disabled"
        return f"<TimelineRecorder on {self.device}{state}: {len(self.spans)} spans>"

    def _sync(self) -> None:
        if self._synchronize is None:
            self._synchronize = functools.partial(synchronize, self.device)
        self._synchronize()

    def _now(self) -> Any:
        """A timing event recorded on the current stream, or the host clock."""
        if not self._cuda:
            self._sync()
            return self._clock()
        if self._event_factory is None:
            self._event_factory = _timing_event_factory(self.device)
        event = self._event_factory(enable_timing=True)
        event.record()
        return event

    def _since_origin_s(self, mark: Any) -> float:
        if self._cuda:
            return float(self._origin.elapsed_time(mark)) / 1e3
        return float(mark - self._origin)

    def __enter__(self) -> TimelineRecorder:
        self.spans, self._marks = [], []
        if self.enabled:
            self._sync()
            self._origin = self._now()
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if not self.enabled or self._origin is None or exc_type is not None:
            self._marks, self._origin = [], None
            return
        self._sync()
        self.spans = [
            Span(lane, label, self._since_origin_s(s), self._since_origin_s(e))
            for lane, label, s, e in self._marks
        ]
        self._marks, self._origin = [], None

    @contextmanager
    def span(self, lane: str, label: str) -> Iterator[None]:
        """Mark the work issued inside the ``with`` block as one span.

        On CUDA the two events go on the current stream, so enter
        ``torch.cuda.stream(s)`` first to time work on stream ``s``; on the
        host the device is synchronized before each clock reading.

        Parameters
        ----------
        lane, label : str
            As in :class:`Span`.

        Raises
        ------
        RuntimeError
            If the recorder is enabled but not inside its ``with`` block.
        """
        if not self.enabled:
            yield
            return
        if self._origin is None:
            msg = "span() must be called inside `with recorder:`, got a recorder not entered"
            raise RuntimeError(msg)
        start = self._now()
        yield
        self._marks.append((lane, label, start, self._now()))


def synchronize(device: str | torch.device | None = None) -> None:
    """Wait until the device has finished the work queued on it.

    ``torch.accelerator.synchronize(device)`` where torch has it (2.6 and
    later) and the device is an accelerator, else the device module's own
    ``synchronize`` (``torch.cuda``, ``torch.mps``; ``torch.cpu``'s does
    nothing, as CPU work is done when its call returns).

    Parameters
    ----------
    device : str or torch.device or None
        The device; None picks the default device.
    """
    import torch

    device = as_device(device)
    accelerator = getattr(torch, "accelerator", None)
    accelerator_sync = getattr(accelerator, "synchronize", None)
    if device.type != "cpu" and accelerator_sync is not None:
        accelerator_sync(device)
    else:
        getattr(torch, device.type).synchronize()


def _timing_event_factory(device: torch.device) -> Callable[..., Any]:
    """``torch.Event`` on ``device`` where torch has it, else ``torch.cuda.Event``.

    Both record on the current stream when ``record()`` gets no stream.
    """
    import torch

    event = getattr(torch, "Event", None)
    if event is not None:
        return functools.partial(event, device=device)
    return torch.cuda.Event


def record_timeline(
    device: str | torch.device | None = None, *, enabled: bool = True
) -> TimelineRecorder:
    """Record which work ran when, as :class:`Span` objects.

    Parameters
    ----------
    device : str or torch.device or None
        The device the work runs on; None picks the default device.
    enabled : bool
        False gives a recorder whose :meth:`TimelineRecorder.span` does
        nothing, for the timed runs of a function that takes a recorder.

    Returns
    -------
    TimelineRecorder
        A context manager; its ``spans`` are filled when the block ends.

    Examples
    --------
    >>> import torch
    >>> with record_timeline("cpu") as rec:
    ...     with rec.span("CPU", "matmul"):
    ...         _ = torch.ones(64, 64) @ torch.ones(64, 64)
    >>> [(s.lane, s.label) for s in rec.spans]
    [('CPU', 'matmul')]
    """
    return TimelineRecorder(device, enabled=enabled)


def _merged(spans: Iterable[Span]) -> list[tuple[float, float]]:
    """The union of the spans' intervals as sorted, disjoint (start, end) pairs."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted((s.start_s, s.end_s) for s in spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _in_lane(spans: Iterable[Span], lane: str | None) -> list[Span]:
    return [s for s in spans if lane is None or s.lane == lane]


def busy_s(spans: Iterable[Span], lane: str | None = None) -> float:
    """Time during which a lane was doing something, in seconds.

    Overlapping spans of the lane count once (the length of their union).

    Parameters
    ----------
    spans : iterable of Span
        The timeline.
    lane : str, optional
        The lane to look at; None counts the spans of every lane together.

    Returns
    -------
    float
        Seconds; 0 when the lane has no spans.
    """
    return sum(end - start for start, end in _merged(_in_lane(spans, lane)))


def overlap_s(spans: Iterable[Span], lane_a: str, lane_b: str) -> float:
    """Time during which two lanes were both busy, in seconds.

    For a copy stream and a compute stream this is how much copying the
    pipeline hid behind computing (and the other way round).

    Parameters
    ----------
    spans : iterable of Span
        The timeline.
    lane_a, lane_b : str
        The two lanes.

    Returns
    -------
    float
        Seconds; 0 when either lane has no spans or they never run together.
    """
    spans = list(spans)
    a, b = _merged(_in_lane(spans, lane_a)), _merged(_in_lane(spans, lane_b))
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(end - start, 0.0)
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return total


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


# --------------------------------------------------------------------------------------
# Overlap from timed runs
# --------------------------------------------------------------------------------------

#: The verdict of :class:`StageOverlap` when its range holds 0.
NO_OVERLAP = "no measurable overlap"


@dataclass(frozen=True)
class StageOverlap:
    """How much of the shorter of two stages a version hid; by :func:`stage_overlap`.

    The fraction is ``(first + second - version) / min(first, second)`` on the
    medians: 0 when the version took as long as its stages one after the
    other, 1 when it hid the shorter stage completely, which is the most that
    running the two stages at the same time can hide, and below 0 when it took
    longer than its stages in turn. A fraction above 1 is no overlap: the
    stages then ran faster inside the version than alone.

    Attributes
    ----------
    version : Measurement
        The version (a pipeline) whose overlap it is.
    stages : tuple of two Measurement
        Its two stages, each timed alone.
    fraction : float
        The fraction on the medians (dimensionless; :attr:`short` prints it in
        percent).
    low, high : float
        The fraction over the measurements' interquartile ranges: the
        stages' first quartiles and the version's third give ``low``, the
        other way round ``high``, each divided by the shorter stage's quartile
        that makes the range widest.
    """

    version: Measurement
    stages: tuple[Measurement, Measurement]
    fraction: float
    low: float
    high: float

    @property
    def verdict(self) -> str:
        """What the range shows.

        ``"overlap"`` (the whole range between 0 and 1, or straddling 1),
        ``"slower than its stages in turn"`` (the whole range below 0),
        ``"more than the shorter stage"`` (the whole range above 1) or
        :data:`NO_OVERLAP` (the range holds 0).
        """
        if self.low > 1.0:
            return "more than the shorter stage"
        if self.low > 0.0:
            return "overlap"
        if self.high < 0.0:
            return "slower than its stages in turn"
        return NO_OVERLAP

    @property
    def percent(self) -> tuple[float, tuple[float, float]]:
        """The fraction and its range in percent: ``(93.4, (92.1, 94.6))``."""
        return 100 * self.fraction, (100 * self.low, 100 * self.high)

    @property
    def short(self) -> str:
        """The fraction in percent with its range: ``"93% (92% to 94%)"``."""
        return f"{self.fraction:.0%} ({self.low:.0%} to {self.high:.0%})"

    def __str__(self) -> str:
        name, verdict = self.version.label, self.verdict
        if verdict == "overlap":
            return f"{name} hid {self.short} of the shorter stage"
        if verdict == "slower than its stages in turn":
            return (
                f"{name} took {-self.fraction:.0%} ({-self.high:.0%} to "
                f"{-self.low:.0%}) of the shorter stage longer than its stages in turn"
            )
        if verdict == NO_OVERLAP:
            return f"{NO_OVERLAP} in {name}: {self.short} of the shorter stage"
        return (
            f"{name} saved {self.short} of the shorter stage, more than the stage "
            "itself: its stages ran faster inside it than alone, which is no overlap"
        )


def stage_overlap(
    version: Measurement, stages: tuple[Measurement, Measurement]
) -> StageOverlap:
    """How much of the shorter of two stages ``version`` hid, with the spread.

    Time the stages alone and the version in the same interleaved rounds
    (:func:`gpuguide.verdicts.interleave`): a fraction is a small difference
    of larger times, so a drift of the machine between separate measurements
    would show up in it as overlap, or as its opposite.

    Parameters
    ----------
    version : Measurement
        The version, e.g. a pipeline of copies and compute.
    stages : tuple of two Measurement
        The stages it runs, each timed alone (all copies, all compute).

    Returns
    -------
    StageOverlap
        ``str()`` of it is a sentence for the page.

    Raises
    ------
    TypeError
        If an argument is not a :class:`~gpuguide.timing.Measurement`.
    ValueError
        For a number of stages other than two, or a stage whose first
        quartile is 0 s (nothing to divide by).

    Examples
    --------
    >>> from gpuguide.timing import Measurement
    >>> copies = Measurement("copies", (9.9, 10.0, 10.1), "cuda:0", "cuda-events")
    >>> compute = Measurement("compute", (7.9, 8.0, 8.1), "cuda:0", "cuda-events")
    >>> pipe = Measurement("pipelined", (10.4, 10.5, 10.6), "cuda:0", "cuda-events")
    >>> str(stage_overlap(pipe, (copies, compute)))
    'pipelined hid 94% (91% to 96%) of the shorter stage'
    """
    stages = tuple(stages)  # type: ignore[assignment]
    if len(stages) != 2:
        msg = f"stages must be two measurements, got {len(stages)}"
        raise ValueError(msg)
    for value in (version, *stages):
        if not isinstance(value, Measurement):
            msg = f"version and stages must be Measurements, got {type(value).__name__}"
            raise TypeError(msg)
    first, second = stages
    if min(first.q25_s, second.q25_s) <= 0:
        msg = "a stage took 0 s (below the clock's resolution): nothing to divide by"
        raise ValueError(msg)
    shorter = min(first.median_s, second.median_s)
    shorter_low = min(first.q25_s, second.q25_s)
    shorter_high = min(first.q75_s, second.q75_s)
    saved = first.median_s + second.median_s - version.median_s
    saved_low = first.q25_s + second.q25_s - version.q75_s
    saved_high = first.q75_s + second.q75_s - version.q25_s
    # saved / shorter falls with a larger shorter stage when saved >= 0, else rises.
    low = saved_low / (shorter_high if saved_low >= 0 else shorter_low)
    high = saved_high / (shorter_low if saved_high >= 0 else shorter_high)
    return StageOverlap(version, (first, second), saved / shorter, low, high)
