"""A page's setup (:func:`setup`) and its headline figures (:func:`report`).

Examples
--------
>>> page = setup()  # doctest: +SKIP
Measured on CPU: ... | torch 2.13.0+cpu | gpuguide 0.1.0 (f4b16f4) | ...
>>> m = gpuguide.benchmark(torch.mm, args=(a, a))  # doctest: +SKIP
>>> report("fp32 matmul", m.rate(2 * n**3), peak="fp32", size=n)  # doctest: +SKIP
fp32 matmul: 1.52 TFLOP/s (1.49-1.53), 84% of the fp32 peak
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TextIO

from gpuguide import checks
from gpuguide.device import DeviceInfo, describe_device, pick_device, provenance
from gpuguide.env import small_mode
from gpuguide.peaks import Peaks, device_peaks
from gpuguide.plotting import apply_style
from gpuguide.results import ConfigValue, record
from gpuguide.timing import NOISY_RELATIVE_IQR, Measurement, Rate
from gpuguide.units import format_spread, format_value
from gpuguide.verdicts import TOO_WIDE, Comparison
from gpuguide.verdicts import place as place_of

if TYPE_CHECKING:
    import torch

__all__ = ["Page", "report", "setup"]


@dataclass(frozen=True)
class Page:
    """What a page needs to know about the run: device, small mode, peaks."""

    device: torch.device
    small: bool = False
    _out: TextIO | None = field(default=None, repr=False, compare=False)

    @cached_property
    def info(self) -> DeviceInfo:
        """The device's description (name, memory, CPU model)."""
        return describe_device(self.device)

    @cached_property
    def peaks(self) -> Peaks:
        """The device's peaks: a GPU's datasheet, a CPU's measured ceilings."""
        return device_peaks(self.device)

    @property
    def cuda(self) -> bool:
        """Whether the page runs on a CUDA GPU."""
        return self.device.type == "cuda"

    def needs_cuda(self, lesson: str) -> bool:
        """Whether ``lesson`` can run here; on another device, say so in one line."""
        if not isinstance(lesson, str) or not lesson.strip():
            msg = f"lesson must be a non-empty string, got {lesson!r}"
            raise ValueError(msg)
        if self.cuda:
            return True
        print(
            f"{lesson}: needs a CUDA GPU, and this run is on {self.info.short_name}; "
            "this part does not run here.",
            file=self._out or sys.stdout,
        )
        return False


_current: list[Page] = []


def setup(
    prefer: str | torch.device | None = None,
    *,
    seed: int | None = 0,
    file: TextIO | None = None,
) -> Page:
    """A page's first call: pick the device (``prefer`` as for
    :func:`gpuguide.pick_device`), seed torch (unless ``seed`` is None), apply
    the plot style (:func:`gpuguide.plotting.apply_style`) before any figure is
    drawn, and print the provenance on one compact line."""
    import torch

    device = pick_device(prefer)
    if seed is not None:
        torch.manual_seed(checks.integer("seed", seed, minimum=0))
    page = Page(device, small_mode(), file)
    apply_style()
    print(provenance(device), file=file or sys.stdout)
    _current[:] = [page]
    return page


def current() -> Page | None:
    """The page set up last in this process (:func:`setup`), if any."""
    return _current[0] if _current else None


def _peaks_for(device: str) -> Peaks:
    """The peaks of the set-up page's device (measured once), else of ``device``."""
    for page in _current:
        if page.device.type == device.split(":")[0]:
            return page.peaks
    return device_peaks(device)


def _quoted_text(quoted: tuple[float, float], unit: str) -> str:
    low, high = quoted
    if unit == "x":
        return f"{low:g}-{high:g}x"
    if unit == "s" or unit.endswith("/s"):
        return " to ".join(format_value(end, unit) for end in quoted)
    return f"{low:g}-{high:g} {unit}"


def _checked_spread(spread: tuple[float, float]) -> tuple[float, float]:
    low, high = (float(end) for end in spread)
    if not (math.isfinite(low) and math.isfinite(high)) or high < low:
        msg = f"spread must be finite (low, high) with low <= high, got {spread!r}"
        raise ValueError(msg)
    return low, high


def report(
    name: str,
    value: Rate | Measurement | Comparison | float,
    *,
    unit: str | None = None,
    spread: tuple[float, float] | None = None,
    peak: str | None = None,
    quoted: tuple[float, float] | None = None,
    size: ConfigValue | None = None,
    file: TextIO | None = None,
    host: bool | None = None,
    **config: ConfigValue,
) -> None:
    """Print one headline figure with its spread, share of peak and verdict; record it.

    Returns nothing, so that a cell ending with the call shows only the line.

    Parameters
    ----------
    value : Rate, Measurement, Comparison or float
        A measured object brings its unit and spread; a plain number needs
        ``unit`` (and may have a ``spread``).
    peak : str, optional
        A peak's name (``"bf16"``, ``"memory"``) of the measuring device: the
        line gives the figure's share of it (:meth:`gpuguide.peaks.Peaks.share`).
    quoted : (float, float), optional
        A published range: the line says whether the figure is above, within
        or below it.
    host : bool, optional
        Whether a GPU machine measured the figure on its host CPU
        (:func:`gpuguide.record`); a measured object made on the CPU says so itself.
    **config : str, int, float or bool
        What identifies the figure beside its name (``dtype="bf16"``).
    """
    low = high = device = None
    if spread is not None and not isinstance(value, (int, float)):
        msg = f"spread is for a plain number; a {type(value).__name__} brings its own"
        raise ValueError(msg)
    if isinstance(value, Rate):
        number, unit, low, high = value.value, value.unit, value.low, value.high
        device = value.device
        text = str(value)
    elif isinstance(value, Measurement):
        number, unit, low, high = value.median_s, "s", value.q25_s, value.q75_s
        text = format_spread(number, low, high, unit)
    elif isinstance(value, Comparison):
        number, unit, low, high = value.speedup, "x", value.low, value.high
        text = str(value)
    else:
        if unit is None:
            msg = f"unit must be given for a plain number (reporting {name!r})"
            raise ValueError(msg)
        number = float(value)
        if not math.isfinite(number):
            msg = f"value must be finite, got {value!r}"
            raise ValueError(msg)
        text = format_value(number, unit)
        if isinstance(value, int) and not isinstance(value, bool) and unit != "B":
            text = f"{value:,} {unit}"  # a count: 2 steps, not 2.00 steps
        if spread is not None:
            low, high = spread = _checked_spread(spread)
            text = format_spread(number, low, high, unit)
    timed = isinstance(value, (Rate, Measurement)) and number > 0
    relative = (high - low) / number if timed and low and high else 0.0
    if relative > NOISY_RELATIVE_IQR:
        text += f" NOISY (spread > {100 * NOISY_RELATIVE_IQR:.0f}% of the median)"
    where = ", ".join(f"{key}={value}" for key, value in config.items())
    where = f" ({where})" if where else ""
    parts = [f"{name}{where}: {text}"]
    if peak is not None:
        peaks = _peaks_for(device or "cpu")
        parts.append(peaks.share(number, peak, peak=f"the {peak} peak"))
    if quoted is not None:
        lo, hi = (number, number) if low is None or high is None else (low, high)
        place = place_of((lo, hi), quoted)
        against = " against" if place == TOO_WIDE else ""
        parts.append(f"{place}{against} the quoted {_quoted_text(quoted, unit)}")
    print(", ".join(parts), file=file or sys.stdout)
    plain = not isinstance(value, (Rate, Measurement, Comparison))
    extra: dict[str, Any] = dict(config)  # typed apart from record's own keywords
    record(
        name,
        number if plain else value,
        unit=unit if plain else None,
        spread=spread,
        size=size,
        peak=peak,
        host=host,
        **extra,
    )
