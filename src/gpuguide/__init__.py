"""gpuguide: the helpers behind an executable guide to making PyTorch fast on GPUs.

The gallery's examples keep their lesson in view and take the plumbing from
here: timing (:mod:`gpuguide.timing`), memory tracking (:mod:`gpuguide.memory`),
device description and provenance (:mod:`gpuguide.device`), datasheet peaks
(:mod:`gpuguide.peaks`), problem sizes (:mod:`gpuguide.sizes`), one plot style
(:mod:`gpuguide.plotting`) and readable units (:mod:`gpuguide.units`).
"""

from __future__ import annotations

from .device import DeviceInfo, describe_device, pick_device, provenance
from .memory import MemoryReport, track_memory
from .peaks import Peaks, device_peaks, percent_of_peak
from .plotting import label_device, plot_bars, plot_sweep
from .sizes import SizeBudget, estimate_seconds, size_budget, small_mode, sweep
from .timing import Measurement, benchmark, bytes_per_s, flops_per_s, matmul_flop
from .units import format_bytes, format_rate, format_ratio, format_time

__version__ = "0.1.0"

__all__ = [
    "DeviceInfo",
    "Measurement",
    "MemoryReport",
    "Peaks",
    "SizeBudget",
    "__version__",
    "benchmark",
    "bytes_per_s",
    "describe_device",
    "device_peaks",
    "estimate_seconds",
    "flops_per_s",
    "format_bytes",
    "format_rate",
    "format_ratio",
    "format_time",
    "label_device",
    "matmul_flop",
    "percent_of_peak",
    "pick_device",
    "plot_bars",
    "plot_sweep",
    "provenance",
    "size_budget",
    "small_mode",
    "sweep",
    "track_memory",
]
