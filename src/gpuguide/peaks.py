"""Peak compute (FLOP/s) and bandwidth (bytes/s) figures to hold a measurement against.

A known NVIDIA GPU gets the dense datasheet figures of :mod:`gpuguide.datasheet`
(fp64: the tensor-core figure where there is one); an unknown GPU gets unknown
figures, never a guess; a CPU gets measured ceilings (:func:`measure_cpu_peaks`).
A rate above a datasheet peak is an error (:class:`PeakExceededError`).
:meth:`Peaks.percent_of` is the one way to compute a share of a peak.

>>> import torch
>>> peaks = gpu_peaks("NVIDIA H100 80GB HBM3", 132, 85_045_379_072)
>>> peaks.name, peaks.flops_for(torch.bfloat16)
('H100 SXM5', 989500000000000.0)
>>> round(peaks.percent_of(59.8e12, torch.float64), 1)  # fp64 tensor cores: 67
89.3
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gpuguide import checks, datasheet, host, nvml
from gpuguide.device import DeviceInfo, describe_device
from gpuguide.env import small_mode, strict_peaks
from gpuguide.nvml import GpuState
from gpuguide.timing import Measurement, benchmark
from gpuguide.units import format_bytes, format_rate

if TYPE_CHECKING:
    import torch

__all__ = ["Peaks", "device_peaks"]

#: The precisions a :class:`Peaks` lists, in this order.
FLOPS_KEYS: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16")

#: How far a rate may exceed a datasheet peak (reading 100%) before it is an error:
#: noise and a board clocked a little high stay under it; a wrong row or count does not.
PEAK_TOLERANCE = 1.02

#: The least share of the datasheet's host link that NVML's negotiated link may be
#: and still count as the link's peak: a card in an older or narrower slot (an
#: H100's gen 5 x16 in a gen 4 x16 or gen 4 x8 slot: 1/2, 1/4). Below it (gen 1 x1,
#: 0.25 GB/s, as a virtual machine's emulated slot can read) NVML is not describing
#: the link the copies cross, and the datasheet's link is the peak.
PLAUSIBLE_LINK_SHARE = 0.25

#: The same floor for a GPU without a datasheet row: PCIe gen 3 x4 (an external
#: enclosure), the narrowest link a CUDA GPU is commonly attached by.
MIN_PLAUSIBLE_LINK_BYTES_PER_S = 4e9


class PeakExceededError(ValueError):
    """A measured rate above a datasheet peak: the row or the measurement is wrong."""


@dataclass(frozen=True)
class Peaks:
    """Peak compute rates and bandwidths of one device.

    ``flops`` holds the dense matmul FLOP/s per precision of :data:`FLOPS_KEYS`
    (None where unknown); ``known`` is False for an unidentified device,
    ``measured`` True for a CPU's measured ceilings (``detail`` says how).
    ``host_link_negotiated`` names the PCIe link NVML says the GPU negotiates
    (``"PCIe gen 4 x16"``) where ``host_link_bytes_per_s`` is that link's rate
    rather than the datasheet's, kept in ``datasheet_host_link_bytes_per_s``
    (:func:`with_negotiated_link`, :meth:`host_link_for`).
    """

    name: str
    flops: Mapping[str, float | None]
    memory_bandwidth_bytes_per_s: float | None = None
    host_link_bytes_per_s: float | None = None
    source: str = ""
    known: bool = True
    measured: bool = False
    detail: str = ""
    host_link_negotiated: str | None = None
    datasheet_host_link_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        flops = {key: self.flops.get(key) for key in FLOPS_KEYS}
        object.__setattr__(self, "flops", MappingProxyType(flops))

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
        """The peak matmul FLOP/s in ``dtype`` (a torch dtype or a name of
        :data:`FLOPS_KEYS`; TF32's for fp32 with ``tf32=True``), None where unknown."""
        return self._peak(dtype, tf32)[2]

    def host_link_for(self, rate: float | None = None) -> tuple[float | None, str]:
        """The host-link peak to hold ``rate`` (bytes/s) against, and what it is.

        The link NVML says the GPU negotiates where :func:`with_negotiated_link`
        took it, else the datasheet's. A rate above the negotiated link (beyond
        :data:`PEAK_TOLERANCE`) shows that NVML does not see the link the copies
        cross (a virtual machine's emulated slot): the datasheet's link then.

        >>> GPU_PEAKS["H100 SXM5"].host_link_for(50e9)
        (64000000000.0, 'the datasheet link')
        """
        link, negotiated = self.host_link_bytes_per_s, self.host_link_negotiated
        if link is None:
            return None, "unknown for this device"
        if negotiated is None:
            return link, "the datasheet link" if self.known else "the host link"
        sheet = self.datasheet_host_link_bytes_per_s
        if rate is None or rate <= PEAK_TOLERANCE * link or sheet is None:
            return link, f"the negotiated link, {negotiated} (NVML)"
        return sheet, f"the datasheet link, as the rate is above NVML's {negotiated}"

    def percent_of(
        self, rate: float, of: torch.dtype | str, *, tf32: bool = False
    ) -> float | None:
        """``100 * rate / peak`` (at most 100) for ``of`` a precision, ``"memory"`` or
        ``"host_link"`` (the link :meth:`host_link_for` picks for ``rate``); None
        where unknown or above :data:`PEAK_TOLERANCE` times a datasheet peak (with
        ``GPUGUIDE_STRICT_PEAKS``: :class:`PeakExceededError`)."""
        what, unit, peak = self._peak(of, tf32)
        rate = checks.non_negative("rate", rate)
        if peak is not None and of == "host_link":
            peak = self.host_link_for(rate)[0]
        if peak is None:
            return None
        percent = 100.0 * rate / peak
        if self.measured or rate <= PEAK_TOLERANCE * peak:
            return min(percent, 100.0)
        if strict_peaks() and self.known:
            msg = (
                f"{self.name}: a measured {what} rate of {format_rate(rate, unit)} is "
                f"{percent:.0f}% of the listed peak {format_rate(peak, unit)} "
                f"(source: {self.source}), more than the "
                f"{100 * (PEAK_TOLERANCE - 1):.0f}% that measurement noise allows: a "
                "datasheet peak is a ceiling, so the datasheet row is wrong or the "
                "measurement is (its FLOP or byte count, its timing, or data served "
                "from a cache)"
            )
            raise PeakExceededError(msg)
        return None

    def _peak(self, of: torch.dtype | str, tf32: bool) -> tuple[str, str, float | None]:
        """What ``of`` names, its unit and its peak (None where unknown)."""
        if of == "memory":
            return "memory bandwidth", "B/s", self.memory_bandwidth_bytes_per_s
        if of == "host_link":
            return "host-link bandwidth", "B/s", self.host_link_bytes_per_s
        key = _precision_key(of)
        key = "tf32" if key == "fp32" and tf32 else key
        return f"{key} matmul", "FLOP/s", self.flops[key]

    def share(
        self,
        rate: float,
        of: torch.dtype | str,
        *,
        tf32: bool = False,
        peak: str = "peak",
    ) -> str:
        """:meth:`percent_of` for a sentence: ``"77% of peak"``, ``"peak unknown"``
        or ``"above the H100 SXM5 datasheet's ...: another clock..."``."""
        percent = self.percent_of(rate, of, tf32=tf32)
        what, unit, listed = self._peak(of, tf32)
        if percent is not None:
            link, which = self.host_link_for(rate)
            switched = of == "host_link" and link != listed
            return f"{percent:.0f}% of {peak}" + (f" ({which})" if switched else "")
        if listed is None:
            return f"{peak} unknown"
        return (
            f"above the {self.name} figure of {format_rate(listed, unit)} "
            f"for {what}: another clock, power limit, variant or link"
        )


def _precision_key(dtype: Any) -> str:
    """The :data:`FLOPS_KEYS` entry for a torch dtype or a precision name."""
    if isinstance(dtype, str) and dtype in FLOPS_KEYS:
        return dtype
    key = {"torch.float64": "fp64", "torch.float32": "fp32"}.get(str(dtype))
    key = key or {"torch.float16": "fp16", "torch.bfloat16": "bf16"}.get(str(dtype))
    if key is None:
        msg = f"dtype must be a float dtype or one of {FLOPS_KEYS}, got {dtype!r}"
        raise ValueError(msg)
    return key


def _unknown(name: str, source: str) -> Peaks:
    """Peaks with every figure unknown."""
    return Peaks(name=name, flops={}, source=source, known=False)


def _from_datasheet(row: datasheet.GPUFigures) -> Peaks:
    """Peaks from a datasheet row (fp64: tensor cores if any)."""
    fp64 = row.fp64_tensor_tflops if row.fp64_tensor_tflops else row.fp64_tflops
    tflops = (fp64, row.fp32_tflops, row.tf32_tflops, row.fp16_tflops, row.bf16_tflops)
    return Peaks(
        name=row.variant,
        flops={
            key: None if value is None else value * 1e12
            for key, value in zip(FLOPS_KEYS, tflops, strict=True)
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
    """Datasheet peaks of a GPU from its name, SM count and memory; unknown if not
    in :data:`GPU_PEAKS`."""
    variant = datasheet.identify_gpu(name, sm_count, total_memory_bytes)
    if variant is None:
        return _unknown(
            f"unknown GPU ({' '.join(str(name).split())})",
            "no datasheet entry for this GPU in gpuguide.peaks.GPU_PEAKS: "
            "figures unknown",
        )
    return GPU_PEAKS[variant]


@dataclass(frozen=True)
class _CpuPlan:
    """How hard :func:`measure_cpu_peaks` looks for the CPU's ceiling."""

    first_n: int  # the first matmul size; each next one doubles it
    min_n: int  # sizes up to this one are always measured
    max_n: int  # the largest matmul size
    call_s: float  # a size above min_n is tried only if its call should take less
    warmup_ms: float
    rep_ms: float
    copy_bytes: int  # the least bytes of each tensor of the bandwidth kernels
    # Each tensor is raised to this many times the last-level caches (0: never).
    cache_multiple: int = 0


#: Per mode (small or not): about a second on most CPUs, or quick.
_CPU_PLANS = {
    False: _CpuPlan(256, 1024, 4096, 0.1, 10.0, 50.0, 64 * 2**20, cache_multiple=4),
    True: _CpuPlan(128, 256, 512, 0.004, 2.0, 10.0, 32 * 2**20),
}
#: The last-level caches' size assumed where the host does not say, in bytes.
_ASSUMED_CACHE_BYTES = 64 * 2**20
#: A bandwidth kernel's tensor takes at most this share of the available memory.
_MEMORY_SHARE = 1 / 16
_MAX_STREAMING_BYTES = 2**31


def _streaming_bytes(
    plan: _CpuPlan, cache_bytes: int | None, available_bytes: int
) -> int:
    """Bytes of each tensor the bandwidth kernels stream."""
    if not plan.cache_multiple:
        return plan.copy_bytes
    cache = _ASSUMED_CACHE_BYTES if cache_bytes is None else cache_bytes
    wanted = 2 ** math.ceil(math.log2(max(plan.cache_multiple * cache, 1)))
    cap = 2 ** math.floor(math.log2(max(available_bytes * _MEMORY_SHARE, 1)))
    return int(max(plan.copy_bytes, min(wanted, cap, _MAX_STREAMING_BYTES)))


def streaming_bytes(*, small: bool | None = None) -> int:
    """Bytes of each tensor with which the CPU's memory ceiling is measured: four
    times the last-level caches as a power of two, 64 MiB to 2 GiB and at most a
    sixteenth of the available memory; 32 MiB in small mode."""
    plan = _CPU_PLANS[small_mode() if small is None else bool(small)]
    if not plan.cache_multiple:
        return plan.copy_bytes
    cache, available = host.last_level_cache_bytes(), host.available_memory_bytes()
    return _streaming_bytes(plan, cache, available)


def _best_s(measurement: Measurement) -> float:
    """The best time of a Measurement, in seconds."""
    best = float(measurement.min_s)
    if not (math.isfinite(best) and best > 0):
        msg = f"the best time must be > 0, got {best!r} from benchmark"
        raise RuntimeError(msg)
    return best


def _matmul_ceiling(
    key: str, dtype: Any, plan: _CpuPlan, bench: Callable[..., Measurement]
) -> tuple[float, str]:
    """The best FLOP/s of square matmuls of growing size, and how it was found."""
    import torch

    runs: list[tuple[int, float]] = []
    n = plan.first_n
    while True:
        a, b, out = (torch.randn(n, n, dtype=dtype) for _ in range(3))
        m = bench(
            torch.mm,
            args=(a, b),
            kwargs={"out": out},
            label=f"{key} mm {n}",
            device="cpu",
            warmup_ms=plan.warmup_ms,
            rep_ms=plan.rep_ms,
            min_reps=3,
            max_reps=50,
        )
        runs.append((n, 2.0 * n**3 / _best_s(m)))
        # The next size does 8x the work.
        if 2 * n > plan.max_n or (n >= plan.min_n and 8 * _best_s(m) > plan.call_s):
            break
        n *= 2
    n, best = max(runs, key=lambda run: run[1])
    return best, f"{key} {format_rate(best, 'FLOP/s')} at n={n}"


def _bandwidth_ceiling(
    plan: _CpuPlan, bench: Callable[..., Measurement], nbytes: int
) -> tuple[float, str]:
    """The best bytes/s of a copy, an add and a sum of tensors past the caches
    (which is fastest depends on the CPU)."""
    import torch

    x, y, out = (
        torch.ones(nbytes // 4),
        torch.ones(nbytes // 4),
        torch.empty(nbytes // 4),
    )
    kernels = {  # name -> (call, arguments, bytes moved)
        "copy": (out.copy_, (x,), 2 * nbytes),
        "add": (functools.partial(torch.add, out=out), (x, y), 3 * nbytes),
        "sum": (torch.sum, (x,), nbytes),
    }
    rates = {}
    for name, (fn, args, moved) in kernels.items():
        m = bench(
            fn,
            args=args,
            label=name,
            device="cpu",
            warmup_ms=plan.warmup_ms,
            rep_ms=plan.rep_ms,
            min_reps=5,
            max_reps=50,
        )
        rates[name] = moved / _best_s(m)
    best = max(rates, key=rates.__getitem__)
    text = f"{'an' if best == 'add' else 'a'} {best} of {format_bytes(nbytes)} tensors"
    return rates[best], f"memory {format_rate(rates[best], 'B/s')} by {text}"


@functools.lru_cache(maxsize=2)
def _measure_cpu_peaks(
    small: bool, bench: Callable[..., Measurement] = benchmark
) -> Peaks:
    """Measure the CPU's best fp32 and fp64 matmul rates and memory bandwidth."""
    import torch

    plan = _CPU_PLANS[small]
    fp32, fp32_text = _matmul_ceiling("fp32", torch.float32, plan, bench)
    fp64, fp64_text = _matmul_ceiling("fp64", torch.float64, plan, bench)
    bandwidth, memory_text = _bandwidth_ceiling(
        plan, bench, streaming_bytes(small=small)
    )
    threads = torch.get_num_threads()
    return Peaks(
        name=f"CPU: {host.cpu_model()}",
        flops={"fp32": fp32, "fp64": fp64},
        memory_bandwidth_bytes_per_s=bandwidth,
        source="measured on this CPU (best achieved, not a datasheet)",
        measured=True,
        detail=f"best calls with {threads} torch thread(s): "
        f"{fp32_text}; {fp64_text}; {memory_text}",
    )


def measure_cpu_peaks() -> Peaks:
    """Measure what this CPU achieves, once per process and mode: a ceiling for its
    peaks (best calls of fp32 and fp64 matmuls and of streaming kernels)."""
    return _measure_cpu_peaks(small_mode())


def with_negotiated_link(peaks: Peaks, state: GpuState | None) -> Peaks:
    """``peaks`` with the host link the GPU negotiates in its slot (NVML's maximum
    PCIe generation and width) where NVML says and it is plausible.

    Plausible: at least :data:`PLAUSIBLE_LINK_SHARE` of the datasheet's link (for
    a GPU without one, :data:`MIN_PLAUSIBLE_LINK_BYTES_PER_S`) and not above it. A
    link that NVML does not give, or gives implausibly (gen 1 x1 in a virtual
    machine), leaves the datasheet's link; the source says why.
    """
    if state is None:
        return peaks
    generation, width = state.pcie_max_generation, state.pcie_max_width
    link = nvml.link_bytes_per_s(generation, width)
    if link is None:  # no maximum link: the link now is an idle card's, not a peak
        return peaks
    label = f"PCIe gen {generation} x{width}"
    sheet = peaks.host_link_bytes_per_s
    floor = (
        MIN_PLAUSIBLE_LINK_BYTES_PER_S
        if sheet is None
        else PLAUSIBLE_LINK_SHARE * sheet
    )
    said = f"NVML's {label} ({format_rate(link, 'B/s')})"
    if floor <= link <= (sheet or link):
        return replace(
            peaks,
            host_link_bytes_per_s=link,
            host_link_negotiated=label,
            datasheet_host_link_bytes_per_s=sheet,
            source=f"{peaks.source}; host link: {label} as negotiated (NVML)",
        )
    why = (
        "implausibly slow for this GPU" if link < floor else "faster than its own link"
    )
    kept = "the datasheet's" if sheet is not None else "unknown"
    return replace(
        peaks, source=f"{peaks.source}; host link: {kept}, as {said} is {why}"
    )


def device_peaks(device: str | torch.device | DeviceInfo | None = None) -> Peaks:
    """Peaks for a device (by default :func:`~gpuguide.device.pick_device`'s):
    datasheet for a known GPU (its host link as negotiated, where NVML says),
    measured for a CPU, unknown for MPS."""
    info = device if isinstance(device, DeviceInfo) else describe_device(device)
    if info.type == "cuda":
        peaks = gpu_peaks(info.name, info.sm_count, info.total_memory_bytes)
        return with_negotiated_link(peaks, info.gpu_state)
    if info.type == "cpu":
        return measure_cpu_peaks()
    return _unknown(
        "Apple GPU (MPS)",
        "no datasheet figures for Apple GPUs in gpuguide: figures unknown",
    )
