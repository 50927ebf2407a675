"""Draw the roofline (:func:`plot_roofline`), size the tensors a page streams
through memory (:func:`streaming_elements`), tabulate where each operation sits
(:func:`roofline_rows`), and, for the CPU-against-GPU page, name a size
(:func:`size_text`) and find where the GPU starts to win (:func:`crossover`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from gpuguide import checks
from gpuguide.device import as_device
from gpuguide.env import small_mode
from gpuguide.peaks import streaming_bytes
from gpuguide.plotting import COLORS, label_device, style_axes
from gpuguide.sizes import largest_size
from gpuguide.units import format_rate

if TYPE_CHECKING:
    import torch
    from matplotlib.axes import Axes

    from gpuguide.device import DeviceInfo
    from gpuguide.timing import Measurement
    from gpuguide.verdicts import Comparison

__all__ = [
    "REGIMES",
    "STREAMING_MIN_ELEMENTS",
    "Row",
    "crossover",
    "plot_roofline",
    "roofline_rows",
    "size_text",
    "streaming_elements",
]

#: The regimes :func:`plot_roofline` colours points by.
REGIMES: tuple[str, ...] = ("overhead-bound", "memory-bound", "compute-bound")
#: Outside small mode, the large elementwise tensors hold at least this many float32
#: elements (64 MiB each, more than a GPU's L2), so that main memory feeds them.
STREAMING_MIN_ELEMENTS = 2**24
_REGIME_STYLE: dict[str, tuple[str, str]] = {
    "overhead-bound": (COLORS[3], "s"), "memory-bound": (COLORS[0], "o"),
    "compute-bound": (COLORS[2], "^"),
}  # fmt: skip


def streaming_elements(
    *, device: torch.device | str | None = None, small: bool | None = None
) -> int:
    """Elements of each large float32 tensor that an elementwise operation streams.

    The largest power of two up to ``2**28`` for which four such tensors fit the
    device's budget and one ``z + x * y`` its time per call; outside small mode
    at least :data:`STREAMING_MIN_ELEMENTS` (on a CPU, enough to outgrow its
    caches).
    """
    elements = largest_size(
        2**12, 2**28, memory_at=lambda n: 16 * n, flop_at=lambda n: 2 * n,
        traffic_at=lambda n: 16 * n, device=device,
    )  # fmt: skip
    if small_mode() if small is None else small:
        return elements
    least = STREAMING_MIN_ELEMENTS
    if as_device(device).type == "cpu":
        least = max(least, streaming_bytes(small=False) // 4)
    return max(elements, least)


_CHAR_PT, _LINE_PT = 4.6, 8.5  # one character and one line of x-small text, in points


def _label_points(ax: Axes, items: Sequence[tuple[str, float, float]]) -> None:
    """Write each label below right of its point, moved down a line past overlaps."""
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
        ax.annotate(text, xy=(x, y), xytext=(5.0, dy), textcoords="offset points",
                    va="top", fontsize="x-small")  # fmt: skip


def plot_roofline(
    ax: Axes, points: Mapping[str, tuple[float, float]], *, regimes: Mapping[str, str],
    peak_flops_per_s: float, peak_bytes_per_s: float, title: str,
    device: torch.device | str | DeviceInfo | None = None,
    sweeps: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
) -> None:  # fmt: skip
    """Draw the roofline and the measured points on log-log axes.

    ``points`` maps a label to (intensity in FLOP/byte, achieved FLOP/s),
    ``regimes`` each label to one of :data:`REGIMES` (its colour); each of
    ``sweeps`` is a run of such points joined by a line. Raises ``ValueError``
    for a peak or point that is not positive, no points, or a missing regime.
    """
    flops = checks.positive("peak_flops_per_s", peak_flops_per_s)
    bandwidth = checks.positive("peak_bytes_per_s", peak_bytes_per_s)
    runs = {name: list(run.items()) for name, run in (sweeps or {}).items()}
    everything = list(points.items()) + [p for run in runs.values() for p in run]
    if not everything:
        msg = "points must hold at least one point, got none"
        raise ValueError(msg)
    for label, (intensity, rate) in everything:
        checks.positive(f"the intensity of {label!r}", intensity)
        checks.positive(f"the FLOP/s of {label!r}", rate)
    unknown = sorted(
        {label for label, _ in everything if regimes.get(label) not in REGIMES}
    )
    if unknown:
        msg = f"regimes must give each point one of {REGIMES}; not given for {unknown}"
        raise ValueError(msg)
    scale, unit = (1e12, "TFLOP/s") if flops >= 1e12 else (1e9, "GFLOP/s")
    ridge = flops / bandwidth
    intensities = [x for _, (x, _) in everything] + [ridge]
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

    labelled = list(points.items())
    for i, (name, run) in enumerate(runs.items()):
        if not run:
            continue
        ax.plot([x for _, (x, _) in run], [rate / scale for _, (_, rate) in run],
                color=COLORS[(4 + i) % len(COLORS)], lw=1.2, ls="--", label=name,
                zorder=3)  # fmt: skip
        labelled += [run[0]] if len(run) == 1 else [run[0], run[-1]]
    seen: set[str] = set()
    for label, (intensity, rate) in everything:
        kind = regimes[label]
        color, marker = _REGIME_STYLE[kind]
        ax.scatter([intensity], [rate / scale], color=color, marker=marker, s=42,
                   zorder=4, edgecolors="white", linewidths=0.6,
                   label=None if kind in seen else kind)  # fmt: skip
        seen.add(kind)

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    rates = [rate for _, (_, rate) in everything]
    low, high = min(min(rates), roof_y[0] * scale), max(max(rates), flops)
    ax.set_ylim(low / scale / 3, high / scale * 3)
    ax.annotate(f"ridge {ridge:.3g} FLOP/byte", xy=(ridge, high / scale * 3),
                xytext=(4, -3), textcoords="offset points", va="top",
                fontsize="x-small", color="0.35")  # fmt: skip
    _label_points(ax, [(label, x, rate / scale) for label, (x, rate) in labelled])
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel(f"achieved compute ({unit})")
    ax.set_title(title)
    ax.legend(loc="lower right")
    label_device(ax.figure, device)


class Row(NamedTuple):
    """One operation's line in the roofline page's table (:func:`roofline_rows`)."""

    operation: str
    time: Measurement
    compute: str
    bandwidth: str
    FLOP_per_byte: str
    of_roof: str
    regime: str


def roofline_rows(
    ops: Mapping[str, tuple[float, float, Measurement]],
    shares: Mapping[str, float],
    regimes: Mapping[str, str],
) -> list[Row]:
    """A :class:`Row` per operation of ``ops`` (label: FLOP, bytes, time), with its
    share of its roof from ``shares``: ``"at the roof"`` for the one that set a
    measured roof (a share of 1), ``"> roof"`` above it, else a percentage."""
    rows = []
    for label, (flop, nbytes, t) in ops.items():
        share = shares[label]
        reached = f"{share:.0%}"
        if math.isclose(share, 1):
            reached = "at the roof"
        elif share > 1:
            reached = "> roof"
        rate = format_rate(flop / t.median_s, "FLOP/s")
        bandwidth = format_rate(nbytes / t.median_s, "B/s")
        intensity = f"{flop / nbytes:.3g}"
        rows.append(Row(label, t, rate, bandwidth, intensity, reached, regimes[label]))
    return rows


def size_text(n: int, *, least: int = 2**14) -> str:
    """A size for a label: ``"2^20"`` for a power of two of at least ``least``,
    else its digits (``"8192"`` below the default ``least``, ``"48"``)."""
    if n >= least and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    return str(n)


def crossover(verdicts: Sequence[tuple[int, Comparison]]) -> int | None:
    """The smallest size from which on the GPU was faster at every size: from
    ``(size, comparison of the GPU against the CPU)`` pairs in ascending size, the
    first of the unbroken run of ``"faster"`` verdicts that ends the list; None
    where the largest size's verdict is not ``"faster"``."""
    found = None
    for n, versus in reversed(verdicts):
        if versus.verdict != "faster":
            break
        found = n
    return found
