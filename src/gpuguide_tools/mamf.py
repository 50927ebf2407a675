"""The best matmul rate a device reaches: a small search over matmul shapes.

Square matmuls are not where a GPU runs fastest. How well an ``(m, k) @ (k, n)``
product fills the GPU depends on how its output tiles divide among the SMs and
on how long ``k`` keeps each tile busy, and a long run of large squares heats
the chip until its clock drops. Stas Bekman's MAMF finder (*ml-engineering*,
"maximum achievable matmul FLOPS") therefore times many shapes, each in short
bursts, and reports the best one. :func:`search_matmul_shapes` does the same,
much more cheaply, with the dtypes page's pieces
(:mod:`gpuguide.chapters.precision`): its shapes
(:func:`~gpuguide.chapters.precision.matmul_shapes`), its timing of one matmul on
a cold L2 cache (:func:`~gpuguide.chapters.precision.time_matmul`), its planning
rate (:func:`~gpuguide.chapters.precision.probe_rate`) and MAMF's statistic
(:func:`~gpuguide.chapters.precision.mamf`: the median of the
:data:`FASTEST_CALLS` fastest calls). It scouts every shape on a short budget,
then times the ``confirm`` best again on the default budget, and ranks them.

Examples
--------
>>> from gpuguide_tools.mamf import MatmulShape
>>> shape = MatmulShape(4096, 4096, 8192)
>>> str(shape), shape.flop
('4096x4096x8192', 274877906944)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from gpuguide import checks
from gpuguide.chapters import precision
from gpuguide.device import as_device
from gpuguide.env import small_mode
from gpuguide.sizes import SizeBudget, size_budget
from gpuguide.timing import Measurement, matmul_flop
from gpuguide.units import format_rate

if TYPE_CHECKING:
    import torch

__all__ = [
    "FASTEST_CALLS",
    "MatmulShape",
    "ShapeRate",
    "ShapeSearch",
    "search_matmul_shapes",
]

#: A shape's rate is taken over the median of its this many fastest calls (MAMF's).
FASTEST_CALLS = 5

#: The scout's budgets for one shape: warm-up and repetitions in ms, at most 100 calls.
_SCOUT = {"warmup_ms": 5.0, "rep_ms": 20.0, "max_reps": 100}


class MatmulShape(NamedTuple):
    """An ``(m, k) @ (k, n)`` matrix product."""

    m: int
    n: int
    k: int

    @property
    def flop(self) -> int:
        """FLOP of one product, ``2 m n k``."""
        return matmul_flop(self.m, self.n, self.k)

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True)
class ShapeRate:
    """One shape's timed calls (``measurement``) and the rates they give."""

    shape: MatmulShape
    measurement: Measurement

    @property
    def burst_s(self) -> float:
        """The median of the :data:`FASTEST_CALLS` fastest calls, in seconds."""
        per_flop = precision.mamf(self.measurement, 1.0, fastest=FASTEST_CALLS)
        return per_flop.median_s

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
    """What :func:`search_matmul_shapes` found for one dtype (``label``): every
    shape ``scouted`` on the short budget and the ``confirmed`` ones, timed again
    (at least one), each fastest first."""

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


def search_matmul_shapes(
    dtype: torch.dtype,
    *,
    device: torch.device | str | None = None,
    label: str | None = None,
    flop_per_s: float | None = None,
    budget: SizeBudget | None = None,
    levels: int | None = None,
    confirm: int = 3,
    time: Callable[..., Measurement] = precision.time_matmul,
) -> ShapeSearch:
    """Find the matmul shape that runs fastest in ``dtype`` on a device.

    Scouts every shape of :func:`~gpuguide.chapters.precision.matmul_shapes` (sizes
    from 256 on CUDA, 32 elsewhere) on a short budget (5 ms of warm-up, 20 ms of
    calls, at least :data:`FASTEST_CALLS` calls, each on a cold L2 cache), smallest
    first, and stops early when a call takes more than twice the time per call (a
    planning rate that was too high); then times the ``confirm`` fastest again on
    :func:`gpuguide.benchmark`'s default budget.

    ``flop_per_s``: the rate to plan shapes with (the dtype's peak), default a
    small probe's (:func:`~gpuguide.chapters.precision.probe_rate`). ``budget``:
    default the device's :func:`gpuguide.size_budget`. ``levels``: sizes per
    dimension, by default 4 on CUDA and 3 elsewhere, one fewer in small mode.
    ``time``: :func:`~gpuguide.chapters.precision.time_matmul` or a stand-in.
    """
    confirm = checks.integer("confirm", confirm, minimum=1)
    dev = as_device(device)
    budget = budget or size_budget(dev)
    on_cuda = dev.type == "cuda"
    if levels is None:
        levels = (4 if on_cuda else 3) - (1 if small_mode() else 0)
    rate = flop_per_s or precision.probe_rate(dtype, dev)
    lo = 256 if on_cuda else 32
    shapes = precision.matmul_shapes(dtype, rate, budget, lo=lo, levels=levels)

    def timed(shape: tuple[int, int, int], **budgets: float) -> ShapeRate:
        product = MatmulShape(*shape)
        how = {"flush_l2": True, "min_reps": FASTEST_CALLS, **budgets}
        m = time(dtype, shape, device=dev, label=f"mm {product}", **how)
        return ShapeRate(product, m)

    scouted: list[ShapeRate] = []
    for shape in shapes:
        scouted.append(timed(shape, **_SCOUT))
        if scouted[-1].measurement.min_s > 2 * budget.call_s:
            break  # larger shapes would take longer still
    scouted.sort(key=lambda r: r.flops_per_s, reverse=True)
    confirmed = [timed(r.shape) for r in scouted[:confirm]]
    confirmed.sort(key=lambda r: r.flops_per_s, reverse=True)
    name = label if label is not None else str(dtype).removeprefix("torch.")
    return ShapeSearch(name, tuple(scouted), tuple(confirmed))
