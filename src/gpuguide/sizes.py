"""Problem sizes that fit the device: its memory, a time per call, small mode."""

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

__all__ = ["free_memory_bytes", "largest_size", "size_budget", "sweep"]

_SMALL_MEMORY_BYTES = 64 * 2**20  # small mode's caps on one call
_SMALL_CALL_S = 0.002
# The most host memory a plan counts on as free: with the build's own ~1.5 GiB,
# it fits in 4 GB.
_HOST_MEMORY_BYTES = 2 * 2**30
_DEFAULT_CALL_S = {"cpu": 0.02, "mps": 0.05, "cuda": 0.05}
# FLOP/s and bytes/s assumed where the peaks are unknown (low: sizes stay small).
_FALLBACK_FLOPS = 1e11
_FALLBACK_BYTES_PER_S = 1e10


@dataclass(frozen=True)
class SizeBudget:
    """What one problem size may use on ``device``: memory and seconds per call."""

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
    """Memory free on a device (the page's when omitted), in bytes, within the
    ``GPUGUIDE_GPU_MEMORY`` cap on CUDA."""
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


def size_budget(
    device: torch.device | str | None = None,
    *,
    memory_fraction: float = 0.25,
    call_s: float | None = None,
) -> SizeBudget:
    """``memory_fraction`` of a device's free memory and ``call_s`` seconds per call
    (default per device type) for one problem size, capped in small mode."""
    checks.fraction("memory_fraction", memory_fraction)
    if call_s is not None:
        checks.positive("call_s", call_s)
    dev = as_device(device)
    seconds = call_s if call_s is not None else _DEFAULT_CALL_S.get(dev.type, 0.02)
    free = free_memory_bytes(dev)
    if dev.type == "cpu":
        free = min(free, _HOST_MEMORY_BYTES)
    memory = int(memory_fraction * free)
    small = small_mode()
    if small:
        memory = min(memory, _SMALL_MEMORY_BYTES)
        seconds = min(seconds, _SMALL_CALL_S)
    name = dev.type
    if dev.type == "cuda":
        import torch

        name = f"cuda:{torch.cuda.current_device() if dev.index is None else dev.index}"
    return SizeBudget(device=name, memory_bytes=memory, call_s=seconds, small=small)


def _geometric(lo: int, hi: int, per_octave: int, multiple_of: int) -> list[int]:
    steps = math.floor(math.log2(hi / lo) * per_octave + 1e-9)
    raw = (lo * 2 ** (i / per_octave) for i in range(steps + 1))
    rounded = (max(math.floor(r / multiple_of + 0.5), 1) * multiple_of for r in raw)
    return sorted({n for n in rounded if n <= hi})


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
    """The sizes ``lo * 2**(i / per_octave)`` up to ``hi``, multiples of
    ``multiple_of``, whose ``memory_at(n)`` bytes fit the :func:`size_budget` and,
    given ``flop_at`` or ``traffic_at``, whose roofline estimate (FLOP at
    ``flop_per_s``, default the fp32 peak, or bytes at the memory bandwidth, over
    ``efficiency``) fits its time per call (else the smallest alone). ``peaks``
    None plans with low rates. ``ValueError`` if no size fits the memory.
    """
    lo = checks.integer("lo", lo, minimum=1)
    hi = checks.integer("hi", hi, minimum=lo)
    per_octave = checks.integer("per_octave", per_octave, minimum=1)
    multiple_of = checks.integer("multiple_of", multiple_of, minimum=1)
    checks.fraction("efficiency", efficiency)
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
    if flop_per_s is None and peaks is not None:
        flop_per_s = peaks.flops.get("fp32")
    bandwidth = None if peaks is None else peaks.memory_bandwidth_bytes_per_s

    def seconds_at(n: int) -> float:
        flop = checks.non_negative("flop_at(n)", flop_at(n) if flop_at else 0.0)
        moved = checks.non_negative("traffic_at(n)", traffic_at(n) if traffic_at else 0)
        compute_s = flop / (flop_per_s or _FALLBACK_FLOPS)
        return max(compute_s, moved / (bandwidth or _FALLBACK_BYTES_PER_S)) / efficiency

    # Time is an estimate, memory a limit: on a slow or busy machine where even
    # the smallest size looks too slow, run that one size rather than nothing.
    fits = [n for n in in_memory if seconds_at(n) <= budget.call_s]
    return fits or in_memory[:1]


def largest_size(lo: int, hi: int, **kwargs: Any) -> int:
    """The largest size in ``[lo, hi]`` that fits: ``sweep(lo, hi, **kwargs)[-1]``."""
    return sweep(lo, hi, **kwargs)[-1]
