"""Pick problem sizes that fit the device: its memory, a time per call, small mode.

A page describes its problem by what one size ``n`` needs, and lets gpuguide
find the sizes that fit: :func:`largest_size` answers "the largest size that
fits this device's memory and time budget", :func:`sweep` returns every size of
a geometric range that fits. ``memory_at(n)`` is the bytes a size allocates;
``flop_at(n)`` and ``traffic_at(n)`` are the FLOP and the bytes moved by one
call, from which the time of a call is estimated with the device's peaks (a
roofline estimate, :func:`estimate_seconds`). The same script therefore runs
with large sizes on an H100, small ones on a laptop CPU, and tiny ones when
``GPUGUIDE_SMALL=1`` (tests, quick docs builds). ``GPUGUIDE_GPU_MEMORY=16GiB``
makes a large GPU plan as a 16 GiB one would (:func:`free_memory_bytes`), and host
memory is planned as if at most :data:`HOST_MEMORY_BYTES` were free, so that the
whole CPU build fits in 4 GB whatever the machine.

Examples
--------
>>> from gpuguide.sizes import SizeBudget, largest_size, sweep
>>> budget = SizeBudget(device="cpu", memory_bytes=2**20, call_s=0.02, small=False)
>>> sweep(16, 1024, budget=budget, memory_at=lambda n: 3 * 4 * n * n)
[16, 32, 64, 128, 256]
>>> largest_size(16, 1024, budget=budget, memory_at=lambda n: 3 * 4 * n * n)
256
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gpuguide import checks, host
from gpuguide.device import apply_memory_cap, as_device
from gpuguide.env import small_mode
from gpuguide.peaks import Peaks, device_peaks
from gpuguide.units import format_bytes, format_time

if TYPE_CHECKING:
    import torch

__all__ = [
    "SizeBudget",
    "estimate_seconds",
    "free_memory_bytes",
    "largest_size",
    "size_budget",
    "sweep",
]

#: Memory cap in small mode, in bytes.
SMALL_MEMORY_BYTES = 64 * 2**20
#: Time-per-call cap in small mode, in seconds.
SMALL_CALL_S = 0.002
#: The most host memory a plan counts on as free, in bytes: a quarter of it (512
#: MiB) per problem size by default. With the build's own ~1-1.5 GiB (Python,
#: torch, Sphinx, inductor), the CPU build then fits in 4 GB on any machine.
HOST_MEMORY_BYTES = 2 * 2**30
_DEFAULT_CALL_S = {"cpu": 0.02, "mps": 0.05, "cuda": 0.05}
#: Rates assumed when the device's peaks are unknown (deliberately low, so that
#: planned sizes stay small): FLOP/s and bytes/s.
FALLBACK_FLOPS = 1e11
FALLBACK_BYTES_PER_S = 1e10


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
        mode = ", small mode" if self.small else ""
        return (
            f"{format_bytes(self.memory_bytes)} and {format_time(self.call_s)} "
            f"per call on {self.device}{mode}"
        )


def free_memory_bytes(device: torch.device | str | None = None) -> int:
    """Memory free on a device, in bytes.

    Parameters
    ----------
    device : torch.device or str or None
        None picks the default device (:func:`gpuguide.device.pick_device`).

    Returns
    -------
    int
        CUDA: free bytes from ``torch.cuda.mem_get_info``; where
        ``GPUGUIDE_GPU_MEMORY`` caps the GPU
        (:func:`gpuguide.device.apply_memory_cap`, applied here if it was not
        yet), at most the cap minus what this process's allocator already
        reserved. MPS: the recommended working set minus what the driver already
        holds. CPU: :func:`gpuguide.host.available_memory_bytes`.
    """
    import torch

    dev = as_device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        cap = apply_memory_cap(dev)
        if cap is not None:
            # The allocator's limit counts what it reserved, cached blocks too.
            free = min(free, max(cap - torch.cuda.memory_reserved(dev), 0))
        return int(free)
    if dev.type == "mps":
        room = torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory()
        return max(int(room), 0)
    return host.available_memory_bytes()


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
        Share of the free memory (:func:`free_memory_bytes`; on the CPU at most
        :data:`HOST_MEMORY_BYTES`), ``0 < memory_fraction <= 1``.
    call_s : float or None
        Seconds one call may take; None uses 0.02 s on CPU and 0.05 s on
        CUDA and MPS.
    small : bool or None
        Cap the budget at 64 MiB and 2 ms per call; None follows
        :func:`gpuguide.env.small_mode`.

    Returns
    -------
    SizeBudget
        A ``memory_fraction`` outside ``(0, 1]`` or a ``call_s`` that is not a
        positive finite number raises a ``ValueError``.
    """
    checks.fraction("memory_fraction", memory_fraction)
    if call_s is not None:
        checks.positive("call_s", call_s)
    dev = as_device(device)
    if small is None:
        small = small_mode()
    seconds = call_s if call_s is not None else _DEFAULT_CALL_S.get(dev.type, 0.02)
    free = free_memory_bytes(dev)
    if dev.type == "cpu":
        free = min(free, HOST_MEMORY_BYTES)
    memory = int(memory_fraction * free)
    if small:
        memory = min(memory, SMALL_MEMORY_BYTES)
        seconds = min(seconds, SMALL_CALL_S)
    return SizeBudget(
        device=_device_string(dev), memory_bytes=memory, call_s=seconds, small=small
    )


def estimate_seconds(
    *,
    flop: float = 0.0,
    nbytes: float = 0.0,
    peaks: Peaks | None,
    efficiency: float = 0.5,
    flop_per_s: float | None = None,
) -> float:
    """Roofline estimate of one call's time, for planning sizes (not a result).

    ``max(flop / peak_flops, nbytes / peak_bandwidth) / efficiency``, where
    ``peak_flops`` is ``flop_per_s`` if given, else the fp32 figure of
    ``peaks``. Unknown figures (or ``peaks=None``) fall back to 1e11 FLOP/s and
    1e10 bytes/s, low enough that the planned sizes stay affordable anywhere.

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
    flop_per_s : float, optional
        The compute rate to plan with, e.g. another dtype's peak.

    Returns
    -------
    float
        Seconds. A negative or non-finite ``flop`` or ``nbytes``, or an
        ``efficiency`` outside ``(0, 1]``, raises a ``ValueError``.
    """
    flop = checks.non_negative("flop", flop)
    nbytes = checks.non_negative("nbytes", nbytes)
    checks.fraction("efficiency", efficiency)
    peak_bandwidth = None if peaks is None else peaks.memory_bandwidth_bytes_per_s
    if flop_per_s is None and peaks is not None:
        flop_per_s = peaks.flops.get("fp32")
    return (
        max(
            flop / (flop_per_s or FALLBACK_FLOPS),
            nbytes / (peak_bandwidth or FALLBACK_BYTES_PER_S),
        )
        / efficiency
    )


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
    memory_at: Callable[[int], float],
    flop_at: Callable[[int], float] | None = None,
    traffic_at: Callable[[int], float] | None = None,
    device: torch.device | str | None = None,
    call_s: float | None = None,
    budget: SizeBudget | None = None,
    peaks: Peaks | Literal["device"] | None = "device",
    flop_per_s: float | None = None,
    efficiency: float = 0.5,
    per_octave: int = 1,
    multiple_of: int = 1,
) -> list[int]:
    """Geometric problem sizes from ``lo`` to ``hi`` that fit the device.

    Candidates are ``lo * 2**(i / per_octave)`` for ``i = 0, 1, ...``, rounded
    to the nearest multiple of ``multiple_of`` (at least ``multiple_of``),
    without duplicates, increasing and ``<= hi``. A candidate ``n`` is kept when
    ``memory_at(n)`` fits the budget's memory and, if ``flop_at`` or
    ``traffic_at`` is given, when the estimated time of one call
    (:func:`estimate_seconds`) fits its time per call.

    Parameters
    ----------
    lo, hi : int
        Smallest and largest size to consider (``1 <= lo <= hi``).
    memory_at : callable
        Bytes a problem of size ``n`` allocates.
    flop_at, traffic_at : callable, optional
        FLOP and bytes moved to and from memory by one call at size ``n``.
    device : torch.device or str, optional
        The device; :func:`gpuguide.device.pick_device` chooses when omitted.
    call_s : float, optional
        Seconds one call may take (see :func:`size_budget` for the default).
    budget : SizeBudget, optional
        An explicit budget instead of ``size_budget(device, call_s=call_s)``.
    peaks : Peaks or None
        The rates the time estimate plans with: by default the device's
        (:func:`gpuguide.peaks.device_peaks`); None plans with deliberately low
        fallback rates, which keeps a plan independent of a CPU's current load.
    flop_per_s : float, optional
        The compute rate to plan with instead of the fp32 peak (another dtype's).
    efficiency : float
        Share of the peak a call is expected to reach (``0 < efficiency <= 1``).
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
        longer than the time per call, the smallest is returned alone.
    TypeError
        If ``lo``, ``hi``, ``per_octave`` or ``multiple_of`` is not an int.
    """
    lo = checks.integer("lo", lo, minimum=1)
    hi = checks.integer("hi", hi, minimum=lo)
    per_octave = checks.integer("per_octave", per_octave, minimum=1)
    multiple_of = checks.integer("multiple_of", multiple_of, minimum=1)
    candidates = _geometric(lo, hi, per_octave, multiple_of)
    if not candidates:
        msg = (
            f"[lo, hi] must hold a multiple of {multiple_of}, got [{lo}, {hi}]; "
            "lower multiple_of or widen the range"
        )
        raise ValueError(msg)
    if budget is None:
        budget = size_budget(device, call_s=call_s)
    in_memory = [n for n in candidates if memory_at(n) <= budget.memory_bytes]
    if not in_memory:
        n = candidates[0]
        msg = (
            f"the smallest size, n={n}, must fit the budget ({budget}), but needs "
            f"{format_bytes(memory_at(n))}; lower lo or raise the budget"
        )
        raise ValueError(msg)
    if flop_at is None and traffic_at is None:
        return in_memory
    if peaks == "device":
        peaks = device_peaks(budget.device if device is None else device)

    def seconds_at(n: int) -> float:
        return estimate_seconds(
            flop=flop_at(n) if flop_at else 0.0,
            nbytes=traffic_at(n) if traffic_at else 0.0,
            peaks=peaks,
            efficiency=efficiency,
            flop_per_s=flop_per_s,
        )

    # Time is an estimate, memory a limit: on a slow or busy machine where even
    # the smallest size looks too slow, run that one size rather than nothing.
    fits = [n for n in in_memory if seconds_at(n) <= budget.call_s]
    return fits or in_memory[:1]


def largest_size(lo: int, hi: int, **kwargs: Any) -> int:
    """The largest size in ``[lo, hi]`` that fits this device's memory and time.

    ``sweep(lo, hi, **kwargs)[-1]``: it takes :func:`sweep`'s arguments
    (``memory_at``, ``flop_at``, ``traffic_at``, ``device``, ``call_s``, ...) and
    raises as it does. When only ``lo`` fits in memory but is estimated to be too
    slow, that is the answer.
    """
    return sweep(lo, hi, **kwargs)[-1]
