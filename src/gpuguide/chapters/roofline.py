"""Draw the roofline: measured operations between the memory and compute roofs.

An operation that performs ``flop`` floating-point operations while moving
``nbytes`` to and from memory has an *arithmetic intensity* of ``flop / nbytes``
FLOP/byte. :class:`RooflinePoint` holds one such measurement and its rates;
:func:`plot_roofline` draws the two roofs of a device (the slanted memory roof
and the flat compute roof) and the points, each coloured by the regime the page
found for it, on log-log axes in the style of :mod:`gpuguide.plotting`. Which
roof applies, and how a regime is decided, is the lesson of the roofline page,
so that arithmetic lives there. :func:`streaming_elements` sizes the large
elementwise tensors the page streams through memory.

Examples
--------
>>> from gpuguide.chapters.roofline import RooflinePoint
>>> add = RooflinePoint("x + y", flop=2**24, nbytes=12 * 2**24, seconds=1.0e-4)
>>> round(add.intensity, 4)
0.0833
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuguide import checks
from gpuguide.device import as_device
from gpuguide.env import small_mode
from gpuguide.peaks import streaming_bytes
from gpuguide.plotting import COLORS, label_device, require_unit, style_axes
from gpuguide.sizes import largest_size
from gpuguide.units import format_rate, format_time

if TYPE_CHECKING:
    import torch
    from matplotlib.axes import Axes

    from gpuguide.device import DeviceInfo
    from gpuguide.timing import Measurement

__all__ = [
    "REGIMES",
    "STREAMING_MIN_ELEMENTS",
    "RooflinePoint",
    "plot_roofline",
    "streaming_elements",
]

#: The regimes :func:`plot_roofline` colours points by.
REGIMES: tuple[str, ...] = ("overhead-bound", "memory-bound", "compute-bound")

#: Outside small mode, the large elementwise tensors hold at least this many
#: float32 elements (64 MiB each): more than a GPU's L2, so that main memory, not
#: a cache, feeds them. On a CPU they hold at least as many bytes as the tensors
#: its memory ceiling is measured with (:func:`gpuguide.peaks.streaming_bytes`:
#: four times its last-level caches).
STREAMING_MIN_ELEMENTS = 2**24

#: Colour and marker of each regime on the plot (Okabe-Ito colours).
_REGIME_STYLE: dict[str, tuple[str, str]] = {
    "overhead-bound": (COLORS[3], "s"),
    "memory-bound": (COLORS[0], "o"),
    "compute-bound": (COLORS[2], "^"),
}


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
            object.__setattr__(self, name, checks.positive(name, getattr(self, name)))

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


def streaming_elements(
    *,
    device: torch.device | str | None = None,
    small: bool | None = None,
) -> int:
    """Elements of each large float32 tensor that an elementwise operation streams.

    The largest power of two from ``2**12`` to ``2**28`` for which four such
    tensors (``x``, ``y``, ``z`` and ``out``: 16 bytes per element) fit the
    device's memory budget and one ``z + x * y`` over them (2 FLOP and 16 bytes
    moved per element) fits its time per call
    (:func:`gpuguide.sizes.largest_size`). Outside small mode it is at least
    :data:`STREAMING_MIN_ELEMENTS`, and on a CPU at least the elements of
    the tensors its memory ceiling streams (:func:`gpuguide.peaks.streaming_bytes`),
    so that the tensors outgrow the caches.

    Parameters
    ----------
    device : torch.device or str, optional
        The device; :func:`gpuguide.device.pick_device` chooses when omitted.
    small : bool, optional
        Size for small mode; by default :func:`gpuguide.env.small_mode`.

    Returns
    -------
    int
        The number of elements.
    """
    elements = largest_size(
        2**12,
        2**28,
        memory_at=lambda n: 16 * n,
        flop_at=lambda n: 2 * n,
        traffic_at=lambda n: 16 * n,
        device=device,
    )
    small = small_mode() if small is None else small
    if small:
        return elements
    least = STREAMING_MIN_ELEMENTS
    if as_device(device).type == "cpu":
        least = max(least, streaming_bytes(small=False) // 4)
    return max(elements, least)


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
    regimes: Mapping[str, str],
    peak_flops_per_s: float,
    peak_bytes_per_s: float,
    title: str,
    device: torch.device | str | DeviceInfo | None = None,
    sweeps: Mapping[str, Sequence[RooflinePoint]] | None = None,
) -> None:
    """Draw the roofline and the measured points on log-log axes.

    The roof is ``min(peak_flops_per_s, intensity * peak_bytes_per_s)``; a
    dotted vertical line marks the ridge where the two meet. Every point is
    coloured and shaped by its regime and annotated with its label. The y axis
    is in GFLOP/s, or TFLOP/s when the compute roof is at least 1 TFLOP/s.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    points : sequence of RooflinePoint
        Single measurements, each annotated with its label.
    regimes : mapping of str to str
        Each point's label -> its regime, one of :data:`REGIMES`.
    peak_flops_per_s, peak_bytes_per_s : float
        The roofs, in FLOP/s and bytes/s (> 0).
    title, device
        As for :func:`gpuguide.plotting.plot_sweep`: the finding, and the device
        named on the figure.
    sweeps : mapping of str to sequence of RooflinePoint, optional
        Name -> points of one sweep, joined by a line in the legend; only the
        first and last point of a sweep are annotated.

    Raises
    ------
    ValueError
        For peaks that are not positive and finite, no points at all, or a
        point without a regime from :data:`REGIMES`.
    """
    flops = checks.positive("peak_flops_per_s", peak_flops_per_s)
    bandwidth = checks.positive("peak_bytes_per_s", peak_bytes_per_s)
    sweeps = dict(sweeps or {})
    everything = list(points) + [p for run in sweeps.values() for p in run]
    if not everything:
        msg = "points must hold at least one point, got none"
        raise ValueError(msg)
    unknown = sorted(
        {p.label for p in everything if regimes.get(p.label) not in REGIMES}
    )
    if unknown:
        msg = f"regimes must give each point one of {REGIMES}; not given for {unknown}"
        raise ValueError(msg)
    scale, unit = _flops_unit(flops)
    xlabel = require_unit("arithmetic intensity (FLOP/byte)")
    ylabel = require_unit(f"achieved compute ({unit})")
    ridge = flops / bandwidth
    intensities = [p.intensity for p in everything] + [ridge]
    x_lo, x_hi = min(intensities) / 4, max(intensities) * 4
    style_axes(ax)

    roof_x = [x_lo, ridge, x_hi]
    roof_y = [min(flops, x * bandwidth) / scale for x in roof_x]
    roof_label = (
        f"roof: {format_rate(bandwidth, 'B/s')} x intensity, "
        f"at most {format_rate(flops, 'FLOP/s')}"
    )
    ax.plot(roof_x, roof_y, color="0.2", lw=2.2, label=roof_label, zorder=2)
    ax.axvline(ridge, color="0.5", ls=":", lw=1.2, zorder=1)

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
        kind = regimes[p.label]
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
