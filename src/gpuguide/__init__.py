"""gpuguide: the helpers behind an executable guide to making PyTorch fast on GPUs.

The gallery's examples keep their lesson in view and take the plumbing from here,
in three layers, each importing only from the ones before: the foundation
(:mod:`~gpuguide.env`, :mod:`~gpuguide.host`, :mod:`~gpuguide.units`,
:mod:`~gpuguide.checks`, :mod:`~gpuguide.quiet`, :mod:`~gpuguide.version`),
the core (:mod:`~gpuguide.device`, :mod:`~gpuguide.timing`, :mod:`~gpuguide.memory`,
:mod:`~gpuguide.peaks`, :mod:`~gpuguide.sizes`, :mod:`~gpuguide.plotting`,
:mod:`~gpuguide.tables`, :mod:`~gpuguide.verdicts`, :mod:`~gpuguide.artifacts`,
:mod:`~gpuguide.results`, :mod:`~gpuguide.page`, :mod:`~gpuguide.claims`) and
:mod:`gpuguide.chapters`, helpers that serve one chapter each. This namespace
exports the core and the foundation's most used names. Importing it ignores
torch's warnings about its own code
(:func:`~gpuguide.quiet.ignore_torch_internal_warnings`), so that they cannot fail
a page run with ``-W error``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuguide.artifacts import artifact_path, download_link
from gpuguide.claims import claim, takeaway
from gpuguide.device import describe_device, pick_device
from gpuguide.host import usable_cpus
from gpuguide.memory import release_host_memory, track_memory
from gpuguide.page import Page, report, setup
from gpuguide.peaks import Peaks, device_peaks
from gpuguide.plotting import label_device, plot_bars, plot_sweep
from gpuguide.quiet import ignore_torch_internal_warnings
from gpuguide.results import record
from gpuguide.sizes import largest_size, size_budget, sweep
from gpuguide.sweeps import Sweep, SweepResult, Variant
from gpuguide.tables import Table, table
from gpuguide.timing import Measurement, Rate, benchmark
from gpuguide.units import format_bytes, format_ratio, format_time, format_value
from gpuguide.verdicts import Comparison, break_even, compare, interleave
from gpuguide.version import __version__

ignore_torch_internal_warnings()


def diagnose(step: Callable[[], object], **options: Any) -> Any:
    """Diagnose one training step in this process, as ``python -m gpuguide diagnose``
    does a script's: :func:`gpuguide_tools.diagnose.diagnose`, loaded on first call."""
    from gpuguide_tools.diagnose import diagnose as run

    return run(step, **options)


__all__ = [
    "Comparison",
    "Measurement",
    "Page",
    "Peaks",
    "Rate",
    "Sweep",
    "SweepResult",
    "Table",
    "Variant",
    "__version__",
    "artifact_path",
    "benchmark",
    "break_even",
    "claim",
    "compare",
    "describe_device",
    "device_peaks",
    "diagnose",
    "download_link",
    "format_bytes",
    "format_ratio",
    "format_time",
    "format_value",
    "interleave",
    "label_device",
    "largest_size",
    "pick_device",
    "plot_bars",
    "plot_sweep",
    "record",
    "release_host_memory",
    "report",
    "setup",
    "size_budget",
    "sweep",
    "table",
    "takeaway",
    "track_memory",
    "usable_cpus",
]
