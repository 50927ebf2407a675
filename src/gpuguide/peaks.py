"""Peak compute and bandwidth figures to hold a measurement against.

For NVIDIA GPUs the figures are the rows of :mod:`gpuguide.datasheet` (dense
tensor-core figures, without the 2:4 sparsity that datasheets often quote), looked
up by :func:`~gpuguide.datasheet.identify_gpu` from the name, SM count and memory that
``torch.cuda.get_device_properties`` reports. An unknown GPU gets unknown peaks
(``known=False``, every figure ``None``): a figure is never guessed. For a CPU
there is no datasheet to trust, so :func:`measure_cpu_peaks` measures the best
matmul rate and copy bandwidth this machine achieves.

All compute rates are in FLOP/s and all bandwidths in bytes/s.

Examples
--------
>>> import torch
>>> from gpuguide.peaks import gpu_peaks, percent_of_peak
>>> peaks = gpu_peaks("NVIDIA H100 80GB HBM3", 132, 85_045_379_072)
>>> peaks.name
'H100 SXM5'
>>> peaks.flops_for(torch.bfloat16)
989500000000000.0
>>> round(percent_of_peak(798e12, peaks.flops_for(torch.bfloat16)), 1)
80.6
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gpuguide import checks, datasheet, host
from gpuguide.device import DeviceInfo, pick_device
from gpuguide.env import small_mode
from gpuguide.timing import Measurement, benchmark
from gpuguide.units import format_rate

if TYPE_CHECKING:
    import torch

__all__ = [
    "GPU_PEAKS",
    "Peaks",
    "device_peaks",
    "gpu_peaks",
    "measure_cpu_peaks",
    "percent_of_peak",
]

#: The precisions a :class:`Peaks` lists, in this order.
FLOPS_KEYS: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16")

_DTYPE_ALIASES: dict[str, str] = {
    alias: key
    for key, aliases in {
        "fp64": ("fp64", "float64", "double"),
        "fp32": ("fp32", "float32", "float"),
        "tf32": ("tf32",),
        "fp16": ("fp16", "float16", "half"),
        "bf16": ("bf16", "bfloat16"),
    }.items()
    for alias in aliases
}

_UNKNOWN_GPU_SOURCE = (
    "no datasheet entry for this GPU in gpuguide.peaks.GPU_PEAKS: figures unknown"
)
_MEASURED_CPU_SOURCE = "measured on this CPU (best achieved, not a datasheet)"


# --------------------------------------------------------------------------------------
# The result object
# --------------------------------------------------------------------------------------


def _check_rate(name: str, value: float | None) -> float | None:
    """``value`` as a float, or None; it must be finite and > 0."""
    return None if value is None else checks.positive(name, value)


@dataclass(frozen=True)
class Peaks:
    """Peak compute rates and bandwidths of one device.

    Attributes
    ----------
    name : str
        What the figures describe: a :data:`GPU_PEAKS` key (``"H100 SXM5"``),
        ``"unknown GPU (<name>)"``, ``"Apple GPU (MPS)"`` or ``"CPU: <model>"``.
    flops : Mapping[str, float or None]
        Peak FLOP/s per precision, keys ``"fp64"``, ``"fp32"``, ``"tf32"``,
        ``"fp16"``, ``"bf16"`` (dense, no sparsity; tensor-core figures where the
        GPU has them, except ``"fp64"`` which is the non-tensor figure). ``None``
        where unknown or unsupported. Read-only; missing keys read ``None``.
    memory_bandwidth_bytes_per_s : float or None
        Peak device-memory bandwidth, in bytes/s.
    host_link_bytes_per_s : float or None
        Peak host-to-device link bandwidth per direction, in bytes/s.
    source : str
        Where the figures come from (a datasheet, or "measured ...").
    known : bool
        ``False`` when the device was not identified and every figure is None.
    """

    name: str
    flops: Mapping[str, float | None]
    memory_bandwidth_bytes_per_s: float | None = None
    host_link_bytes_per_s: float | None = None
    source: str = ""
    known: bool = True

    def __post_init__(self) -> None:
        extra = sorted(set(self.flops) - set(FLOPS_KEYS))
        if extra:
            msg = f"flops keys must be among {FLOPS_KEYS}, got {extra}"
            raise ValueError(msg)
        flops = {
            key: _check_rate(f"flops[{key!r}]", self.flops.get(key))
            for key in FLOPS_KEYS
        }
        object.__setattr__(self, "flops", MappingProxyType(flops))
        for field in ("memory_bandwidth_bytes_per_s", "host_link_bytes_per_s"):
            object.__setattr__(self, field, _check_rate(field, getattr(self, field)))

    def __hash__(self) -> int:
        rates = (self.memory_bandwidth_bytes_per_s, self.host_link_bytes_per_s)
        return hash(
            (self.name, tuple(self.flops.items()), *rates, self.source, self.known)
        )

    def __repr__(self) -> str:
        rates = ", ".join(
            f"{key} {format_rate(value, 'FLOP/s')}"
            for key, value in self.flops.items()
            if value is not None
        )
        memory = format_rate(self.memory_bandwidth_bytes_per_s, "B/s")
        link = format_rate(self.host_link_bytes_per_s, "B/s")
        known = "" if self.known else " UNKNOWN"
        return (
            f"<Peaks {self.name!r}{known}: {rates or 'compute n/a'}; memory {memory}; "
            f"host link {link}; source: {self.source}>"
        )

    def flops_for(
        self, dtype: torch.dtype | str, *, tf32: bool = False
    ) -> float | None:
        """The peak FLOP/s for matmuls in ``dtype``.

        Parameters
        ----------
        dtype : torch.dtype or str
            ``torch.float64``, ``torch.float32``, ``torch.float16`` or
            ``torch.bfloat16``, or one of ``"fp64"``, ``"fp32"``, ``"tf32"``,
            ``"fp16"``, ``"bf16"`` (torch names such as ``"float32"`` work too).
        tf32 : bool
            Whether fp32 matmuls may use TF32 tensor cores (as with
            ``torch.backends.cuda.matmul.allow_tf32 = True``): fp32 then reads
            the TF32 figure.

        Returns
        -------
        float or None
            The peak in FLOP/s, ``None`` where unknown or unsupported.

        Raises
        ------
        ValueError
            For a dtype with no figure here (integer, complex, fp8, ...).
        """
        key = _precision_key(dtype)
        if key == "fp32" and tf32:
            key = "tf32"
        return self.flops[key]


def _precision_key(dtype: Any) -> str:
    """The :data:`FLOPS_KEYS` entry for a torch dtype or a precision name."""
    if isinstance(dtype, str):
        key = _DTYPE_ALIASES.get(dtype.strip().lower().removeprefix("torch."))
        if key is None:
            msg = f"dtype must be one of {sorted(_DTYPE_ALIASES)}, got {dtype!r}"
            raise ValueError(msg)
        return key
    import torch

    by_dtype = {
        torch.float64: "fp64",
        torch.float32: "fp32",
        torch.float16: "fp16",
        torch.bfloat16: "bf16",
    }
    if isinstance(dtype, torch.dtype) and dtype in by_dtype:
        return by_dtype[dtype]
    msg = f"dtype must be float64, float32, float16 or bfloat16, got {dtype!r}"
    raise ValueError(msg)


def _unknown(name: str, source: str = _UNKNOWN_GPU_SOURCE) -> Peaks:
    """Peaks with every figure unknown."""
    return Peaks(name=name, flops={}, source=source, known=False)


# --------------------------------------------------------------------------------------
# Datasheet figures
# --------------------------------------------------------------------------------------


def _from_datasheet(row: datasheet.GPUFigures) -> Peaks:
    """Peaks in FLOP/s and bytes/s from a datasheet row in TFLOP/s and GB/s."""
    tflops = (row.fp64_tflops, row.fp32_tflops, row.tf32_tflops, row.fp16_tflops)
    return Peaks(
        name=row.variant,
        flops={
            key: None if value is None else value * 1e12
            for key, value in zip(FLOPS_KEYS, (*tflops, row.bf16_tflops), strict=True)
        },
        memory_bandwidth_bytes_per_s=row.memory_gb_per_s * 1e9,
        host_link_bytes_per_s=row.host_link_gb_per_s * 1e9,
        source=datasheet.SOURCES[row.source],
    )


#: Datasheet peaks of the GPUs gpuguide recognises, by variant.
GPU_PEAKS: dict[str, Peaks] = {
    row.variant: _from_datasheet(row) for row in datasheet.FIGURES
}


def gpu_peaks(name: str, sm_count: int | None, total_memory_bytes: int | None) -> Peaks:
    """Datasheet peaks of a GPU, from what ``torch.cuda.get_device_properties`` says.

    Parameters
    ----------
    name, sm_count, total_memory_bytes
        As for :func:`gpuguide.datasheet.identify_gpu`.

    Returns
    -------
    Peaks
        The :data:`GPU_PEAKS` entry, or ``known=False`` peaks named
        ``"unknown GPU (<name>)"`` with every figure ``None``.
    """
    variant = datasheet.identify_gpu(name, sm_count, total_memory_bytes)
    if variant is None:
        return _unknown(f"unknown GPU ({' '.join(str(name).split())})")
    return GPU_PEAKS[variant]


# --------------------------------------------------------------------------------------
# Measured CPU peaks
# --------------------------------------------------------------------------------------


#: (matmul size, copy bytes, warm-up ms, repetitions ms) per mode.
_CPU_SIZES = {
    False: (512, 64 * 2**20, 30.0, 60.0),
    True: (256, 32 * 2**20, 2.0, 10.0),
}


def _best_s(measurement: Measurement) -> float:
    """The best (minimum) time of a Measurement, in seconds."""
    best = float(measurement.min_s)
    if not (math.isfinite(best) and best > 0):
        msg = f"the best time must be > 0, got {best!r} from benchmark"
        raise RuntimeError(msg)
    return best


def _measure_cpu_peaks(
    small: bool,
    bench: Callable[..., Measurement] = benchmark,
    name: str | None = None,
) -> Peaks:
    """Measure the CPU's best matmul rates (fp32, fp64) and copy bandwidth."""
    import torch

    size, copy_bytes, warmup_ms, rep_ms = _CPU_SIZES[small]
    timing = {
        "device": "cpu",
        "warmup_ms": warmup_ms,
        "rep_ms": rep_ms,
        "min_reps": 5,
        "max_reps": 50,
    }
    flop = 2.0 * size**3
    flops: dict[str, float | None] = {}
    for key, dtype in (("fp32", torch.float32), ("fp64", torch.float64)):
        a = torch.randn(size, size, dtype=dtype)
        b = torch.randn(size, size, dtype=dtype)
        best = _best_s(
            bench(torch.mm, args=(a, b), label=f"{key} matmul {size}", **timing)
        )
        flops[key] = flop / best
        del a, b
    numel = copy_bytes // 4
    src = torch.ones(numel, dtype=torch.float32)
    dst = torch.empty_like(src)
    best = _best_s(bench(dst.copy_, args=(src,), label="copy", **timing))
    bandwidth = 2.0 * numel * 4 / best  # bytes read + bytes written
    return Peaks(
        name=name if name is not None else f"CPU: {host.cpu_model()}",
        flops=flops,
        memory_bandwidth_bytes_per_s=bandwidth,
        host_link_bytes_per_s=None,
        source=_MEASURED_CPU_SOURCE,
        known=True,
    )


@functools.lru_cache(maxsize=8)
def _measure_cpu_peaks_cached(small: bool) -> Peaks:
    """:func:`_measure_cpu_peaks` once per process and mode."""
    return _measure_cpu_peaks(small)


def measure_cpu_peaks(*, small: bool | None = None) -> Peaks:
    """Measure what this CPU achieves: a stand-in for datasheet peaks.

    Times square fp32 and fp64 matmuls (512 x 512; 256 in small mode) and a
    copy of a 64 MiB tensor (32 MiB in small mode) with
    :func:`gpuguide.timing.benchmark`, and keeps the best run of each. The result
    is cached for the process, so the cost (well under a second) is paid once.

    Parameters
    ----------
    small : bool, optional
        Use the small sizes; by default when ``GPUGUIDE_SMALL`` is set.

    Returns
    -------
    Peaks
        ``fp32`` and ``fp64`` in FLOP/s and the copy bandwidth (bytes read plus
        bytes written per second) as ``memory_bandwidth_bytes_per_s``; the TF32,
        FP16, BF16 and host-link figures are ``None``. ``source`` says the
        figures were measured: they are lower bounds on the true peaks.
    """
    return _measure_cpu_peaks_cached(small_mode() if small is None else bool(small))


# --------------------------------------------------------------------------------------
# Any device
# --------------------------------------------------------------------------------------


def device_peaks(device: str | torch.device | DeviceInfo | None = None) -> Peaks:
    """Peaks for a device: datasheet for a known GPU, measured for a CPU.

    Parameters
    ----------
    device : str, torch.device or DeviceInfo, optional
        The device; :func:`gpuguide.device.pick_device` chooses when omitted.

    Returns
    -------
    Peaks
        CUDA: :func:`gpu_peaks` of the device's properties. CPU:
        :func:`measure_cpu_peaks`. MPS: unknown peaks (``known=False``).
    """
    if isinstance(device, DeviceInfo):
        if device.type == "cuda":
            return gpu_peaks(device.name, device.sm_count, device.total_memory_bytes)
        device_type = device.type
    else:
        resolved = pick_device(device)
        device_type = resolved.type
        if device_type == "cuda":
            import torch

            props = torch.cuda.get_device_properties(resolved)
            return gpu_peaks(
                props.name, props.multi_processor_count, props.total_memory
            )
    if device_type == "cpu":
        return measure_cpu_peaks()
    return _unknown(
        "Apple GPU (MPS)",
        source="no datasheet figures for Apple GPUs in gpuguide: figures unknown",
    )


def percent_of_peak(value: float | None, peak: float | None) -> float | None:
    """A measured rate as a percentage of a peak in the same unit.

    ``100 * value / peak``; None when either is unknown (None) or the peak is
    not positive and finite.
    """
    if value is None or peak is None:
        return None
    peak = float(peak)
    if not (math.isfinite(peak) and peak > 0):
        return None
    return 100.0 * float(value) / peak
