"""Measure how much memory a block of code uses, on CUDA, MPS or the CPU."""

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

if TYPE_CHECKING:
    import torch

__all__ = ["release_host_memory", "rss_bytes", "track_memory"]

# Linux files of the CPU path (tests point them elsewhere).
_STATM = "/proc/self/statm"
_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"

_METHODS = {"cuda": "cuda-allocator", "mps": "mps-allocator", "cpu": "process-rss"}


@dataclass(frozen=True)
class MemoryReport:
    """Memory used by a block of code, in bytes; ``peak_bytes`` is None where
    unknown (MPS, or a CPU whose high-water mark cannot be reset)."""

    start_bytes: int
    end_bytes: int
    peak_bytes: int | None

    @property
    def net_bytes(self) -> int:
        return self.end_bytes - self.start_bytes

    @property
    def peak_increase_bytes(self) -> int | None:
        if self.peak_bytes is None:
            return None
        return self.peak_bytes - self.start_bytes


def _maxrss_bytes() -> int:
    # getrusage's peak RSS: KiB on Linux, bytes on macOS
    import resource  # not on Windows

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(maxrss) if sys.platform == "darwin" else int(maxrss) * 1024


def rss_bytes() -> int:
    """Resident set size of this process, in bytes (without /proc: the peak so far)."""
    text = read_text(_STATM)
    if text is None:
        return _maxrss_bytes()
    return int(text.split()[1]) * os.sysconf("SC_PAGE_SIZE")


def release_host_memory() -> bool:
    """Return freed memory to the OS (``malloc_trim(0)``), so RSS falls after tensors
    are freed; True if it was called (glibc on Linux)."""
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
    match = re.search(r"^VmHWM:\s+(\d+)\s+kB", text or "", flags=re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def _reset_hwm() -> bool:
    """Reset the kernel's RSS high-water mark (``VmHWM``); False if refused."""
    if _hwm_bytes() is None:
        return False
    try:
        Path(_CLEAR_REFS).write_text("5", encoding="ascii")
    except OSError:
        return False
    return True


class _Tracker:
    """Tracks memory over a ``with`` block (``backend``: a fake ``torch.cuda``)."""

    def __init__(
        self, device: torch.device | str | None = None, *, backend: Any = None
    ) -> None:
        import torch

        dev = as_device(device)
        if dev.type not in _METHODS:
            msg = f"device type must be cpu, cuda or mps, got {dev.type!r}"
            raise ValueError(msg)
        self.method = _METHODS[dev.type]
        self._type = dev.type
        self._api = getattr(torch, dev.type) if backend is None else backend
        self._index = dev.index
        if dev.type == "cuda" and dev.index is None:
            self._index = self._api.current_device()
        self.report: MemoryReport | None = None

    def _now(self, *, reset: bool = False) -> int:
        if self._type == "cuda":
            self._api.synchronize(self._index)
            if reset:
                self._api.reset_peak_memory_stats(self._index)
            return int(self._api.memory_allocated(self._index))
        if self._type == "mps":
            self._api.synchronize()
            return int(self._api.current_allocated_memory())
        return rss_bytes()

    def __enter__(self) -> _Tracker:
        self.report = None
        if self._type == "cpu":
            release_host_memory()
        self._uses_hwm = self._type == "cpu" and _reset_hwm()
        self._start = self._now(reset=True)
        return self

    def __exit__(self, *exc_info: object) -> None:
        end = self._now()
        peak = None
        if self._type == "cuda":
            peak = max(int(self._api.max_memory_allocated(self._index)), end)
        elif self._uses_hwm and (hwm := _hwm_bytes()) is not None:
            peak = max(hwm, self._start, end)
        self.report = MemoryReport(self._start, end, peak)


def track_memory(device: torch.device | str | None = None) -> _Tracker:
    """Measure the memory a ``with`` block uses on ``device`` (by default the page's):
    the tracker's ``report`` is a :class:`MemoryReport` once the block ends.

    CUDA: the caching allocator's counters (tensors only: not the CUDA context,
    library workspaces or other processes). MPS: allocated memory, no peak. CPU:
    the whole process's RSS (Python objects and what the C allocator keeps too),
    its peak from the kernel's high-water mark, unknown where that cannot be
    reset. Blocks do not nest: each resets a process-wide peak counter.
    """
    return _Tracker(device)
