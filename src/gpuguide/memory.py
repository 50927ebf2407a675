"""Measure how much memory a block of code uses, on CUDA, MPS or the CPU.

:func:`track_memory` reads PyTorch's allocator counters on CUDA and the process's
resident set size (RSS) on the CPU; a :class:`MemoryReport`'s ``note`` says which.

>>> import torch
>>> with track_memory("cpu") as tracker:
...     x = torch.ones(1024, 1024)
>>> tracker.report.method
'process-rss'
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuguide.device import as_device
from gpuguide.host import read_text
from gpuguide.units import format_bytes

if TYPE_CHECKING:
    import torch

__all__ = ["release_host_memory", "rss_bytes", "track_memory"]

# Linux files of the CPU path (tests point them elsewhere).
_STATM = "/proc/self/statm"
_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"

_CUDA_NOTE = (
    "PyTorch CUDA caching allocator: bytes held by tensors on this device. "
    "Excludes the CUDA context, cuBLAS/cuDNN workspaces outside the allocator and "
    "other processes; the reserved peak includes memory the allocator caches."
)
_MPS_NOTE = (
    "PyTorch MPS allocator: bytes held by tensors at the start and end of the block; "
    "MPS keeps no peak counter, so the peak is unknown."
)
_RSS_NOTE = (
    "Whole-process resident memory (RSS), not just tensors: it includes Python "
    "objects, libraries and allocator caches, and memory freed inside the block may "
    "stay with the C allocator and still count."
)
_PEAK_HWM_NOTE = (
    " Peak from the kernel's high-water mark (VmHWM), reset at block start."
)
_NO_PEAK_NOTE = " Peak unknown: the kernel's high-water mark could not be reset."
_RSS_FALLBACK_NOTE = (
    " /proc is unavailable here: start and end are the process's peak RSS so far "
    "(getrusage), so the net change is only an upper-bound estimate."
)


@dataclass(frozen=True)
class MemoryReport:
    """Memory used by a block of code, in bytes (``peak_bytes`` None where unknown,
    ``reserved_peak_bytes`` on CUDA only); ``note`` says what the numbers see."""

    device: str
    method: str
    start_bytes: int
    end_bytes: int
    peak_bytes: int | None
    reserved_peak_bytes: int | None
    note: str

    @property
    def net_bytes(self) -> int:
        """``end_bytes - start_bytes``."""
        return self.end_bytes - self.start_bytes

    @property
    def peak_increase_bytes(self) -> int | None:
        """``peak_bytes - start_bytes`` (None if unknown)."""
        if self.peak_bytes is None:
            return None
        return self.peak_bytes - self.start_bytes

    def __str__(self) -> str:
        def signed(n: int) -> str:
            return ("+" if n >= 0 else "") + format_bytes(n)

        parts = [
            f"{self.device} ({self.method}): start {format_bytes(self.start_bytes)}, "
            f"end {format_bytes(self.end_bytes)} (net {signed(self.net_bytes)})"
        ]
        increase = self.peak_increase_bytes
        if self.peak_bytes is None or increase is None:
            parts.append("peak unknown")
        else:
            parts.append(f"peak {format_bytes(self.peak_bytes)} ({signed(increase)})")
        if self.reserved_peak_bytes is not None:
            parts.append(f"reserved peak {format_bytes(self.reserved_peak_bytes)}")
        return ", ".join(parts)


def _statm_rss_bytes(text: str) -> int:
    """Resident bytes from the text of ``/proc/self/statm``."""
    return int(text.split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _status_field_bytes(text: str, field: str) -> int | None:
    """A ``kB`` field such as ``VmHWM`` from the text of ``/proc/self/status``."""
    match = re.search(rf"^{field}:\s+(\d+)\s+kB", text, flags=re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def _maxrss_bytes() -> int:
    """Peak RSS of the process from ``getrusage`` (KiB on Linux, bytes on macOS)."""
    import resource  # not on Windows

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(maxrss) if sys.platform == "darwin" else int(maxrss) * 1024


def rss_bytes() -> int:
    """Resident set size of this process, in bytes (without /proc: the peak so far)."""
    text = read_text(_STATM)
    if text is not None:
        return _statm_rss_bytes(text)
    return _maxrss_bytes()


def release_host_memory() -> bool:
    """Ask the C allocator to return freed memory to the OS (``malloc_trim(0)``), so
    RSS falls after tensors are freed; True if it was called (glibc on Linux)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (e.g. musl)
        return None


def _hwm_bytes() -> int | None:
    text = read_text(_STATUS)
    return None if text is None else _status_field_bytes(text, "VmHWM")


def _reset_hwm() -> bool:
    """Reset the kernel's RSS high-water mark (Linux >= 4.0); False if refused."""
    if _hwm_bytes() is None:
        return False
    try:
        Path(_CLEAR_REFS).write_text("5", encoding="ascii")
    except OSError:
        return False
    return True


class MemoryTracker:
    """Tracks memory over a ``with`` block: ``report`` is a :class:`MemoryReport`
    once it exits. ``backend`` replaces ``torch.cuda`` or ``torch.mps`` in tests."""

    report: MemoryReport | None

    def __init__(
        self, device: torch.device | str | None = None, *, backend: Any = None
    ) -> None:
        dev = as_device(device)
        self._type = dev.type
        self._backend = backend
        self._index: int | None = None
        if dev.type == "cuda":
            cuda = self._cuda()
            self._index = dev.index if dev.index is not None else cuda.current_device()
            self.device = f"cuda:{self._index}"
            self.method = "cuda-allocator"
        elif dev.type == "mps":
            self.device = "mps"
            self.method = "mps-allocator"
        elif dev.type == "cpu":
            self.device = "cpu"
            self.method = "process-rss"
        else:
            msg = f"device type must be cpu, cuda or mps, got {dev.type!r}"
            raise ValueError(msg)
        self.report = None
        self._start = 0
        self._uses_hwm = False

    def __repr__(self) -> str:
        state = "running or not started" if self.report is None else str(self.report)
        return f"<MemoryTracker {self.device} ({self.method}): {state}>"

    def _cuda(self) -> Any:
        import torch

        return torch.cuda if self._backend is None else self._backend

    def _mps(self) -> Any:
        import torch

        return torch.mps if self._backend is None else self._backend

    def __enter__(self) -> MemoryTracker:
        self.report = None
        if self._type == "cuda":
            cuda = self._cuda()
            cuda.synchronize(self._index)
            cuda.reset_peak_memory_stats(self._index)
            self._start = int(cuda.memory_allocated(self._index))
        elif self._type == "mps":
            mps = self._mps()
            mps.synchronize()
            self._start = int(mps.current_allocated_memory())
        else:
            release_host_memory()
            self._uses_hwm = _reset_hwm()
            self._start = rss_bytes()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.report = self._finish()

    def _finish(self) -> MemoryReport:
        peak: int | None
        reserved = None
        if self._type == "cuda":
            cuda = self._cuda()
            cuda.synchronize(self._index)
            end = int(cuda.memory_allocated(self._index))
            peak = max(int(cuda.max_memory_allocated(self._index)), end)
            reserved = int(cuda.max_memory_reserved(self._index))
            note = _CUDA_NOTE
        elif self._type == "mps":
            mps = self._mps()
            mps.synchronize()
            end = int(mps.current_allocated_memory())
            peak, note = None, _MPS_NOTE
        else:
            end = rss_bytes()
            note = _RSS_NOTE
            hwm = _hwm_bytes() if self._uses_hwm else None
            peak = None if hwm is None else max(hwm, self._start, end)
            note += _NO_PEAK_NOTE if peak is None else _PEAK_HWM_NOTE
            if read_text(_STATM) is None:
                note += _RSS_FALLBACK_NOTE
        return MemoryReport(
            self.device, self.method, self._start, end, peak, reserved, note
        )


def track_memory(device: torch.device | str | None = None) -> MemoryTracker:
    """Measure the memory a ``with`` block uses on ``device`` (by default the page's).

    CUDA: the allocator's counters. MPS: allocated memory, no peak. CPU: the RSS,
    its peak from the kernel's high-water mark (unknown where it cannot be reset).
    Blocks do not nest: each resets a process-wide peak counter.

    >>> import torch
    >>> with track_memory("cpu") as t:
    ...     x = torch.ones(256, 1024, 1024, dtype=torch.uint8)
    >>> t.report.net_bytes > 200 * 2**20
    True
    """
    return MemoryTracker(device)
