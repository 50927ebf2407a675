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
from .compiling import CompilerStart, print_recompiles, start_compiler
from .data import SyntheticImages
from .device import DeviceInfo, describe_device, pick_device, provenance
from .distributed import DDPConfig, DDPReport, free_port, run_workers
from .memory import MemoryReport, release_host_memory, track_memory
from .peaks import Peaks, device_peaks, percent_of_peak
from .plotting import label_device, plot_bars, plot_sweep
from .roofline import (
    RooflinePoint,
    classify,
    percent_of_roof,
    plot_roofline,
    ridge_intensity,
)
from .sizes import SizeBudget, estimate_seconds, size_budget, small_mode, sweep
from .snapshot import MemoryTimeline, memory_timeline, plot_memory_timeline
from .spawning import spawn_safe, usable_cpus
from .timeline import Span, busy_s, overlap_s, plot_timeline, record_timeline
from .timing import Measurement, benchmark, bytes_per_s, flops_per_s, matmul_flop
from .units import format_bytes, format_rate, format_ratio, format_time

__version__ = "0.1.0"

__all__ = [
    "CompilerStart",
    "DDPConfig",
    "DDPReport",
    "DeviceInfo",
    "DownloadLink",
    "Measurement",
    "MemoryReport",
    "MemoryTimeline",
    "Peaks",
    "RooflinePoint",
    "SizeBudget",
    "Span",
    "SyntheticImages",
    "__version__",
    "artifact_path",
    "benchmark",
    "busy_s",
    "bytes_per_s",
    "classify",
    "describe_device",
    "device_peaks",
    "download_link",
    "estimate_seconds",
    "flops_per_s",
    "format_bytes",
    "format_rate",
    "format_ratio",
    "format_time",
    "free_port",
    "label_device",
    "matmul_flop",
    "memory_timeline",
    "overlap_s",
    "percent_of_peak",
    "percent_of_roof",
    "pick_device",
    "plot_bars",
    "plot_memory_timeline",
    "plot_roofline",
    "plot_sweep",
    "plot_timeline",
    "print_recompiles",
    "provenance",
    "record_timeline",
    "release_host_memory",
    "ridge_intensity",
    "run_workers",
    "size_budget",
    "small_mode",
    "spawn_safe",
    "start_compiler",
    "sweep",
    "track_memory",
    "usable_cpus",
]
