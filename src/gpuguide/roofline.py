"""The roofline model: place measured operations between memory and compute limits.

An operation that performs ``flop`` floating-point operations while moving
``nbytes`` to and from memory has an *arithmetic intensity* of ``flop / nbytes``
FLOP/byte. A device cannot run it faster than either of its two roofs: the
memory roof ``intensity * peak_bytes_per_s`` (the slanted part) and the compute
roof ``peak_flops_per_s`` (the flat part). They meet at the *ridge*,
``peak_flops_per_s / peak_bytes_per_s`` FLOP/byte.

:class:`RooflinePoint` holds one measurement, :func:`classify` names the regime
that limits it (:data:`REGIMES`), and :func:`plot_roofline` draws the roofs and
the points on log-log axes in the style of :mod:`gpuguide.plotting`.

Examples
--------
>>> from gpuguide.roofline import RooflinePoint, classify
>>> add = RooflinePoint("x + y", flop=2**24, nbytes=12 * 2**24, seconds=1.0e-4)
>>> round(add.intensity, 4)
0.0833
>>> classify(add, peak_flops_per_s=67e12, peak_bytes_per_s=3.35e12)
'memory-bound'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuguide.plotting import COLORS, _style_axes, label_device, require_unit
from gpuguide.units import format_rate, format_time

if TYPE_CHECKING:
    import torch
    from matplotlib.axes import Axes

    from gpuguide.device import DeviceInfo
    from gpuguide.timing import Measurement

__all__ = [
    "OVERHEAD_FRACTION",
    "OVERHEAD_S",
    "REGIMES",
    "RooflinePoint",
    "attainable_flops_per_s",
    "classify",
    "percent_of_roof",
    "plot_roofline",
    "ridge_intensity",
]

#: The regimes :func:`classify` returns.
REGIMES: tuple[str, ...] = ("overhead-bound", "memory-bound", "compute-bound")

#: A point reaching less than this fraction of its roof ...
OVERHEAD_FRACTION = 0.25
#: ... in less than this many seconds is overhead-bound (see :func:`classify`).
OVERHEAD_S = 50e-6

#: Colour and marker of each regime on the plot (Okabe-Ito colours).
_REGIME_STYLE: dict[str, tuple[str, str]] = {
    "overhead-bound": (COLORS[3], "s"),
    "memory-bound": (COLORS[0], "o"),
    "compute-bound": (COLORS[2], "^"),
}


def _positive(name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        msg = f"{name} must be positive and finite, got {value!r}"
        raise ValueError(msg)
    return value


@dataclass(frozen=True)
class RooflinePoint:
    """One measured operation: its work, its memory traffic and its time.

    Parameters
    ----------
    label : str
        What was measured, e.g. ``"x + y, 2^24"``.
    flop : float
        Floating-point operations per call (> 0), counted analytically.
    nbytes : float
        Bytes read plus bytes written per call (> 0), counted analytically as
        the least traffic the operation needs (each operand moved once).
    seconds : float
        Time per call (> 0), usually a median.
    """

    label: str
    flop: float
    nbytes: float
    seconds: float

    def __post_init__(self) -> None:
        for name in ("flop", "nbytes", "seconds"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))

    @classmethod
    def from_measurement(
        cls, label: str, *, flop: float, nbytes: float, measurement: Measurement
    ) -> RooflinePoint:
        """A point timed by the median of a :class:`~gpuguide.timing.Measurement`."""
        return cls(label, flop, nbytes, measurement.median_s)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, in FLOP/byte: ``flop / nbytes``."""
        return self.flop / self.nbytes

    @property
    def flops_per_s(self) -> float:
        """Achieved compute rate, in FLOP/s: ``flop / seconds``."""
        return self.flop / self.seconds

    @property
    def bytes_per_s(self) -> float:
        """Achieved bandwidth, in bytes/s: ``nbytes / seconds``."""
        return self.nbytes / self.seconds

    def __str__(self) -> str:
        return (
            f"{self.label}: {format_time(self.seconds)}, "
            f"{format_rate(self.flops_per_s, 'FLOP/s')}, "
            f"{format_rate(self.bytes_per_s, 'B/s')}, "
            f"{self.intensity:.3g} FLOP/byte"
        )


def _peaks(peak_flops_per_s: float, peak_bytes_per_s: float) -> tuple[float, float]:
    return (
        _positive("peak_flops_per_s", peak_flops_per_s),
        _positive("peak_bytes_per_s", peak_bytes_per_s),
    )


def ridge_intensity(*, peak_flops_per_s: float, peak_bytes_per_s: float) -> float:
    """The intensity where the two roofs meet, in FLOP/byte.

    Parameters
    ----------
    peak_flops_per_s : float
        Compute roof, in FLOP/s (> 0).
    peak_bytes_per_s : float
        Memory bandwidth roof, in bytes/s (> 0).

    Returns
    -------
    float
        ``peak_flops_per_s / peak_bytes_per_s``. Below it an operation is
        limited by memory, above it by compute.
    """
    flops, bandwidth = _peaks(peak_flops_per_s, peak_bytes_per_s)
    return flops / bandwidth


def attainable_flops_per_s(
    intensity: float, *, peak_flops_per_s: float, peak_bytes_per_s: float
) -> float:
    """The roof at an intensity: ``min(peak_flops_per_s, intensity * peak_bytes_per_s)``.

    Parameters
    ----------
    intensity : float
        Arithmetic intensity, in FLOP/byte (> 0).
    peak_flops_per_s, peak_bytes_per_s : float
        The roofs, in FLOP/s and bytes/s (> 0).

    Returns
    -------
    float
        The highest compute rate the roofline allows, in FLOP/s.
    """
    flops, bandwidth = _peaks(peak_flops_per_s, peak_bytes_per_s)
    return min(flops, _positive("intensity", intensity) * bandwidth)


def percent_of_roof(
    point: RooflinePoint, *, peak_flops_per_s: float, peak_bytes_per_s: float
) -> float:
    """The point's achieved FLOP/s as a percentage of the roof at its intensity.

    Above 100 when the peaks are lower bounds (measured CPU estimates) or the
    data came from a cache faster than the memory the roof describes.
    """
    roof = attainable_flops_per_s(
        point.intensity,
        peak_flops_per_s=peak_flops_per_s,
        peak_bytes_per_s=peak_bytes_per_s,
    )
    return 100.0 * point.flops_per_s / roof


def classify(
    point: RooflinePoint,
    *,
    peak_flops_per_s: float,
    peak_bytes_per_s: float,
    overhead_fraction: float = OVERHEAD_FRACTION,
    overhead_s: float = OVERHEAD_S,
) -> str:
    """The regime that limits a point: one of :data:`REGIMES`.

    The rule:

    1. ``"overhead-bound"`` when the point reaches less than
       ``overhead_fraction`` of the roof at its intensity *and* takes less than
       ``overhead_s`` per call: it is so short that fixed costs (Python, the
       dispatcher, a kernel launch) dominate, so its data or arithmetic cannot
       be what limits it.
    2. Otherwise ``"memory-bound"`` when its intensity is below the ridge
       (:func:`ridge_intensity`): the slanted roof is the limit.
    3. Otherwise ``"compute-bound"``.

    A long operation far below its roof is classified by the roof that bounds
    it; how far below it sits is :func:`percent_of_roof`.

    Parameters
    ----------
    point : RooflinePoint
        The measurement.
    peak_flops_per_s, peak_bytes_per_s : float
        The roofs, in FLOP/s and bytes/s (> 0).
    overhead_fraction : float
        Fraction of the roof below which a short point is overhead-bound
        (``0 < overhead_fraction <= 1``); default :data:`OVERHEAD_FRACTION`.
    overhead_s : float
        Time per call, in seconds, below which a point counts as short;
        default :data:`OVERHEAD_S` (a few tens of microseconds: well above
        a kernel launch or an eager op's host cost).

    Returns
    -------
    str
        ``"overhead-bound"``, ``"memory-bound"`` or ``"compute-bound"``.

    Raises
    ------
    ValueError
        For peaks or thresholds that are not positive and finite, or an
        ``overhead_fraction`` above 1.
    """
    if not 0 < overhead_fraction <= 1:
        msg = f"overhead_fraction must be in (0, 1], got {overhead_fraction!r}"
        raise ValueError(msg)
    overhead_s = _positive("overhead_s", overhead_s)
    percent = percent_of_roof(
        point, peak_flops_per_s=peak_flops_per_s, peak_bytes_per_s=peak_bytes_per_s
    )
    if percent < 100.0 * overhead_fraction and point.seconds < overhead_s:
        return "overhead-bound"
    ridge = ridge_intensity(
        peak_flops_per_s=peak_flops_per_s, peak_bytes_per_s=peak_bytes_per_s
    )
    return "memory-bound" if point.intensity < ridge else "compute-bound"


def _flops_unit(peak_flops_per_s: float) -> tuple[float, str]:
    """FLOP/s per plotted unit and its name: TFLOP/s for a GPU, GFLOP/s below."""
    return (1e12, "TFLOP/s") if peak_flops_per_s >= 1e12 else (1e9, "GFLOP/s")


#: Size of one character and one line of an ``x-small`` label, in points (approx.).
_CHAR_PT, _LINE_PT = 4.6, 8.5


def _label_points(ax: Axes, items: Sequence[tuple[str, float, float]]) -> None:
    """Write each label below and to the right of its point, without overlaps.

    Labels are placed from left to right; one that would overlap a label
    already placed moves down a line until it is clear. Sizes are estimated
    from the number of characters, which is close enough for short labels.
    """
    to_points = 72.0 / ax.figure.dpi
    placed: list[tuple[float, float, float, float]] = []
    for text, x, y in sorted(items, key=lambda item: (item[1], -item[2])):
        px, py = (float(v) * to_points for v in ax.transData.transform((x, y)))
        left, right = px + 5.0, px + 5.0 + _CHAR_PT * len(text)
        dy = -3.0
        while any(
            left < x1 and x0 < right and py + dy - _LINE_PT < y1 and y0 < py + dy
            for x0, y0, x1, y1 in placed
        ):
            dy -= _LINE_PT
        placed.append((left, py + dy - _LINE_PT, right, py + dy))
        ax.annotate(
            text,
            xy=(x, y),
            xytext=(5.0, dy),
            textcoords="offset points",
            va="top",
            fontsize="x-small",
        )


def plot_roofline(
    ax: Axes,
    points: Sequence[RooflinePoint],
    *,
    peak_flops_per_s: float,
    peak_bytes_per_s: float,
    title: str,
    device: torch.device | str | DeviceInfo | None,
    sweeps: Mapping[str, Sequence[RooflinePoint]] | None = None,
    overhead_fraction: float = OVERHEAD_FRACTION,
    overhead_s: float = OVERHEAD_S,
) -> None:
    """Draw the roofline and the measured points on log-log axes.

    The roof is ``min(peak_flops_per_s, intensity * peak_bytes_per_s)``; a
    dotted vertical line marks the ridge. Every point is coloured and shaped by
    its regime (:func:`classify`, with the same thresholds) and annotated with
    its label. The y axis is in GFLOP/s, or TFLOP/s when the compute roof is at
    least 1 TFLOP/s.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    points : sequence of RooflinePoint
        Single measurements, each annotated with its label.
    peak_flops_per_s, peak_bytes_per_s : float
        The roofs, in FLOP/s and bytes/s (> 0).
    title : str
        States the finding.
    device : torch.device or str or DeviceInfo or None
        Labelled on the figure with :func:`~gpuguide.plotting.label_device`.
    sweeps : mapping of str to sequence of RooflinePoint, optional
        Name -> points of one sweep, joined by a line in the legend; only the
        first and last point of a sweep are annotated.
    overhead_fraction, overhead_s : float
        Passed to :func:`classify`.

    Raises
    ------
    ValueError
        For peaks that are not positive and finite, or no points at all.
    """
    flops, bandwidth = _peaks(peak_flops_per_s, peak_bytes_per_s)
    sweeps = dict(sweeps or {})
    everything = list(points) + [p for run in sweeps.values() for p in run]
    if not everything:
        msg = "plot_roofline needs at least one point"
        raise ValueError(msg)
    scale, unit = _flops_unit(flops)
    xlabel = require_unit("arithmetic intensity (FLOP/byte)")
    ylabel = require_unit(f"achieved compute ({unit})")
    ridge = flops / bandwidth
    intensities = [p.intensity for p in everything] + [ridge]
    x_lo, x_hi = min(intensities) / 4, max(intensities) * 4
    _style_axes(ax)

    roof_x = [x_lo, ridge, x_hi]
    roof_y = [min(flops, x * bandwidth) / scale for x in roof_x]
    roof_label = (
        f"roof: {format_rate(bandwidth, 'B/s')} x intensity, "
        f"at most {format_rate(flops, 'FLOP/s')}"
    )
    ax.plot(roof_x, roof_y, color="0.2", lw=2.2, label=roof_label, zorder=2)
    ax.axvline(ridge, color="0.5", ls=":", lw=1.2, zorder=1)

    def regime(p: RooflinePoint) -> str:
        return classify(
            p,
            peak_flops_per_s=flops,
            peak_bytes_per_s=bandwidth,
            overhead_fraction=overhead_fraction,
            overhead_s=overhead_s,
        )

    labelled = list(points)
    for i, (name, run) in enumerate(sweeps.items()):
        if not run:
            continue
        ax.plot(
            [p.intensity for p in run],
            [p.flops_per_s / scale for p in run],
            color=COLORS[(4 + i) % len(COLORS)],
            lw=1.2,
            ls="--",
            label=name,
            zorder=3,
        )
        labelled += [run[0]] if len(run) == 1 else [run[0], run[-1]]
    seen: set[str] = set()
    for p in everything:
        kind = regime(p)
        color, marker = _REGIME_STYLE[kind]
        ax.scatter(
            [p.intensity],
            [p.flops_per_s / scale],
            color=color,
            marker=marker,
            s=42,
            zorder=4,
            edgecolors="white",
            linewidths=0.6,
            label=None if kind in seen else kind,
        )
        seen.add(kind)

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    rates = [p.flops_per_s for p in everything]
    low, high = min(min(rates), roof_y[0] * scale), max(max(rates), flops)
    ax.set_ylim(low / scale / 3, high / scale * 3)
    ax.annotate(
        f"ridge {ridge:.3g} FLOP/byte",
        xy=(ridge, high / scale * 3),
        xytext=(4, -3),
        textcoords="offset points",
        va="top",
        fontsize="x-small",
        color="0.35",
    )
    _label_points(ax, [(p.label, p.intensity, p.flops_per_s / scale) for p in labelled])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="lower right")
    label_device(ax.figure, device)
