"""A page's setup (:func:`setup`) and its headline figures (:func:`report`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from gpuguide import checks
from gpuguide.device import describe_device, pick_device
from gpuguide.env import small_mode
from gpuguide.peaks import Peaks, device_peaks
from gpuguide.plotting import style_axes
from gpuguide.results import record
from gpuguide.timing import NOISY_RELATIVE_IQR, Measurement, Rate
from gpuguide.units import format_value
from gpuguide.verdicts import Comparison

if TYPE_CHECKING:
    import torch

__all__ = ["Page", "report", "setup"]


@dataclass(frozen=True)
class Page:
    """What a page needs to know about the run: device, small mode, peaks."""

    device: torch.device
    small: bool = False

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
        here = describe_device(self.device).short_name
        print(
            f"{lesson}: needs a CUDA GPU, and this run is on {here}; "
            "this part does not run here."
        )
        return False


_current: list[Page] = []


def setup(prefer: str | torch.device | None = None) -> Page:
    """A page's first call: pick the device (``prefer`` as for
    :func:`gpuguide.pick_device`), seed torch with 0, apply the plot style
    (:func:`gpuguide.plotting.style_axes`) before any figure is drawn, and
    print the provenance on one compact line."""
    import torch

    device = pick_device(prefer)
    torch.manual_seed(0)
    page = Page(device, small_mode())
    style_axes()
    print(describe_device(device).provenance())
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


def _place(interval: tuple[float, float], quoted: tuple[float, float]) -> str:
    """Where ``interval`` lies against ``quoted`` (both ``(low, high)``, > 0): above,
    below or within when it lies there whole, else too wide to place against it."""
    q_low, q_high = (checks.positive("quoted", q) for q in quoted)
    if q_high < q_low:
        msg = f"quoted must be (low, high) with low <= high, got {quoted!r}"
        raise ValueError(msg)
    low, high = interval
    if low > q_high:
        return "above"
    if high < q_low:
        return "below"
    return "within" if q_low <= low and high <= q_high else "too wide to place against"


def report(
    name: str,
    value: Rate | Measurement | Comparison | float,
    *,
    unit: str | None = None,
    spread: tuple[float, float] | None = None,
    peak: str | None = None,
    quoted: tuple[float, float] | None = None,
    size: str | int | float | None = None,
    host: bool | None = None,
    **config: str | int | float | bool,
) -> None:
    """Print one headline figure with its spread, share of peak and verdict; record it
    with :func:`gpuguide.record`, which takes the same arguments (a measured
    object brings its unit and spread; a number needs ``unit``).

    ``peak`` names a peak of the measuring device (``"bf16"``, ``"memory"``):
    the line gives the figure's share of it. ``quoted`` is a published range
    ``(low, high)``: the line says whether the figure is above, within or below
    it. Returns nothing, so that a cell ending with the call shows only the line.
    """
    extra: dict[str, Any] = dict(config)  # typed apart from record's own keywords
    result = record(
        name, value, unit=unit, spread=spread, size=size, peak=peak, host=host, **extra
    )
    number, unit, spread = result.value, result.unit, result.spread
    if isinstance(value, (Rate, Comparison)):
        text = str(value)
    elif spread is not None:
        text = format_value(number, unit, spread)
    elif isinstance(value, int) and unit != "B":
        text = f"{value:,} {unit}"  # a count: 2 steps, not 2.00 steps
    else:
        text = format_value(number, unit)
    timed = isinstance(value, (Rate, Measurement)) and number > 0
    if timed and spread and (spread[1] - spread[0]) / number > NOISY_RELATIVE_IQR:
        text += f" NOISY (spread > {100 * NOISY_RELATIVE_IQR:.0f}% of the median)"
    where = ", ".join(f"{key}={value}" for key, value in config.items())
    parts = [f"{name} ({where}): {text}" if where else f"{name}: {text}"]
    if peak is not None:
        peaks = _peaks_for(value.device if isinstance(value, Rate) else "cpu")
        parts.append(peaks.share(number, peak, peak=f"the {peak} peak"))
    if quoted is not None:
        place = _place(spread or (number, number), quoted)
        parts.append(f"{place} the quoted {_quoted_text(quoted, unit)}")
    print(", ".join(parts))
