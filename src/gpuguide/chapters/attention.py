"""Plumbing for the attention chapter: the papers' FLOP count and published figures,
the naive path's memory, which SDPA backends run here, which one ran, and whether
two outputs agree; for the which-kernel page, SDPA's order of backends, the table of
the cases it runs, one call timed once and the time per call of timed variants.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpuguide import checks
from gpuguide.device import as_device
from gpuguide.memory import track_memory

if TYPE_CHECKING:
    import torch

    from gpuguide.sweeps import SweepResult

__all__ = [
    "agreement",
    "attention_flop",
    "backend_of",
    "case_rows",
    "naive_bytes",
    "peak_memory",
    "timed_once",
    "usable_backends",
]

#: The ATen operator each SDPA backend runs, without the ``aten::`` prefix.
_BACKEND_OPS: dict[str, str] = {
    "_scaled_dot_product_cudnn_attention": "cuDNN",
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "_scaled_dot_product_efficient_attention": "memory-efficient",
    "_scaled_dot_product_attention_math": "math",
    "_scaled_dot_product_attention_math_for_mps": "math",
    "_scaled_dot_product_fused_attention_overrideable": "overrideable",
}


def attention_flop(
    batch: int, seq: int, heads: int, head_dim: int, *, causal: bool = False,
    backward: bool = False,
) -> float:  # fmt: skip
    """FLOP of one attention call as the FlashAttention papers count them:
    ``4 * batch * seq**2 * heads * head_dim`` (two matmuls), halved when causal;
    forward and backward together count 3.5 times the forward."""
    sizes = {"batch": batch, "seq": seq, "heads": heads, "head_dim": head_dim}
    b, s, h, d = (checks.integer(name, v, minimum=1) for name, v in sizes.items())
    flop = 4.0 * b * s * s * h * d / (2 if causal else 1)
    return 3.5 * flop if backward else flop


def naive_bytes(
    batch: int, seq: int, heads: int, head_dim: int, element_bytes: int
) -> int:
    """Bytes the naive path holds at its peak: ``q, k, v`` and the output, and three
    ``seq x seq`` matrices per head (scores, probabilities and one temporary)."""
    sizes = {"batch": batch, "seq": seq, "heads": heads, "head_dim": head_dim,
             "element_bytes": element_bytes}  # fmt: skip
    b, s, h, d, e = (checks.integer(name, v, minimum=1) for name, v in sizes.items())
    return e * b * h * (3 * s * s + 4 * s * d)


def _run_within_memory(
    fn: Callable[[], Any], needed_bytes: float, budget_bytes: float, *,
    on_oom: Callable[[], None] | None = None,
) -> Any:  # fmt: skip
    """``fn()``, or None where ``needed_bytes`` exceed ``budget_bytes`` (``fn`` is not
    called) or ``fn`` runs out of memory anyway (``torch.OutOfMemoryError``; then
    ``on_oom()`` runs, e.g. ``torch.cuda.empty_cache``)."""
    import torch

    if needed_bytes > checks.non_negative("budget_bytes", budget_bytes):
        return None
    try:
        return fn()
    except torch.OutOfMemoryError:
        if on_oom is not None:
            on_oom()
        return None


def usable_backends(
    attend: Callable[[], Any],
    backends: Mapping[str, Any] | None = None,
    *,
    context: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """The backends under which ``attend()`` runs here, name -> backend, in order.

    ``backends`` defaults to SDPA's math, flash, memory-efficient and (where this
    torch has it) cuDNN backends. Each is tried once inside ``context(backend)``
    (default ``torch.nn.attention.sdpa_kernel``); a ``RuntimeError`` (no viable
    kernel) rules it out. The warnings torch gives on the way out are swallowed,
    so that a probe cannot fail a run under ``-W error``.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if backends is None:
        names = {
            "math": "MATH",
            "flash": "FLASH_ATTENTION",
            "memory-efficient": "EFFICIENT_ATTENTION",
            "cuDNN": "CUDNN_ATTENTION",
        }
        backends = {
            name: getattr(SDPBackend, member)
            for name, member in names.items()
            if hasattr(SDPBackend, member)
        }
    context = context or sdpa_kernel
    usable = {}
    for name, backend in backends.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with context(backend):
                    attend()
            except RuntimeError:
                continue
        usable[name] = backend
    return usable


def peak_memory(
    result: SweepResult,
    variants: Mapping[str, Callable[..., Any]],
    inputs: Callable[[int], Sequence[Any]],
    *,
    device: torch.device | str,
) -> dict[str, list[int | None]]:
    """For each variant, the bytes one call ``fn(*inputs(n))`` adds at its peak to
    what is allocated (:func:`gpuguide.track_memory`; on a CPU, the resident
    memory) at each of ``result``'s sizes: None where the sweep did not run it or
    the call added nothing measurable."""
    found: dict[str, list[int | None]] = {name: [] for name in variants}
    for n in result.sizes:
        args = inputs(n)
        for name, fn in variants.items():
            if n not in result.ran(name):
                found[name].append(None)
                continue
            with track_memory(device) as tracker:
                fn(*args)
            assert tracker.report is not None  # set when the block ends
            found[name].append(max(tracker.report.peak_increase_bytes or 0, 0) or None)
        del args
    return found


def backend_of(op_names: Iterable[str]) -> str | None:
    """The SDPA backend that ran, from the profiler's operator names (the first
    backend operator in the list), or None if none of them is one."""
    for name in op_names:
        backend = _BACKEND_OPS.get(name.removeprefix("aten::"))
        if backend is not None:
            return backend
    return None


def agreement(
    output: torch.Tensor, reference: torch.Tensor, *, tolerance: float
) -> tuple[float, bool]:
    """The largest absolute difference of ``output`` from ``reference`` (compared in
    float32), relative to the reference's largest magnitude, and whether it is
    within ``tolerance``."""
    checks.positive("tolerance", tolerance)
    out, ref = output.float(), reference.float()
    if out.shape != ref.shape:
        msg = f"output and reference must have one shape, got {tuple(out.shape)} and {tuple(ref.shape)}"
        raise ValueError(msg)
    scale = max(float(ref.abs().max()), 1e-30)
    error = float((out - ref).abs().max()) / scale
    return error, math.isfinite(error) and error <= tolerance


def case_rows(
    cases: Mapping[str, Callable[[], Any]],
    backend: Callable[[Callable[[], Any]], str | None],
    needed_bytes: float,
    budget_bytes: float,
    *,
    device: torch.device | str,
) -> list[dict[str, Any]]:
    """A table's rows, one per case: its name, ``backend(fn)`` (the backend that ran
    it) and the peak memory rise of one call of ``fn``, in MiB to a tenth
    (:func:`gpuguide.track_memory`). A case whose ``needed_bytes`` exceed
    ``budget_bytes`` or that runs out of memory is not run, and both are None
    (:func:`_run_within_memory`)."""
    rows = []
    for name, fn in cases.items():

        def tracked(fn: Callable[[], Any] = fn) -> int | None:
            with track_memory(device) as tracker:
                fn()
            assert tracker.report is not None  # set when the block ends
            return tracker.report.peak_increase_bytes

        peak = _run_within_memory(tracked, needed_bytes, budget_bytes)
        rows.append(
            {
                "case": name,
                "backend": backend(fn) if peak is not None else None,
                "peak memory (MiB)": peak and round(max(peak, 0) / 2**20, 1),
            }
        )
    return rows


def timed_once(
    fn: Callable[[], Any], *, device: torch.device | str
) -> tuple[Any, float]:
    """``fn()``'s result and the seconds its one call took: a host clock between
    synchronizations of ``device``, for one-off costs (building a mask)."""
    import torch

    sync = getattr(torch, as_device(device).type).synchronize
    sync()
    start = time.perf_counter()
    result = fn()
    sync()
    return result, time.perf_counter() - start
