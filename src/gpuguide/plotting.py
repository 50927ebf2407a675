"""One look for every figure: sweeps, bar charts and the device label.

Axis labels name their unit in parentheses; :func:`gpuguide.setup` applies the
style before a page draws. Log axes label ticks as plain numbers (60, 10 k, 4 Mi).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import matplotlib as mpl
from cycler import cycler
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.ticker import LogFormatter

from gpuguide.device import DeviceInfo, describe_device, pick_device
from gpuguide.results import record as record_point
from gpuguide.timing import Measurement
from gpuguide.units import format_ratio

if TYPE_CHECKING:
    import torch
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

__all__ = [
    "COLORS",
    "label_device",
    "plot_bars",
    "plot_sweep",
    "style_axes",
]

#: Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
COLORS = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#000000",
    "#F0E442",
)

_STYLE: dict[Any, Any] = {
    "figure.figsize": (7.0, 4.5),
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "figure.constrained_layout.use": True,
    "axes.grid": True,
    "grid.alpha": 0.35,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": cycler(color=list(COLORS)),
    "axes.titlesize": "medium",
    "axes.titleweight": "bold",
    "lines.linewidth": 1.8,
    "lines.markersize": 5,
    "legend.frameon": False,
    "legend.fontsize": "small",
    # A log axis set without log_axis labels 0.001 to 9000 as plain numbers.
    "axes.formatter.min_exponent": 4,
}

_DEVICE_LABEL_GID = "gpuguide-device-label"
_LABEL_STRIP = 0.04  # share of the figure's height kept clear for the device label
_UNIT = re.compile(r"\(\s*[^()\s][^()]*\)")


def style_axes(ax: Axes | None = None) -> None:
    """Set matplotlib's defaults to the guide's style (7 x 4.5 in, grid, palette),
    and give ``ax`` its look where given (one made before the style too)."""
    mpl.rcParams.update(_STYLE)
    if ax is None:
        return
    ax.grid(True, which="major", alpha=_STYLE["grid.alpha"])
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    if not (ax.lines or ax.patches or ax.collections):
        ax.set_prop_cycle(_STYLE["axes.prop_cycle"])
    fig = ax.figure.figure
    if fig.get_layout_engine() is None:
        fig.set_layout_engine("constrained")


#: Unit prefixes: decimal, binary (bytes only) and those below one.
_DECIMAL = {p: 1e3 ** (i + 1) for i, p in enumerate("kMGTP")}
_BINARY = {f"{p}i": 2.0 ** (10 * (i + 1)) for i, p in enumerate("KMGTP")}
_SMALL = {
    "": 1.0,
    "m": 1e-3,
    "u": 1e-6,
    "\N{MICRO SIGN}": 1e-6,
    "\N{GREEK SMALL LETTER MU}": 1e-6,
    "n": 1e-9,
}


class _PlainLogFormatter(LogFormatter):
    """matplotlib's choice of log ticks, as ``60``, ``10 k``; base 2: ``4 Mi``."""

    def __init__(self, base: float) -> None:
        super().__init__(base=base, labelOnlyBase=False)
        self.prefixes = _BINARY if base == 2 else _DECIMAL

    def __call__(self, x: float, pos: int | None = None) -> str:
        if not super().__call__(x, pos):  # a tick matplotlib leaves unlabelled
            return ""
        for prefix, size in reversed(self.prefixes.items()):
            if abs(x) >= size:
                return f"{x / size:.3g} {prefix}"
        return f"{x:.3g}"


def _log_axis(ax: Axes, which: str, *, base: float = 10) -> None:
    """Make ``ax``'s ``which`` axis (``"x"``, ``"y"``) logarithmic, plainly labelled."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=base)
    axis.set_major_formatter(_PlainLogFormatter(base))
    axis.set_minor_formatter(_PlainLogFormatter(base))


def _require_unit(label: str) -> str:
    """Return an axis label (``"time (ms)"``); ``ValueError`` if it names no unit."""
    if not isinstance(label, str) or not _UNIT.search(label):
        msg = f'axis label must name a unit in parentheses ("time (ms)"), got {label!r}'
        raise ValueError(msg)
    return label


def label_device(
    fig: Figure | SubFigure, device: torch.device | str | DeviceInfo | None
) -> None:
    """Write (or replace) ``"measured on <short name>"`` in a figure's corner."""
    if not isinstance(device, DeviceInfo):
        device = describe_device(pick_device() if device is None else device)
    text = f"measured on {device.short_name}"
    engine = fig.figure.get_layout_engine()
    if isinstance(engine, ConstrainedLayoutEngine):  # keep a strip for the label
        engine.set(rect=(0.0, _LABEL_STRIP, 1.0, 1.0 - _LABEL_STRIP))
    for artist in fig.texts:
        if artist.get_gid() == _DEVICE_LABEL_GID:
            artist.set_text(text)
            return
    fig.text(
        0.995,
        0.005,
        text,
        ha="right",
        va="bottom",
        fontsize="x-small",
        color="0.45",
        gid=_DEVICE_LABEL_GID,
    )


def _ms(seconds: float) -> float:
    return seconds * 1e3


def _finish(
    ax: Axes, xlabel: str, ylabel: str, title: str, device: Any, legend: bool = False
) -> None:
    """Label ``ax``'s axes, title and device (and its legend, if it has entries)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend()
    label_device(ax.figure, device)


def _point(
    y: Measurement | float, value: Callable[[float], float]
) -> tuple[float, float | None, float | None]:
    """(y, band low, band high) of one point in the plotted unit."""
    if isinstance(y, Measurement):
        q25, q75 = value(y.q25_s), value(y.q75_s)
        return value(y.median_s), min(q25, q75), max(q25, q75)
    return float(y), None, None


def _usable(v: float | None, log: bool) -> TypeGuard[float]:
    return v is not None and math.isfinite(v) and (v > 0 or not log)


def plot_sweep(
    ax: Axes,
    x: Sequence[float],
    series: Mapping[str, Sequence[Measurement | float | None]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    device: torch.device | str | DeviceInfo | None = None,
    value: Callable[[float], float] | None = None,
    logx: bool = True,
    logy: bool = True,
    record: str | None = None,
) -> None:
    """Plot one line per series against a size sweep.

    Parameters
    ----------
    series : mapping of str to sequence
        Label -> one value per size: a Measurement (at ``value(median_s)``, with
        its interquartile band), a float in the y unit, or None (skipped).
    value : callable, optional
        Converts seconds to the y unit; default milliseconds.
    record : str, optional
        Record each point under this name, in the base unit of ``ylabel``.
    """
    _require_unit(xlabel)
    _require_unit(ylabel)
    unit, scale = _axis_unit(ylabel) if record is not None else ("", 1.0)
    convert = value if value is not None else _ms
    xs = [float(v) for v in x]
    for name, ys in series.items():
        if len(ys) != len(xs):
            msg = f"series {name!r} must have {len(xs)} values, got {len(ys)}"
            raise ValueError(msg)
    style_axes(ax)
    for name, ys in series.items():
        drawn = [
            (xv, *_point(raw, convert))
            for xv, raw in zip(xs, ys, strict=True)
            if raw is not None and _usable(xv, logx)
        ]
        drawn = [point for point in drawn if _usable(point[1], logy)]
        if not drawn:
            continue
        line = [(xv, y) for xv, y, _, _ in drawn]
        band = [
            (xv, lo, hi)
            for xv, _, lo, hi in drawn
            if _usable(lo, logy) and _usable(hi, logy)
        ]
        (plotted,) = ax.plot(*zip(*line, strict=True), marker="o", label=name)
        if band:
            band_x, lo, hi = zip(*band, strict=True)
            ax.fill_between(band_x, lo, hi, color=plotted.get_color(), alpha=0.2, lw=0)
        if record is not None:
            spreads = {xv: (lo * scale, hi * scale) for xv, lo, hi in band}
            for xv, y in line:
                record_point(
                    record,
                    y * scale,
                    unit=unit,
                    spread=spreads.get(xv),
                    x=xv,
                    series=name.split(" (", 1)[0].strip(),
                )
    if logx:
        _log_axis(ax, "x", base=2 if xs and all(v.is_integer() for v in xs) else 10)
    if logy:
        _log_axis(ax, "y")
    _finish(ax, xlabel, ylabel, title, device, legend=True)


_AXIS_UNIT = re.compile(r"\(([^()]*)\)\s*$")


def _axis_unit(label: str) -> tuple[str, float]:
    """``"time (ms)"`` -> ``("s", 1e-3)``; a unit other than s, B, FLOP is its own."""
    match = _AXIS_UNIT.search(label)
    if not match or not match.group(1).strip():
        msg = f"axis label must end with a unit in parentheses to record, got {label!r}"
        raise ValueError(msg)
    unit = match.group(1).strip()
    for base in ("FLOP/s", "B/s", "FLOP", "s", "B"):
        prefixes = _SMALL | _DECIMAL | (_BINARY if "B" in base else {})
        if unit.endswith(base) and unit[: -len(base)] in prefixes:
            return base, prefixes[unit[: -len(base)]]
    return unit, 1.0


def plot_bars(
    ax: Axes,
    values: Mapping[str, Measurement | float],
    *,
    ylabel: str,
    title: str,
    device: torch.device | str | DeviceInfo | None = None,
    baseline: str | None = None,
    value: Callable[[float], float] | None = None,
) -> None:
    """One bar per entry of ``values`` (as :func:`plot_sweep`'s ``series``, one
    value each), labelled with its ratio to ``baseline`` (default the first)."""
    _require_unit(ylabel)
    if not values:
        msg = "values must hold at least one bar, got none"
        raise ValueError(msg)
    names = list(values)
    baseline = names[0] if baseline is None else baseline
    if baseline not in values:
        msg = f"baseline must be one of {names}, got {baseline!r}"
        raise ValueError(msg)
    convert = value if value is not None else _ms
    points = [_point(values[name], convert) for name in names]
    heights = [y for y, _, _ in points]
    err_lo = [y - lo if lo is not None else 0.0 for y, lo, _ in points]
    err_hi = [hi - y if hi is not None else 0.0 for y, _, hi in points]
    has_err = any(lo is not None for _, lo, _ in points)
    style_axes(ax)
    yerr = [err_lo, err_hi] if has_err else None
    bars = ax.bar(names, heights, yerr=yerr, capsize=4, color=COLORS)  # cycled
    base = heights[names.index(baseline)]
    ok = base and math.isfinite(base)
    ratios = [format_ratio(y / base if ok else None) for y in heights]
    ax.bar_label(bars, ratios, padding=3, fontsize="small")  # above the error bars
    ax.margins(y=0.12)
    ax.grid(False, axis="x")
    if max(len(n) for n in names) > 12:
        for tick in ax.get_xticklabels():
            tick.set(rotation=20, horizontalalignment="right")
    _finish(ax, ax.get_xlabel(), ylabel, title, device)
