"""Pick problem sizes that fit the device: memory, time per call and small mode.

Examples ask for a :class:`SizeBudget` (a share of the free memory and a time per
call), then let :func:`sweep` keep the sizes of a geometric range that fit it. The
same script therefore runs with large sizes on an H100 and small ones on a laptop
CPU, and with tiny ones when ``GPUGUIDE_SMALL=1`` (tests, quick docs builds).

Examples
--------
>>> from gpuguide.sizes import SizeBudget, sweep
>>> budget = SizeBudget(device="cpu", memory_bytes=2**20, call_s=0.02, small=False)
>>> sweep(16, 1024, budget=budget, bytes_at=lambda n: 3 * 4 * n * n)
[16, 32, 64, 128, 256]
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from gpuguide.peaks import Peaks

__all__ = [
    "SizeBudget",
    "estimate_seconds",
    "free_memory_bytes",
    "size_budget",
    "small_mode",
    "sweep",
]

_SMALL_VALUES = frozenset({"1", "true", "yes", "on"})
#: Memory cap in small mode, in bytes.
SMALL_MEMORY_BYTES = 64 * 2**20
#: Time-per-call cap in small mode, in seconds.
SMALL_CALL_S = 0.002
_DEFAULT_CALL_S = {"cpu": 0.02, "mps": 0.05, "cuda": 0.05}
#: Rates assumed when the device's peaks are unknown (deliberately low, so that
#: planned sizes stay small): FLOP/s and bytes/s.
FALLBACK_FLOPS = 1e11
FALLBACK_BYTES_PER_S = 1e10
_FALLBACK_FREE_BYTES = 2**30

_MEMINFO = "/proc/meminfo"
_CGROUP_MAX = "/sys/fs/cgroup/memory.max"
_CGROUP_CURRENT = "/sys/fs/cgroup/memory.current"


def small_mode() -> bool:
    """Whether the environment asks for small sizes.

    Returns
    -------
    bool
        True when ``GPUGUIDE_SMALL`` is ``1``, ``true``, ``yes`` or ``on``
        (case-insensitive).
    """
    return os.environ.get("GPUGUIDE_SMALL", "").strip().lower() in _SMALL_VALUES


@dataclass(frozen=True)
class SizeBudget:
    """How much an example may use per problem size.

    Attributes
    ----------
    device : str
        ``"cpu"``, ``"cuda:0"`` or ``"mps"``.
    memory_bytes : int
        Bytes one problem size may allocate.
    call_s : float
        Seconds one call may take.
    small : bool
        Whether small mode capped the budget.
    """

    device: str
    memory_bytes: int
    call_s: float
    small: bool

    def __str__(self) -> str:
        from gpuguide.units import format_bytes, format_time

        mode = ", small mode" if self.small else ""
        return (
            f"{format_bytes(self.memory_bytes)} and {format_time(self.call_s)} "
            f"per call on {self.device}{mode}"
        )


def _meminfo_available_bytes(text: str) -> int | None:
    """Available memory from the text of ``/proc/meminfo``, in bytes.

    ``MemAvailable`` (Linux >= 3.14) where present, else ``MemFree + Buffers +
    Cached``; None if neither can be read.
    """
    fields = {
        m.group(1): int(m.group(2)) * 1024
        for m in re.finditer(r"^(\w+):\s+(\d+)\s+kB", text, flags=re.MULTILINE)
    }
    if "MemAvailable" in fields:
        return fields["MemAvailable"]
    if "MemFree" in fields:
        return fields["MemFree"] + fields.get("Buffers", 0) + fields.get("Cached", 0)
    return None


def _cgroup_available_bytes(max_text: str, current_text: str) -> int | None:
    """Room left under a cgroup v2 memory limit (None when unlimited)."""
    limit = max_text.strip()
    if limit == "max" or not limit.isdigit() or not current_text.strip().isdigit():
        return None
    return max(int(limit) - int(current_text.strip()), 0)


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return None


def _cpu_free_bytes() -> int:
    candidates = []
    meminfo = _read_text(_MEMINFO)
    if meminfo is not None:
        candidates.append(_meminfo_available_bytes(meminfo))
    cg_max, cg_current = _read_text(_CGROUP_MAX), _read_text(_CGROUP_CURRENT)
    if cg_max is not None and cg_current is not None:
        candidates.append(_cgroup_available_bytes(cg_max, cg_current))
    known = [c for c in candidates if c is not None]
    if known:
        return min(known)
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return _FALLBACK_FREE_BYTES


def free_memory_bytes(device: torch.device | str | None = None) -> int:
    """Memory free on a device, in bytes.

    Parameters
    ----------
    device : torch.device or str or None
        None picks the default device (:func:`gpuguide.device.pick_device`).

    Returns
    -------
    int
        CUDA: free bytes from ``torch.cuda.mem_get_info``. MPS: the recommended
        working set minus what the driver already holds. CPU: ``MemAvailable``
        from ``/proc/meminfo`` (capped by a cgroup v2 limit where one is set),
        falling back to ``sysconf`` free pages, then to 1 GiB.
    """
    import torch

    from gpuguide.device import as_device  # device imports peaks, which imports us

    dev = as_device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free)
    if dev.type == "mps":
        room = torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory()
        return max(int(room), 0)
    return int(_cpu_free_bytes())


def _device_string(dev: torch.device) -> str:
    if dev.type == "cuda":
        import torch

        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return f"cuda:{index}"
    return dev.type


def size_budget(
    device: torch.device | str | None = None,
    *,
    memory_fraction: float = 0.25,
    call_s: float | None = None,
    small: bool | None = None,
) -> SizeBudget:
    """The memory and time one problem size may use on a device.

    Parameters
    ----------
    device : torch.device or str or None
        None picks the default device.
    memory_fraction : float
        Share of the free memory (``0 < memory_fraction <= 1``).
    call_s : float or None
        Seconds one call may take; None uses 0.02 s on CPU and 0.05 s on
        CUDA and MPS.
    small : bool or None
        Cap the budget at 64 MiB and 2 ms per call; None follows
        :func:`small_mode`.

    Returns
    -------
    SizeBudget

    Raises
    ------
    ValueError
        If ``memory_fraction`` is outside ``(0, 1]`` or ``call_s`` is not a
        positive finite number.
    """
    if not (0 < memory_fraction <= 1):
        msg = f"memory_fraction must be in (0, 1], got {memory_fraction!r}"
        raise ValueError(msg)
    if call_s is not None and not (math.isfinite(call_s) and call_s > 0):
        msg = f"call_s must be a positive finite number of seconds, got {call_s!r}"
        raise ValueError(msg)
    from gpuguide.device import as_device  # device imports peaks, which imports us

    dev = as_device(device)
    if small is None:
        small = small_mode()
    seconds = call_s if call_s is not None else _DEFAULT_CALL_S.get(dev.type, 0.02)
    memory = int(memory_fraction * free_memory_bytes(dev))
    if small:
        memory = min(memory, SMALL_MEMORY_BYTES)
        seconds = min(seconds, SMALL_CALL_S)
    return SizeBudget(
        device=_device_string(dev), memory_bytes=memory, call_s=seconds, small=small
    )


def _check_amount(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        msg = f"{name} must be a finite number >= 0, got {value!r}"
        raise ValueError(msg)


def estimate_seconds(
    *,
    flop: float = 0.0,
    nbytes: float = 0.0,
    peaks: Peaks | None,
    efficiency: float = 0.5,
) -> float:
    """Roofline estimate of one call's time, for planning sizes (not a result).

    ``max(flop / peak_flops, nbytes / peak_bandwidth) / efficiency``, where
    ``peak_flops`` is the fp32 figure of ``peaks``. Unknown figures (or
    ``peaks=None``) fall back to 1e11 FLOP/s and 1e10 bytes/s, low enough that
    the planned sizes stay affordable on any device.

    Parameters
    ----------
    flop : float
        Floating-point operations per call.
    nbytes : float
        Bytes moved to and from memory per call.
    peaks : Peaks or None
        The device's peaks (:func:`gpuguide.peaks.device_peaks`).
    efficiency : float
        Share of the peak expected (``0 < efficiency <= 1``).

    Returns
    -------
    float
        Seconds.

    Raises
    ------
    ValueError
        For a negative or non-finite ``flop``/``nbytes`` or ``efficiency``
        outside ``(0, 1]``.
    """
    _check_amount("flop", flop)
    _check_amount("nbytes", nbytes)
    if not (0 < efficiency <= 1):
        msg = f"efficiency must be in (0, 1], got {efficiency!r}"
        raise ValueError(msg)
    peak_flops = None
    peak_bandwidth = None
    if peaks is not None:
        peak_flops = peaks.flops.get("fp32")
        peak_bandwidth = peaks.memory_bandwidth_bytes_per_s
    if not peak_flops or peak_flops <= 0:
        peak_flops = FALLBACK_FLOPS
    if not peak_bandwidth or peak_bandwidth <= 0:
        peak_bandwidth = FALLBACK_BYTES_PER_S
    return max(flop / peak_flops, nbytes / peak_bandwidth) / efficiency


def _check_int(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{name} must be an int, got {value!r}"
        raise TypeError(msg)
    if value < minimum:
        msg = f"{name} must be >= {minimum}, got {value}"
        raise ValueError(msg)


def _geometric(lo: int, hi: int, per_octave: int, multiple_of: int) -> list[int]:
    sizes: list[int] = []
    i = 0
    while True:
        raw = lo * 2 ** (i / per_octave)
        if raw > hi * (1 + 1e-12):
            break
        n = max(math.floor(raw / multiple_of + 0.5) * multiple_of, multiple_of)
        if n <= hi and (not sizes or n > sizes[-1]):
            sizes.append(n)
        i += 1
    return sizes


def sweep(
    lo: int,
    hi: int,
    *,
    budget: SizeBudget,
    bytes_at: Callable[[int], float],
    seconds_at: Callable[[int], float] | None = None,
    per_octave: int = 1,
    multiple_of: int = 1,
) -> list[int]:
    """Geometric problem sizes from ``lo`` to ``hi`` that fit a budget.

    Candidates are ``lo * 2**(i / per_octave)`` for ``i = 0, 1, ...``, rounded
    to the nearest multiple of ``multiple_of`` (at least ``multiple_of``),
    without duplicates, increasing and ``<= hi``. A candidate ``n`` is kept when
    ``bytes_at(n) <= budget.memory_bytes`` and, if ``seconds_at`` is given,
    ``seconds_at(n) <= budget.call_s``.

    Parameters
    ----------
    lo, hi : int
        Smallest and largest size to consider (``1 <= lo <= hi``).
    budget : SizeBudget
        From :func:`size_budget`.
    bytes_at : callable
        Bytes a problem of size ``n`` allocates.
    seconds_at : callable, optional
        Estimated seconds per call at size ``n`` (e.g. from
        :func:`estimate_seconds`).
    per_octave : int
        Sizes per doubling (>= 1).
    multiple_of : int
        Round sizes to multiples of this (>= 1), e.g. 8 or 64 for tensor cores.

    Returns
    -------
    list of int
        The sizes that fit, increasing.

    Raises
    ------
    ValueError
        If an argument is out of range or no candidate fits the memory budget.
        When sizes fit in memory but even the smallest is estimated to take
        longer than ``budget.call_s``, the smallest is returned alone.
    TypeError
        If ``lo``, ``hi``, ``per_octave`` or ``multiple_of`` is not an int.
    """
    _check_int("lo", lo, 1)
    _check_int("hi", hi, 1)
    _check_int("per_octave", per_octave, 1)
    _check_int("multiple_of", multiple_of, 1)
    if hi < lo:
        msg = f"hi must be >= lo, got lo={lo}, hi={hi}"
        raise ValueError(msg)
    candidates = _geometric(lo, hi, per_octave, multiple_of)
    if not candidates:
        msg = (
            f"no multiple of {multiple_of} lies in [{lo}, {hi}]; "
            "lower multiple_of or widen the range"
        )
        raise ValueError(msg)
    in_memory = [n for n in candidates if bytes_at(n) <= budget.memory_bytes]
    if not in_memory:
        from gpuguide.units import format_bytes

        n = candidates[0]
        msg = (
            f"no size in [{lo}, {hi}] fits the budget ({budget}): the smallest, "
            f"n={n}, needs {format_bytes(bytes_at(n))}; lower lo or raise the budget"
        )
        raise ValueError(msg)
    if seconds_at is None:
        return in_memory
    # Time is an estimate, memory a limit: on a slow or busy machine where even
    # the smallest size looks too slow, run that one size rather than nothing.
    fits = [n for n in in_memory if seconds_at(n) <= budget.call_s]
    return fits or in_memory[:1]
    return fits
