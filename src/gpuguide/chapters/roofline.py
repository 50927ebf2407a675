"""The roofline page's helpers: :class:`Roofline` places measured operations on a
device's roofline; :func:`streaming_elements` sizes tensors that stream."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from gpuguide import checks
from gpuguide.device import as_device
from gpuguide.env import small_mode
from gpuguide.peaks import device_peaks, streaming_bytes
from gpuguide.plotting import COLORS, label_device, style_axes
from gpuguide.sizes import largest_size
from gpuguide.tables import Table
from gpuguide.timing import benchmark
from gpuguide.units import format_value

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from gpuguide.sweeps import SweepResult
    from gpuguide.timing import Measurement

__all__ = ["Roofline", "streaming_elements"]

#: Outside small mode, the large elementwise tensors hold at least this many float32
#: elements (64 MiB each, more than a GPU's L2), so that main memory feeds them.
_STREAMING_MIN_ELEMENTS = 2**24
_DOT: dict[str, Any] = {"s": 42, "zorder": 4, "edgecolors": "white", "linewidths": 0.6}
_REGIME_STYLE: dict[str, tuple[str, str]] = {
    "overhead-bound": (COLORS[3], "s"),
    "memory-bound": (COLORS[0], "o"),
    "compute-bound": (COLORS[2], "^"),
}


def streaming_elements(*, device: torch.device | str | None = None) -> int:
    """Elements of each large float32 tensor an elementwise operation streams: the
    largest power of two up to ``2**28`` where four fit the budget and ``z + x * y``
    its time; outside small mode at least ``2**24`` (on a CPU, past its caches)."""
    elements = largest_size(
        2**12,
        2**28,
        memory_at=lambda n: 16 * n,
        flop_at=lambda n: 2 * n,
        traffic_at=lambda n: 16 * n,
        device=device,
    )
    if small_mode():
        return elements
    least = _STREAMING_MIN_ELEMENTS
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
        ax.annotate(
            text,
            xy=(x, y),
            xytext=(5.0, dy),
            textcoords="offset points",
            va="top",
            fontsize="x-small",
        )


@dataclass
class Roofline:
    """Operations on a roofline of ``peak_flops_per_s`` and ``peak_bytes_per_s``;
    ``measured`` roofs (a CPU's, or a None peak) are lower bounds, raised to the
    best rates of the operations. An operation is *overhead-bound* when it reaches
    under a quarter of its roof in under 50 us, else memory- or compute-bound."""

    peak_flops_per_s: float | None
    peak_bytes_per_s: float | None
    measured: bool = False
    ops: dict[str, tuple[float, float, Measurement]] = field(default_factory=dict)

    @property
    def matmul(self) -> str:
        """The peak float32 matmuls are held against: "tf32" where they may use it."""
        return "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"

    @classmethod
    def of(cls, device: torch.device | str | None = None) -> Roofline:
        """``device``'s float32 matmul (or TF32) and memory peaks; a CPU's measured."""
        peaks = device_peaks(device)
        tf32 = torch.get_float32_matmul_precision() != "highest"
        flops = peaks.flops_for(torch.float32, tf32=tf32)
        measured = as_device(device).type == "cpu"
        return cls(flops, peaks.memory_bandwidth_bytes_per_s, measured)

    def add(
        self, label: str, flop: float, nbytes: float, time: Measurement
    ) -> Measurement:
        """Place an operation of ``flop`` FLOP, ``nbytes`` bytes; returns ``time``."""
        checks.positive("nbytes", nbytes)
        self.ops[label] = (checks.positive("flop", flop), nbytes, time)
        return time

    def measure(
        self, label: str, fn: Any, *args: Any, flop: float, nbytes: float, **kwargs: Any
    ) -> Measurement:
        """:meth:`add` ``fn(*args, **kwargs)``, timed by :func:`gpuguide.benchmark`."""
        time = benchmark(fn, args=args, kwargs=kwargs, label=label)
        return self.add(label, flop, nbytes, time)

    def add_sweep(self, result: SweepResult, variant: str, name: str) -> list[str]:
        """:meth:`add` ``variant`` at each size ``n`` it ran, as ``f"{name}={n}"``."""
        flop, traffic = result.sweep.flop, result.sweep.traffic
        if flop is None or traffic is None:
            msg = f"sweep {result.sweep.name!r} must declare flop(n) and traffic(n)"
            raise ValueError(msg)
        sizes = result.ran(variant)
        labels = [f"{name}={n}" for n in sizes]
        for label, n in zip(labels, sizes, strict=True):
            self.add(label, flop(n), traffic(n), result.at(variant, n))
        return labels

    @property
    def roofs(self) -> tuple[float, float]:
        """The peak FLOP/s and bytes/s, raised to the best measured if ``measured``."""
        flops, nbytes = self.peak_flops_per_s or 0.0, self.peak_bytes_per_s or 0.0
        if self.measured or not (flops and nbytes):
            ops = self.ops.values()
            flops = max(flops, *(f / t.median_s for f, _, t in ops))
            nbytes = max(nbytes, *(b / t.median_s for _, b, t in ops))
        return flops, nbytes

    @property
    def ridge(self) -> float:
        """The intensity (FLOP/byte) where the two roofs meet."""
        flops, nbytes = self.roofs
        return flops / nbytes

    def point(self, label: str) -> tuple[float, float]:
        """``label``'s intensity (FLOP/byte) and FLOP/s."""
        flop, nbytes, time = self.ops[label]
        return flop / nbytes, flop / time.median_s

    def share(self, label: str) -> dict[str, Any]:
        """``label``'s share of its roof, as a claim's keywords (spread: quartiles)."""
        flop, nbytes, time = self.ops[label]
        flops, bandwidth = self.roofs
        roof = min(flops, flop / nbytes * bandwidth)
        value = flop / time.median_s / roof
        low, high = (flop / q / roof for q in (time.q75_s, time.q25_s))
        measured = f"{value:.0%} ({low:.0%}-{high:.0%})"
        return {"value": value, "spread": (low, high), "measured": measured}

    def regime(self, label: str) -> str:
        """``label``'s regime: overhead-, memory- or compute-bound."""
        if self.share(label)["value"] < 0.25 and self.ops[label][2].median_s < 50e-6:
            return "overhead-bound"
        return "memory-bound" if self.point(label)[0] < self.ridge else "compute-bound"

    def __str__(self) -> str:
        """A table, a row per operation: time, rates, intensity, share of its roof
        and regime; then the operations above their roof."""
        rows, above = [], []
        for label, (flop, nbytes, time) in self.ops.items():
            share = self.share(label)["value"]
            reached = f"{share:.0%}"
            if abs(share - 1) < 1e-9:
                reached = "at the roof"
            elif share > 1:
                reached = "> roof"
                above.append(label)
            rate, bandwidth = flop / time.median_s, nbytes / time.median_s
            rows.append(
                (
                    label,
                    str(time),
                    format_value(rate, "FLOP/s"),
                    format_value(bandwidth, "B/s"),
                    f"{flop / nbytes:.3g}",
                    reached,
                    self.regime(label),
                )
            )
        header = ("operation", "time", "compute", "bandwidth", "FLOP per byte")
        flops, nbytes = self.roofs
        title = (
            f"roofs: {format_value(flops, 'FLOP/s')} and {format_value(nbytes, 'B/s')}"
            f"{' (measured: lower bounds)' if self.measured else ' (datasheet)'}; "
            f"ridge: {self.ridge:.3g} FLOP/byte"
        )
        text = str(Table((*header, "of roof", "regime"), tuple(rows), title))
        if above:
            text += (
                f"\nAbove the roof: {', '.join(above)}. The roof is a lower bound "
                "here, or the data came from a cache faster than main memory."
            )
        return text

    def plot(self, *, title: str, runs: Mapping[str, list[str]]) -> None:
        """Draw the roofs, the ridge and the operations by regime on new log-log
        axes, those of each of ``runs`` (name: labels) joined by a line."""
        import matplotlib.pyplot as plt

        _, ax = plt.subplots()
        style_axes(ax)
        flops, bandwidth = self.roofs
        scale, unit = (1e12, "TFLOP/s") if flops >= 1e12 else (1e9, "GFLOP/s")
        points = {label: self.point(label) for label in self.ops}
        intensities = [x for x, _ in points.values()] + [self.ridge]
        roof_x = [min(intensities) / 4, self.ridge, max(intensities) * 4]
        roof_y = [min(flops, x * bandwidth) / scale for x in roof_x]
        roof_label = (
            f"roof: {format_value(bandwidth, 'B/s')} x intensity, "
            f"at most {format_value(flops, 'FLOP/s')}"
        )
        ax.plot(roof_x, roof_y, color="0.2", lw=2.2, label=roof_label, zorder=2)
        ax.axvline(self.ridge, color="0.5", ls=":", lw=1.2, zorder=1)

        joined = {label for labels in runs.values() for label in labels}
        labelled = [label for label in points if label not in joined]
        for i, (name, labels) in enumerate(runs.items()):
            xs = [points[label][0] for label in labels]
            ys = [points[label][1] / scale for label in labels]
            color = COLORS[(4 + i) % len(COLORS)]
            ax.plot(xs, ys, color=color, lw=1.2, ls="--", label=name, zorder=3)
            labelled += labels[:1] + labels[1:][-1:]  # its ends
        seen: set[str] = set()
        for label, (intensity, rate) in points.items():
            kind = self.regime(label)
            color, marker = _REGIME_STYLE[kind]
            dot = {**_DOT, "color": color, "marker": marker}
            legend = None if kind in seen else kind  # one entry per regime
            ax.scatter([intensity], [rate / scale], label=legend, **dot)
            seen.add(kind)

        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(roof_x[0], roof_x[-1])
        rates = [rate for _, rate in points.values()]
        low, high = min(min(rates), roof_y[0] * scale), max(max(rates), flops)
        ax.set_ylim(low / scale / 3, high / scale * 3)
        ax.annotate(
            f"ridge {self.ridge:.3g} FLOP/byte",
            xy=(self.ridge, high / scale * 3),
            xytext=(4, -3),
            textcoords="offset points",
            va="top",
            fontsize="x-small",
            color="0.35",
        )
        _label_points(ax, [(k, points[k][0], points[k][1] / scale) for k in labelled])
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel(f"achieved compute ({unit})")
        ax.set_title(title)
        ax.legend(loc="lower right")
        label_device(ax.figure, None)
