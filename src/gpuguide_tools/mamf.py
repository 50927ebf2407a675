"""The best matmul rate a device reaches, as the check-up's figure.

Square matmuls are not where a GPU runs fastest. How well an ``(m, k) @ (k, n)``
product fills the GPU depends on how its output tiles divide among the SMs and
on how long ``k`` keeps each tile busy, and a long run of large squares heats
the chip until its clock drops. Stas Bekman's MAMF finder (*ml-engineering*,
"maximum achievable matmul FLOPS") therefore times many shapes, each in short
bursts, and reports the best one. The dtypes page's search does the same, much
more cheaply (:func:`gpuguide.chapters.precision.search_matmul_shapes`);
:func:`best_matmul` runs it for the check-up and gives its result as the page's
"best matmul" figure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuguide.chapters import precision
from gpuguide.results import Result

if TYPE_CHECKING:
    import torch

    from gpuguide.peaks import Peaks

__all__ = ["best_matmul"]


def best_matmul(
    label: str,
    dtype: torch.dtype,
    tf32: bool,
    *,
    device: torch.device,
    levels: int,
    peaks: Peaks,
) -> Result:
    """The best rate of ``dtype`` matmuls (on TF32 tensor cores with ``tf32``)
    over a search of ``levels ** 3`` shapes planned at the dtype's peak (a small
    probe's rate where none is known), as the dtypes page's "best matmul" figure
    for the variant ``label``: MAMF's rate with the quartiles of its five fastest
    calls."""
    plan = peaks.flops_for(dtype, tf32=tf32) or precision.probe_rate(dtype, device)
    shape, per_flop, _ = precision.search_matmul_shapes(
        dtype, plan, device=device, levels=levels, label=label, tf32=tf32
    )
    rate = per_flop.rate(1)
    return Result(
        "plot_dtype_throughput",
        "best matmul",
        rate.value,
        rate.unit,
        spread=(rate.low, rate.high),
        config={"dtype": label},
        size="x".join(map(str, shape)),
        peak=label,
    )
