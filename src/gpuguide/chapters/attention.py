"""Plumbing for the attention chapter: FLOP and memory counts, which SDPA backends
run here and which one ran, whether two outputs agree, peak memory per call.
"""

from __future__ import annotations

import contextlib
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


def _sizes(*sizes: int) -> list[int]:
    """``batch, seq, heads, head_dim[, element_bytes]``, each checked >= 1."""
    names = ("batch", "seq", "heads", "head_dim", "element_bytes")
    return [checks.integer(n, v, minimum=1) for n, v in zip(names, sizes, strict=False)]


def attention_flop(
    batch: int,
    seq: int,
    heads: int,
    head_dim: int,
    *,
    causal: bool = False,
    backward: bool = False,
) -> float:
    """FLOP of one attention call as the FlashAttention papers count them:
    ``4 * batch * seq**2 * heads * head_dim``, halved when causal, times 3.5 with
    the backward."""
    b, s, h, d = _sizes(batch, seq, heads, head_dim)
    flop = 4.0 * b * s * s * h * d / (2 if causal else 1)
    return 3.5 * flop if backward else flop


def naive_bytes(
    batch: int, seq: int, heads: int, head_dim: int, element_bytes: int
) -> int:
    """Bytes the naive path holds at its peak: ``q, k, v``, the output and three
    ``seq x seq`` matrices per head."""
    b, s, h, d, e = _sizes(batch, seq, heads, head_dim, element_bytes)
    return e * b * h * (3 * s * s + 4 * s * d)


def usable_backends(attend: Callable[[], Any]) -> dict[str, Any]:
    """The SDPA backends under which ``attend()`` runs here, name -> backend: each
    is tried once; a ``RuntimeError`` (no viable kernel) rules it out. Its warnings
    are swallowed, so a probe cannot fail a run under ``-W error``."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "math": SDPBackend.MATH,
        "flash": SDPBackend.FLASH_ATTENTION,
        "memory-efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cuDNN": SDPBackend.CUDNN_ATTENTION,
    }
    usable = {}
    for name, backend in backends.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with sdpa_kernel(backend):
                    attend()
            except RuntimeError:
                continue
        usable[name] = backend
    return usable


def _peak_rise(
    device: torch.device | str, fn: Callable[..., Any], *args: Any
) -> int | None:
    """The bytes one call ``fn(*args)`` adds at its peak."""
    with track_memory(device) as tracker:
        fn(*args)
    assert tracker.report is not None  # set when the block ends
    return tracker.report.peak_increase_bytes


def peak_memory(
    result: SweepResult,
    variants: Mapping[str, Callable[..., Any]],
    inputs: Callable[[int], Sequence[Any]],
    *,
    device: torch.device | str,
) -> dict[str, list[int | None]]:
    """For each variant, the bytes one call ``fn(*inputs(n))`` adds at its peak
    (:func:`gpuguide.track_memory`) at each of ``result``'s sizes: None where the
    sweep did not run it or it added nothing measurable."""
    found: dict[str, list[int | None]] = {name: [] for name in variants}
    for n in result.sizes:
        args = inputs(n)
        for name, fn in variants.items():
            if n not in result.ran(name):
                found[name].append(None)
                continue
            peak = _peak_rise(device, fn, *args)
            found[name].append(max(peak or 0, 0) or None)
        del args
    return found


def backend_of(op_names: Iterable[str]) -> str | None:
    """The SDPA backend that ran, from the profiler's operator names (or None)."""
    for name in op_names:
        backend = _BACKEND_OPS.get(name.removeprefix("aten::"))
        if backend is not None:
            return backend
    return None


def agreement(
    output: torch.Tensor, reference: torch.Tensor, *, tolerance: float
) -> tuple[float, bool]:
    """The largest difference of ``output`` from ``reference`` relative to the
    reference's largest magnitude, and whether it is within ``tolerance``."""
    checks.positive("tolerance", tolerance)
    out, ref = output.float(), reference.float()
    if out.shape != ref.shape:
        shapes = f"{tuple(out.shape)} and {tuple(ref.shape)}"
        msg = f"output and reference must have one shape, got {shapes}"
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
    """A table's rows, one per case: its name, ``backend(fn)`` and one call's peak
    memory rise in MiB; both None where ``needed_bytes`` exceed ``budget_bytes`` or
    the call runs out of memory."""
    import torch

    fits = needed_bytes <= checks.non_negative("budget_bytes", budget_bytes)
    rows = []
    for name, fn in cases.items():
        peak = None
        if fits:
            with contextlib.suppress(torch.OutOfMemoryError):
                peak = _peak_rise(device, fn)
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
    """``fn()``'s result and the seconds of that one call (host clock, synced)."""
    import torch

    sync = getattr(torch, as_device(device).type).synchronize
    sync()
    start = time.perf_counter()
    result = fn()
    sync()
    return result, time.perf_counter() - start
