"""gpuguide: the helpers behind an executable guide to making PyTorch fast on GPUs.

The gallery's examples keep their lesson in view and take the plumbing from
here: timing (:mod:`gpuguide.timing`), memory tracking (:mod:`gpuguide.memory`),
device description and provenance (:mod:`gpuguide.device`), datasheet peaks
(:mod:`gpuguide.peaks`), problem sizes (:mod:`gpuguide.sizes`), one plot style
(:mod:`gpuguide.plotting`), readable units (:mod:`gpuguide.units`) and files
for readers to download (:mod:`gpuguide.artifacts`).
"""

from __future__ import annotations

from .artifacts import DownloadLink, artifact_path, download_link
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
    "DownloadLink",
    "Measurement",
    "MemoryReport",
    "Peaks",
    "SizeBudget",
    "__version__",
    "artifact_path",
    "benchmark",
    "bytes_per_s",
    "describe_device",
    "download_link",
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
