"""Peak compute and bandwidth figures to hold a measurement against.

For NVIDIA GPUs the figures come from the datasheets (dense tensor-core figures,
without the 2:4 sparsity that datasheets often quote), looked up by
:func:`identify_gpu` from the name, SM count and memory that
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
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gpuguide.sizes import small_mode
from gpuguide.units import format_rate

if TYPE_CHECKING:
    import torch

    from gpuguide.device import DeviceInfo

__all__ = [
    "GPU_PEAKS",
    "Peaks",
    "device_peaks",
    "gpu_peaks",
    "identify_gpu",
    "measure_cpu_peaks",
    "percent_of_peak",
]

#: The precisions a :class:`Peaks` lists, in this order.
FLOPS_KEYS: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16")

_DTYPE_ALIASES: dict[str, str] = {
    "fp64": "fp64",
    "float64": "fp64",
    "double": "fp64",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "tf32": "tf32",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
}

_UNKNOWN_GPU_SOURCE = (
    "no datasheet entry for this GPU in gpuguide.peaks.GPU_PEAKS: figures unknown"
)
_MEASURED_CPU_SOURCE = "measured on this CPU (best achieved, not a datasheet)"


# --------------------------------------------------------------------------------------
# The result object
# --------------------------------------------------------------------------------------


def _check_rate(what: str, value: float | None) -> float | None:
    """``value`` as a float, or ``None``; ValueError unless positive and finite."""
    if value is None:
        return None
    rate = float(value)
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"{what} must be positive and finite or None, not {value!r}")
    return rate


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
            raise ValueError(f"unknown precision(s) {extra}; expected {FLOPS_KEYS}")
        flops = {
            key: _check_rate(f"flops[{key!r}]", self.flops.get(key))
            for key in FLOPS_KEYS
        }
        object.__setattr__(self, "flops", MappingProxyType(flops))
        for field in ("memory_bandwidth_bytes_per_s", "host_link_bytes_per_s"):
            object.__setattr__(self, field, _check_rate(field, getattr(self, field)))

    def __hash__(self) -> int:
        return hash(
            (
                self.name,
                tuple(self.flops.items()),
                self.memory_bandwidth_bytes_per_s,
                self.host_link_bytes_per_s,
                self.source,
                self.known,
            )
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
            raise ValueError(f"no peak figure for precision {dtype!r}")
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
    raise ValueError(f"no peak figure for dtype {dtype!r}")


def _unknown(name: str, source: str = _UNKNOWN_GPU_SOURCE) -> Peaks:
    """Peaks with every figure unknown."""
    return Peaks(name=name, flops={}, source=source, known=False)


# --------------------------------------------------------------------------------------
# Datasheet figures
# --------------------------------------------------------------------------------------

_T = 1e12  # FLOP/s per TFLOP/s
_GB = 1e9  # bytes/s per GB/s

#: PCIe x16 per direction, in bytes/s (nominal: 16, 32 and 64 GB/s).
_PCIE_GEN3_X16 = 16 * _GB
_PCIE_GEN4_X16 = 32 * _GB
_PCIE_GEN5_X16 = 64 * _GB


def _datasheet(
    name: str,
    *,
    fp64: float | None,
    fp32: float | None,
    tf32: float | None,
    fp16: float | None,
    bf16: float | None,
    memory_gb_per_s: float | None,
    host_link: float | None,
    source: str,
) -> Peaks:
    """A datasheet entry, with compute in TFLOP/s and memory bandwidth in GB/s."""

    def scale(value: float | None, unit: float) -> float | None:
        return None if value is None else value * unit

    return Peaks(
        name=name,
        flops={
            "fp64": scale(fp64, _T),
            "fp32": scale(fp32, _T),
            "tf32": scale(tf32, _T),
            "fp16": scale(fp16, _T),
            "bf16": scale(bf16, _T),
        },
        memory_bandwidth_bytes_per_s=scale(memory_gb_per_s, _GB),
        host_link_bytes_per_s=host_link,
        source=source,
        known=True,
    )


_H100 = "NVIDIA H100 Tensor Core GPU datasheet, dense (sparsity figures halved)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet, dense (sparsity figures halved)"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet, dense (sparsity figures halved)"

# fmt: off
#: Datasheet peaks of the GPUs :func:`identify_gpu` recognises, by variant.
GPU_PEAKS: dict[str, Peaks] = {
    peaks.name: peaks
    for peaks in (
        _datasheet(
            "H100 SXM5",
            fp64=34, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5,
            memory_gb_per_s=3350, host_link=_PCIE_GEN5_X16, source=_H100,
        ),
        _datasheet(
            "H100 PCIe",
            fp64=26, fp32=51, tf32=378, fp16=756, bf16=756,
            memory_gb_per_s=2000, host_link=_PCIE_GEN5_X16, source=_H100,
        ),
        _datasheet(
            "H100 NVL",
            fp64=30, fp32=60, tf32=417.5, fp16=835.5, bf16=835.5,
            memory_gb_per_s=3900, host_link=_PCIE_GEN5_X16, source=_H100,
        ),
        _datasheet(
            "H200 SXM",
            fp64=34, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5,
            memory_gb_per_s=4800, host_link=_PCIE_GEN5_X16, source=_H200,
        ),
        _datasheet(
            "H200 NVL",
            fp64=30, fp32=60, tf32=417.5, fp16=835.5, bf16=835.5,
            memory_gb_per_s=4800, host_link=_PCIE_GEN5_X16, source=_H200,
        ),
        _datasheet(
            "A100 SXM4 80GB",
            fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312,
            memory_gb_per_s=2039, host_link=_PCIE_GEN4_X16, source=_A100,
        ),
        _datasheet(
            "A100 SXM4 40GB",
            fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312,
            memory_gb_per_s=1555, host_link=_PCIE_GEN4_X16, source=_A100,
        ),
        _datasheet(
            "A100 PCIe 80GB",
            fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312,
            memory_gb_per_s=1935, host_link=_PCIE_GEN4_X16, source=_A100,
        ),
        _datasheet(
            "A100 PCIe 40GB",
            fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312,
            memory_gb_per_s=1555, host_link=_PCIE_GEN4_X16, source=_A100,
        ),
        _datasheet(
            "A10",
            fp64=None, fp32=31.2, tf32=62.5, fp16=125, bf16=125,
            memory_gb_per_s=600, host_link=_PCIE_GEN4_X16,
            source="NVIDIA A10 Tensor Core GPU datasheet, dense (sparsity figures halved)",
        ),
        _datasheet(
            # AWS's variant of the A10 has no NVIDIA datasheet: fp32 is derived
            # (80 SMs x 128 lanes x 2 FLOP x 1.71 GHz boost); tensor rates differ
            # from the A10's and are left unknown rather than guessed.
            "A10G",
            fp64=None, fp32=35.0, tf32=None, fp16=None, bf16=None,
            memory_gb_per_s=600, host_link=_PCIE_GEN4_X16,
            source=(
                "AWS A10G (no NVIDIA datasheet): 600 GB/s GDDR6; fp32 from "
                "80 SMs at 1.71 GHz boost; tensor-core peaks unknown"
            ),
        ),
        _datasheet(
            "L4",
            fp64=None, fp32=30.3, tf32=60, fp16=121, bf16=121,
            memory_gb_per_s=300, host_link=_PCIE_GEN4_X16,
            source="NVIDIA L4 Tensor Core GPU datasheet, dense (sparsity figures halved)",
        ),
        _datasheet(
            # Turing: no TF32 or BF16 tensor cores; fp16 is the tensor-core
            # mixed-precision figure; fp64 runs at 1/32 of fp32.
            "T4",
            fp64=0.25, fp32=8.1, tf32=None, fp16=65, bf16=None,
            memory_gb_per_s=320, host_link=_PCIE_GEN3_X16,
            source="NVIDIA T4 Tensor Core GPU datasheet (no TF32 or BF16 support)",
        ),
        _datasheet(
            # Tensor figures with FP32 accumulate (what torch matmuls use).
            "RTX 4090",
            fp64=None, fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2,
            memory_gb_per_s=1008, host_link=_PCIE_GEN4_X16,
            source=(
                "NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090), "
                "dense, FP32 accumulate"
            ),
        ),
    )
}
# fmt: on


# --------------------------------------------------------------------------------------
# Identifying a GPU
# --------------------------------------------------------------------------------------

_GIB = 2**30


@dataclass(frozen=True)
class _Rule:
    """How to recognise one GPU_PEAKS variant.

    ``names`` are full matches on the normalised name (see :func:`_normalise`);
    ``sm_count`` must equal the reported count and the reported memory must lie
    in ``memory_gib`` (both checked only when reported). ``require_details``
    means the name alone is ambiguous, so both must be reported.
    """

    variant: str
    names: tuple[str, ...]
    sm_count: int
    memory_gib: tuple[float, float]
    require_details: bool = False


_RULES: tuple[_Rule, ...] = (
    _Rule("H100 SXM5", ("h100 80gb hbm3", "h100 sxm5 80gb"), 132, (70, 81)),
    # Some systems report a bare "NVIDIA H100": only with an SXM5's SMs and memory.
    _Rule("H100 SXM5", ("h100",), 132, (70, 81), require_details=True),
    _Rule("H100 PCIe", ("h100 pcie",), 114, (70, 81)),
    _Rule("H100 NVL", ("h100 nvl",), 132, (85, 96)),
    _Rule("H200 SXM", ("h200",), 132, (125, 145)),
    _Rule("H200 NVL", ("h200 nvl",), 132, (125, 145)),
    _Rule("A100 SXM4 80GB", ("a100 sxm4 80gb",), 108, (70, 81)),
    _Rule("A100 SXM4 40GB", ("a100 sxm4 40gb",), 108, (35, 41)),
    _Rule("A100 PCIe 80GB", ("a100 80gb pcie", "a100 pcie 80gb"), 108, (70, 81)),
    _Rule("A100 PCIe 40GB", ("a100 pcie 40gb", "a100 40gb pcie"), 108, (35, 41)),
    _Rule("A10", ("a10",), 72, (20, 24.5)),
    _Rule("A10G", ("a10g",), 80, (20, 24.5)),
    _Rule("L4", ("l4",), 58, (20, 24.5)),
    _Rule("T4", ("t4",), 40, (13, 16)),
    _Rule("RTX 4090", ("rtx 4090",), 128, (20, 24.5)),
)

_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce"})


def _normalise(name: str) -> str:
    """Lower-case GPU name without vendor words: ``"NVIDIA A100-SXM4-80GB"`` ->
    ``"a100 sxm4 80gb"``."""
    words = re.sub(r"[\s_\-]+", " ", name.lower()).split()
    while words and words[0] in _VENDOR_WORDS:
        words.pop(0)
    return " ".join(words)


def identify_gpu(
    name: str, sm_count: int | None, total_memory_bytes: int | None
) -> str | None:
    """The :data:`GPU_PEAKS` key for a GPU, or ``None`` when it is not known.

    Parameters
    ----------
    name : str
        The name CUDA reports, e.g. ``"NVIDIA H100 80GB HBM3"``.
    sm_count : int or None
        ``multi_processor_count``; when given it must match the variant's.
    total_memory_bytes : int or None
        ``total_memory``; when given it must fit the variant's memory size.

    Returns
    -------
    str or None
        The variant (``"H100 SXM5"``). ``None`` for any other name, and when
        the SM count or memory contradict the name (a MIG slice, a cut-down
        part): peaks are never guessed.
    """
    normalised = _normalise(name)
    for rule in _RULES:
        if normalised not in rule.names:
            continue
        if rule.require_details and (sm_count is None or total_memory_bytes is None):
            continue
        if sm_count is not None and int(sm_count) != rule.sm_count:
            continue
        if total_memory_bytes is not None:
            low, high = rule.memory_gib
            if not low * _GIB <= total_memory_bytes <= high * _GIB:
                continue
        return rule.variant
    return None


def gpu_peaks(name: str, sm_count: int | None, total_memory_bytes: int | None) -> Peaks:
    """Datasheet peaks of a GPU, from what ``torch.cuda.get_device_properties`` says.

    Parameters
    ----------
    name, sm_count, total_memory_bytes
        As for :func:`identify_gpu`.

    Returns
    -------
    Peaks
        The :data:`GPU_PEAKS` entry, or ``known=False`` peaks named
        ``"unknown GPU (<name>)"`` with every figure ``None``.
    """
    variant = identify_gpu(name, sm_count, total_memory_bytes)
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


def _cpu_model_name() -> str:
    """The host CPU's model for naming measured peaks."""
    from gpuguide.device import _PROC_CPUINFO, _cpu_model, _read_text

    return _cpu_model(_read_text(_PROC_CPUINFO))


def _best_s(measurement: Any) -> float:
    """The best (minimum) time of a Measurement, in seconds."""
    best = float(measurement.min_s)
    if not (math.isfinite(best) and best > 0):
        raise RuntimeError(f"benchmark returned a non-positive best time: {best!r}")
    return best


def _measure_cpu_peaks(
    small: bool,
    bench: Callable[..., Any] | None = None,
    name: str | None = None,
) -> Peaks:
    """Measure the CPU's best matmul rates (fp32, fp64) and copy bandwidth."""
    import torch

    if bench is None:
        from gpuguide.timing import benchmark as bench
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
        name=name if name is not None else f"CPU: {_cpu_model_name()}",
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
    from gpuguide.device import DeviceInfo, pick_device

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
    """``value`` as a percentage of ``peak``.

    Parameters
    ----------
    value : float or None
        A measured rate, in the same unit as ``peak``.
    peak : float or None
        The peak rate.

    Returns
    -------
    float or None
        ``100 * value / peak``; ``None`` when either is unknown or the peak is
        not positive and finite.
    """
    if value is None or peak is None:
        return None
    peak = float(peak)
    if not (math.isfinite(peak) and peak > 0):
        return None
    return 100.0 * float(value) / peak
