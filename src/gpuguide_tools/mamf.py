"""The best matmul rate a device reaches: a small search over matmul shapes.

Square matmuls are not where a GPU runs fastest. How well an ``(m, k) @ (k, n)``
product fills the GPU depends on how its output tiles divide among the SMs and
on how long ``k`` keeps each tile busy, and a long run of large squares heats
the chip until its clock drops. Stas Bekman's MAMF finder (*ml-engineering*,
"maximum achievable matmul FLOPS") therefore times many shapes, each in short
bursts, and reports the best one. This module does the same, much more
cheaply, so that a page can afford it:

1. :func:`matmul_shapes` takes the ``levels`` largest sizes of a doubling
   sweep that fits the device's budget (:func:`gpuguide.sizes.sweep`, with
   the dtype's own rate) and forms every ``(m, n, k)`` from them that fits its
   memory and time per call, e.g. m, n and k from {2048, 4096, 8192, 16384} for
   bf16 on an H100: long-``k`` and flat shapes next to squares.
2. :func:`search_matmul_shapes` times each shape on a short budget (the
   scout), smallest first, then the ``confirm`` best again with
   :func:`gpuguide.timing.benchmark`'s default budget, and ranks them.

A shape's rate is MAMF's statistic: its FLOP over the median of its
:data:`FASTEST_CALLS` fastest calls, those least slowed by a dropping clock or
an interruption; the rate of its median call is kept beside it as the spread. On
CUDA every call starts with a cold L2 cache (``flush_l2=True``). The search
times only ``torch.mm(a, b, out=out)``; TF32 is whatever
``torch.backends.cuda.matmul.allow_tf32`` says while it runs.

Examples
--------
>>> from gpuguide_tools.mamf import MatmulShape
>>> shape = MatmulShape(4096, 4096, 8192)
>>> str(shape), shape.flop
('4096x4096x8192', 274877906944)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuguide import checks
from gpuguide.device import as_device
from gpuguide.env import small_mode
from gpuguide.sizes import SizeBudget, estimate_seconds, size_budget, sweep
from gpuguide.timing import Measurement, benchmark, matmul_flop
from gpuguide.units import format_rate

if TYPE_CHECKING:
    import torch

__all__ = [
    "FASTEST_CALLS",
    "MatmulShape",
    "ShapeRate",
    "ShapeSearch",
    "matmul_shapes",
    "probe_flops_per_s",
    "search_matmul_shapes",
]

#: A shape's rate is taken over the median of its this many fastest calls (MAMF's).
FASTEST_CALLS = 5

#: Warm-up and repetition budgets of one shape in the scout, in ms.
_SCOUT_WARMUP_MS = 5.0
_SCOUT_REP_MS = 20.0


class MatmulShape(NamedTuple):
    """An ``(m, k) @ (k, n)`` matrix product."""

    m: int
    n: int
    k: int

    @property
    def flop(self) -> int:
        """FLOP of one product, ``2 m n k``."""
        return matmul_flop(self.m, self.n, self.k)

    def memory_bytes(self, itemsize: int) -> int:
        """Bytes of the two inputs and the output, at ``itemsize`` bytes each."""
        return (self.m * self.k + self.k * self.n + self.m * self.n) * itemsize

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True)
class ShapeRate:
    """One shape's timed calls and the rates they give.

    Attributes
    ----------
    shape : MatmulShape
        What was multiplied.
    measurement : Measurement
        The time of every call.
    """

    shape: MatmulShape
    measurement: Measurement

    @property
    def burst_s(self) -> float:
        """The median of the :data:`FASTEST_CALLS` fastest calls, in seconds."""
        fastest = sorted(self.measurement.times_s)[:FASTEST_CALLS]
        return statistics.median(fastest)

    @property
    def flops_per_s(self) -> float:
        """The shape's rate: FLOP over :attr:`burst_s`, in FLOP/s."""
        return self.shape.flop / self.burst_s

    @property
    def median_flops_per_s(self) -> float:
        """FLOP over the median call, in FLOP/s: at most :attr:`flops_per_s`."""
        return self.shape.flop / self.measurement.median_s

    def __repr__(self) -> str:
        return (
            f"<ShapeRate {self.shape}: {format_rate(self.flops_per_s, 'FLOP/s')} "
            f"(median call {format_rate(self.median_flops_per_s, 'FLOP/s')}, "
            f"{self.measurement.n} calls)>"
        )


@dataclass(frozen=True)
class ShapeSearch:
    """What :func:`search_matmul_shapes` found for one dtype.

    Attributes
    ----------
    label : str
        The dtype's name, e.g. ``"bf16"``.
    scouted : tuple of ShapeRate
        Every shape timed on the short budget, fastest first.
    confirmed : tuple of ShapeRate
        The best scouted shapes timed again on the default budget, fastest
        first (at least one).
    """

    label: str
    scouted: tuple[ShapeRate, ...]
    confirmed: tuple[ShapeRate, ...]

    def __post_init__(self) -> None:
        if not self.confirmed:
            msg = "confirmed must hold at least one ShapeRate, got none"
            raise ValueError(msg)

    @property
    def best(self) -> ShapeRate:
        """The fastest confirmed shape."""
        return self.confirmed[0]

    def __repr__(self) -> str:
        best = self.best
        return (
            f"<ShapeSearch {self.label}: best {best.shape} at "
            f"{format_rate(best.flops_per_s, 'FLOP/s')} of {len(self.scouted)} "
            "shapes>"
        )


def _inputs(
    shape: MatmulShape, dtype: torch.dtype, device: torch.device
) -> tuple[Any, Any, Any]:
    import torch

    a = torch.randn(shape.m, shape.k, device=device).to(dtype)
    b = torch.randn(shape.k, shape.n, device=device).to(dtype)
    return a, b, torch.empty(shape.m, shape.n, device=device, dtype=dtype)


def _time_shape(
    shape: MatmulShape,
    dtype: torch.dtype,
    device: torch.device,
    bench: Callable[..., Measurement],
    **budgets: Any,
) -> ShapeRate:
    """Time ``torch.mm(a, b, out=out)`` for one shape."""
    import torch

    a, b, out = _inputs(shape, dtype, device)
    m = bench(
        torch.mm,
        args=(a, b),
        kwargs={"out": out},
        label=f"mm {shape}",
        device=device,
        flush_l2=True,
        min_reps=FASTEST_CALLS,
        **budgets,
    )
    return ShapeRate(shape, m)


def probe_flops_per_s(
    dtype: torch.dtype,
    device: torch.device | str | None = None,
    *,
    n: int = 64,
    bench: Callable[..., Measurement] = benchmark,
) -> float:
    """The rate of a small square matmul: a planning rate where no peak is known.

    Parameters
    ----------
    dtype : torch.dtype
        The dtype to multiply in.
    device : torch.device or str, optional
        Where; :func:`gpuguide.device.pick_device` chooses when omitted.
    n : int
        The matrix side (>= 1).
    bench : callable
        :func:`gpuguide.timing.benchmark` or a stand-in.

    Returns
    -------
    float
        FLOP/s of the fastest call.
    """
    import torch

    n = checks.integer("n", n, minimum=1)
    dev = as_device(device)
    a = torch.randn(n, n, device=dev).to(dtype)
    m = bench(torch.mm, args=(a, a), device=dev, label=f"probe {n}", rep_ms=5.0)
    return checks.positive("probe rate", matmul_flop(n, n, n) / m.min_s)


def matmul_shapes(
    dtype: torch.dtype,
    *,
    budget: SizeBudget,
    flop_per_s: float,
    levels: int = 4,
    lo: int = 256,
    hi: int = 16384,
    multiple_of: int = 256,
) -> list[MatmulShape]:
    """The shapes to search: every ``(m, n, k)`` from a few large sizes that fit.

    The sizes are the ``levels`` largest of ``lo, 2 lo, 4 lo, ...`` up to
    ``hi`` whose square matmul fits ``budget`` at ``flop_per_s``
    (:func:`gpuguide.sizes.sweep`); a shape is kept when its inputs and output
    fit the budget's memory and its estimated time (at half ``flop_per_s``,
    :func:`gpuguide.sizes.estimate_seconds`) its time per call.

    Parameters
    ----------
    dtype : torch.dtype
        The dtype, for its size in bytes.
    budget : SizeBudget
        Memory and time per call (:func:`gpuguide.sizes.size_budget`).
    flop_per_s : float
        The rate to plan with: the dtype's peak, or a probe's rate.
    levels : int
        How many sizes (>= 1): ``levels ** 3`` shapes at most.
    lo, hi, multiple_of : int
        The doubling sweep's range and rounding (see :func:`gpuguide.sizes.sweep`).

    Returns
    -------
    list of MatmulShape
        Smallest FLOP first (at least the smallest square, as ``sweep``
        returns at least one size).
    """
    checks.positive("flop_per_s", flop_per_s)
    levels = checks.integer("levels", levels, minimum=1)
    itemsize = dtype.itemsize
    sizes = sweep(
        lo,
        hi,
        memory_at=lambda s: MatmulShape(s, s, s).memory_bytes(itemsize),
        flop_at=lambda s: matmul_flop(s, s, s),
        budget=budget,
        peaks=None,
        flop_per_s=flop_per_s,
        multiple_of=multiple_of,
    )
    grid = sizes[-levels:]
    shapes = [MatmulShape(m, n, k) for m in grid for n in grid for k in grid]
    fits = [
        shape
        for shape in shapes
        if shape.memory_bytes(itemsize) <= budget.memory_bytes
        and estimate_seconds(flop=shape.flop, peaks=None, flop_per_s=flop_per_s)
        <= budget.call_s
    ]
    smallest = MatmulShape(grid[0], grid[0], grid[0])
    return sorted(fits or [smallest], key=lambda shape: (shape.flop, shape))


def search_matmul_shapes(
    dtype: torch.dtype,
    *,
    device: torch.device | str | None = None,
    label: str | None = None,
    flop_per_s: float | None = None,
    budget: SizeBudget | None = None,
    levels: int | None = None,
    confirm: int = 3,
    bench: Callable[..., Measurement] = benchmark,
) -> ShapeSearch:
    """Find the matmul shape that runs fastest in ``dtype`` on a device.

    Scouts every shape of :func:`matmul_shapes` on a short budget (5 ms of
    warm-up, 20 ms of calls, at least :data:`FASTEST_CALLS` calls), smallest
    first, and stops early when a call takes more than twice the time per call
    (a planning rate that was too high); then times the ``confirm`` fastest
    again on :func:`gpuguide.timing.benchmark`'s default budget. In small mode
    every budget is capped as ``benchmark`` caps it.

    Parameters
    ----------
    dtype : torch.dtype
        The dtype to multiply in.
    device : torch.device or str, optional
        Where; :func:`gpuguide.device.pick_device` chooses when omitted.
    label : str, optional
        Name of the result; default the dtype's name.
    flop_per_s : float, optional
        The rate to plan shapes with, e.g. the dtype's peak; default the rate
        of a small probe matmul (:func:`probe_flops_per_s`).
    budget : SizeBudget, optional
        Default :func:`gpuguide.sizes.size_budget` of the device.
    levels : int, optional
        Sizes per dimension: by default 4 on CUDA and 3 elsewhere (a CPU's
        small matmuls gain less from the shape), one fewer in small mode.
    confirm : int
        How many scouted shapes to time again (>= 1).
    bench : callable
        :func:`gpuguide.timing.benchmark` or a stand-in with its signature.

    Returns
    -------
    ShapeSearch
        Every scouted shape and the confirmed ones, fastest first.
    """
    confirm = checks.integer("confirm", confirm, minimum=1)
    dev = as_device(device)
    if budget is None:
        budget = size_budget(dev)
    on_cuda = dev.type == "cuda"
    if levels is None:
        levels = (4 if on_cuda else 3) - (1 if small_mode() else 0)
    rate = flop_per_s if flop_per_s else probe_flops_per_s(dtype, dev, bench=bench)
    shapes = matmul_shapes(
        dtype,
        budget=budget,
        flop_per_s=rate,
        levels=levels,
        lo=256 if on_cuda else 32,
        multiple_of=256 if on_cuda else 32,
    )
    scouted: list[ShapeRate] = []
    for shape in shapes:
        result = _time_shape(
            shape,
            dtype,
            dev,
            bench,
            warmup_ms=_SCOUT_WARMUP_MS,
            rep_ms=_SCOUT_REP_MS,
            max_reps=100,
        )
        scouted.append(result)
        if result.measurement.min_s > 2 * budget.call_s:
            break  # larger shapes would take longer still
    scouted.sort(key=lambda r: r.flops_per_s, reverse=True)
    confirmed = [_time_shape(r.shape, dtype, dev, bench) for r in scouted[:confirm]]
    confirmed.sort(key=lambda r: r.flops_per_s, reverse=True)
    name = label if label is not None else str(dtype).removeprefix("torch.")
    return ShapeSearch(name, tuple(scouted), tuple(confirmed))
