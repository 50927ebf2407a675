"""Peak compute (FLOP/s) and bandwidth (bytes/s) figures to hold a measurement against.

A known NVIDIA GPU gets the dense figures of its datasheet row below (fp64: the
tensor-core figure where there is one); an unknown GPU gets unknown figures, never
a guess; a CPU gets measured ceilings. :meth:`Peaks.percent_of` is the one way to
compute a share of a peak; a rate above a datasheet peak is an error with
``GPUGUIDE_STRICT_PEAKS`` set.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuguide import checks, host
from gpuguide.device import DeviceInfo, GpuState, describe_device
from gpuguide.env import small_mode, strict_peaks
from gpuguide.timing import Measurement, benchmark
from gpuguide.units import format_bytes, format_value

if TYPE_CHECKING:
    import torch

__all__ = ["Peaks", "device_peaks"]

_FLOPS_KEYS = ("fp64", "fp32", "tf32", "fp16", "bf16")
_DTYPE_KEYS = {
    "torch.float64": "fp64",
    "torch.float32": "fp32",
    "torch.float16": "fp16",
    "torch.bfloat16": "bf16",
}

#: How far a rate may exceed a datasheet peak before it is an error: noise and a
#: board clocked a little high stay under it; a wrong row or count does not.
_PEAK_TOLERANCE = 1.02

#: NVML's negotiated link counts as the host link's peak only from this share of
#: the datasheet's link (an H100 in a gen 4 x8 slot: 1/4) or, for a GPU without a
#: row, from PCIe gen 3 x4; below it (gen 1 x1 in a virtual machine) NVML is not
#: describing the link the copies cross.
_PLAUSIBLE_LINK_SHARE = 0.25
_MIN_PLAUSIBLE_LINK_BYTES_PER_S = 4e9

#: Nominal bytes/s per lane and direction of each PCIe generation (x16: gen 3, 4
#: and 5 give 16, 32 and 64 GB/s).
_LANE_BYTES_PER_S = {1: 0.25e9, 2: 0.5e9, 3: 1e9, 4: 2e9, 5: 4e9, 6: 8e9}


class _GPUFigures(NamedTuple):
    """Dense datasheet peaks of one GPU variant; None where unknown or unsupported."""

    variant: str
    fp64_tflops: float | None  # the matmul figure: FP64 tensor cores where any
    fp32_tflops: float | None
    tf32_tflops: float | None
    fp16_tflops: float | None  # tensor cores, FP32 accumulate where the sheet says
    bf16_tflops: float | None
    memory_gb_per_s: float
    host_link_gb_per_s: float  # per direction
    source: str  # a key of _SOURCES


#: Where the figures of each row come from. Datasheets quote TF32, FP16 and BF16
#: tensor-core rates "with sparsity" (2:4 structured sparsity): the rows hold half.
_SOURCES: dict[str, str] = {
    "H100": (
        "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100), "
        "SXM, PCIe and NVL columns; dense (sparsity figures halved)"
    ),
    "H200": (
        "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200), "
        "SXM and NVL columns; dense (sparsity figures halved)"
    ),
    "A100": (
        "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100), "
        "PCIe and SXM columns, 40 and 80 GB; dense (sparsity figures halved)"
    ),
    "A10": (
        "NVIDIA A10 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/"
        "products/a10-gpu); dense (sparsity figures halved); no FP64 figure"
    ),
    "A10G": (
        "AWS A10G (no NVIDIA datasheet): 600 GB/s GDDR6; fp32 from "
        "80 SMs at 1.71 GHz boost; tensor-core peaks unknown"
    ),
    "L4": (
        "NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4); "
        "dense (sparsity figures halved); no FP64 figure"
    ),
    "T4": (
        "NVIDIA T4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/tesla-t4): "
        "no TF32 or BF16; FP64 is not on the sheet and is Turing's 1/32 of FP32"
    ),
    "RTX 4090": (
        "NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090), "
        "dense, FP32 accumulate; no FP64 figure"
    ),
}

# PCIe x16 per direction, nominal: gen 3, 4 and 5 give 16, 32 and 64 GB/s (datasheets
# quote both directions together: 32, 64 and 128 GB/s).
# fp64: the FP64 tensor-core rate where the GPU has one (A100, H100, H200: cuBLAS uses
# it for fp64 matmuls), else the vector rate.
# A10G: fp32 is 80 SMs x 128 lanes x 2 FLOP x 1.71 GHz; its tensor rates differ from
# the A10's and are left unknown. T4 (Turing): no TF32 or BF16; fp64 is 1/32 of fp32.
# fmt: off
_FIGURES: tuple[_GPUFigures, ...] = tuple(_GPUFigures(*row) for row in (
    # variant          fp64  fp32   tf32   fp16   bf16   GB/s  link  source
    ("H100 SXM5",      67,   67,    494.5, 989.5, 989.5, 3350, 64,   "H100"),
    ("H100 PCIe",      51,   51,    378,   756.5, 756.5, 2000, 64,   "H100"),
    ("H100 NVL",       60,   60,    417.5, 835.5, 835.5, 3900, 64,   "H100"),
    ("H200 SXM",       67,   67,    494.5, 989.5, 989.5, 4800, 64,   "H200"),
    ("H200 NVL",       60,   60,    417.5, 835.5, 835.5, 4800, 64,   "H200"),
    ("A100 SXM4 80GB", 19.5, 19.5,  156,   312,   312,   2039, 32,   "A100"),
    ("A100 SXM4 40GB", 19.5, 19.5,  156,   312,   312,   1555, 32,   "A100"),
    ("A100 PCIe 80GB", 19.5, 19.5,  156,   312,   312,   1935, 32,   "A100"),
    ("A100 PCIe 40GB", 19.5, 19.5,  156,   312,   312,   1555, 32,   "A100"),
    ("A10",            None, 31.2,  62.5,  125,   125,   600,  32,   "A10"),
    ("A10G",           None, 35.0,  None,  None,  None,  600,  32,   "A10G"),
    ("L4",             None, 30.3,  60,    121,   121,   300,  32,   "L4"),
    ("T4",             0.25, 8.1,   None,  65,    None,  320,  16,   "T4"),
    ("RTX 4090",       None, 82.6,  82.6,  165.2, 165.2, 1008, 32,   "RTX 4090"),
))
# fmt: on


@dataclass(frozen=True)
class Peaks:
    """Peak compute rates and bandwidths of one device.

    ``flops`` holds the dense matmul FLOP/s per precision (fp64, fp32, tf32, fp16,
    bf16; None where unknown); ``known`` is False for an unidentified device,
    ``measured`` True for a CPU's measured ceilings (``detail`` says how).
    ``host_link_negotiated`` names the PCIe link NVML says the GPU negotiates
    where ``host_link_bytes_per_s`` is that link's rate rather than the
    datasheet's (kept in ``datasheet_host_link_bytes_per_s``).
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
        flops = {key: self.flops.get(key) for key in _FLOPS_KEYS}
        object.__setattr__(self, "flops", MappingProxyType(flops))

    def flops_for(
        self, dtype: torch.dtype | str, *, tf32: bool = False
    ) -> float | None:
        """The peak matmul FLOP/s in ``dtype`` (a torch dtype or ``"fp32"``,
        ``"tf32"``...; TF32's for fp32 with ``tf32=True``), None where unknown."""
        return self._peak(dtype, tf32)[2]

    def host_link_for(self, rate: float | None = None) -> tuple[float | None, str]:
        """The host-link peak to hold ``rate`` (bytes/s) against, and what it is.

        The link NVML says the GPU negotiates where it is known, else the
        datasheet's; a rate above the negotiated link shows that NVML does not see
        the link the copies cross: the datasheet's link then.
        """
        link, negotiated = self.host_link_bytes_per_s, self.host_link_negotiated
        if link is None:
            return None, "unknown for this device"
        if negotiated is None:
            return link, "the datasheet link" if self.known else "the host link"
        sheet = self.datasheet_host_link_bytes_per_s
        if rate is None or rate <= _PEAK_TOLERANCE * link or sheet is None:
            return link, f"the negotiated link, {negotiated} (NVML)"
        return sheet, f"the datasheet link, as the rate is above NVML's {negotiated}"

    def percent_of(self, rate: float, of: torch.dtype | str) -> float | None:
        """``100 * rate / peak`` (at most 100) for ``of`` a precision, ``"memory"`` or
        ``"host_link"`` (the link :meth:`host_link_for` picks); None where unknown
        or above a datasheet peak (with ``GPUGUIDE_STRICT_PEAKS``: ValueError)."""
        what, unit, peak = self._peak(of)
        rate = checks.non_negative("rate", rate)
        if peak is not None and of == "host_link":
            peak = self.host_link_for(rate)[0]
        if peak is None:
            return None
        percent = 100.0 * rate / peak
        if self.measured or rate <= _PEAK_TOLERANCE * peak:
            return min(percent, 100.0)
        if strict_peaks() and self.known:
            msg = (
                f"{self.name}: a measured {what} rate of {format_value(rate, unit)} is "
                f"{percent:.0f}% of the listed peak {format_value(peak, unit)} "
                f"(source: {self.source}), more than the "
                f"{100 * (_PEAK_TOLERANCE - 1):.0f}% that measurement noise allows: a "
                "datasheet peak is a ceiling, so the datasheet row is wrong or the "
                "measurement is (its FLOP or byte count, its timing, or data served "
                "from a cache)"
            )
            raise ValueError(msg)
        return None

    def _peak(self, of: Any, tf32: bool = False) -> tuple[str, str, float | None]:
        """What ``of`` names, its unit and its peak (None where unknown)."""
        if of == "memory":
            return "memory bandwidth", "B/s", self.memory_bandwidth_bytes_per_s
        if of == "host_link":
            return "host-link bandwidth", "B/s", self.host_link_bytes_per_s
        key = of if of in _FLOPS_KEYS else _DTYPE_KEYS.get(str(of))
        if key is None:
            msg = f"dtype must be a float dtype or one of {_FLOPS_KEYS}, got {of!r}"
            raise ValueError(msg)
        key = "tf32" if key == "fp32" and tf32 else key
        return f"{key} matmul", "FLOP/s", self.flops[key]

    def share(self, rate: float, of: torch.dtype | str, *, peak: str = "peak") -> str:
        """:meth:`percent_of` for a sentence: ``"77% of peak"``, ``"peak unknown"``
        or ``"above the H100 SXM5 figure of ...: another clock..."``."""
        percent = self.percent_of(rate, of)
        what, unit, listed = self._peak(of)
        if percent is not None:
            link, which = self.host_link_for(rate)
            switched = of == "host_link" and link != listed
            return f"{percent:.0f}% of {peak}" + (f" ({which})" if switched else "")
        if listed is None:
            return f"{peak} unknown"
        return (
            f"above the {self.name} figure of {format_value(listed, unit)} "
            f"for {what}: another clock, power limit, variant or link"
        )


def _unknown(name: str, source: str) -> Peaks:
    """Peaks with every figure unknown."""
    return Peaks(name=name, flops={}, source=source, known=False)


def _from_datasheet(row: _GPUFigures) -> Peaks:
    """Peaks from a datasheet row (its fields 1 to 5: fp64 to bf16 TFLOP/s)."""
    return Peaks(
        name=row.variant,
        flops={
            key: None if value is None else value * 1e12
            for key, value in zip(_FLOPS_KEYS, row[1:6], strict=True)
        },
        memory_bandwidth_bytes_per_s=row.memory_gb_per_s * 1e9,
        host_link_bytes_per_s=row.host_link_gb_per_s * 1e9,
        source=_SOURCES[row.source],
    )


#: Datasheet peaks of the GPUs gpuguide recognises, by variant.
_GPU_PEAKS = {row.variant: _from_datasheet(row) for row in _FIGURES}


@dataclass(frozen=True)
class _CpuPlan:
    """How hard the CPU's ceilings are looked for."""

    first_n: int  # the first matmul size; each next one doubles it
    min_n: int  # sizes up to this one are always measured
    max_n: int  # the largest matmul size
    call_s: float  # a size above min_n is tried only if its call should take less
    warmup_ms: float
    rep_ms: float


#: Per mode (small or not): about a second on most CPUs, or quick.
_CPU_PLANS = {
    False: _CpuPlan(256, 1024, 4096, 0.1, 10.0, 50.0),
    True: _CpuPlan(128, 256, 512, 0.004, 2.0, 10.0),
}


def streaming_bytes(*, small: bool) -> int:
    """Bytes of each tensor with which the CPU's memory ceiling is measured: eight
    times the last-level caches (64 MiB where unknown) as a power of two, 64 MiB
    to 2 GiB and at most a sixteenth of the available memory; 32 MiB if small.
    Eight, not four: a virtual machine may see a smaller cache than its host has."""
    if small:
        return 32 * 2**20
    cache = host.last_level_cache_bytes() or 64 * 2**20
    wanted = 2 ** math.ceil(math.log2(8 * cache))
    cap = 2 ** math.floor(math.log2(max(host.available_memory_bytes() / 16, 1)))
    return int(max(64 * 2**20, min(wanted, cap, 2**31)))


def _best_s(measurement: Measurement) -> float:
    """The best time of a Measurement, in seconds (checked > 0)."""
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
    return best, f"{key} {format_value(best, 'FLOP/s')} at n={n}"


def _bandwidth_ceiling(
    plan: _CpuPlan, bench: Callable[..., Measurement], nbytes: int
) -> tuple[float, str]:
    """The best bytes/s of a copy, an add and a sum of tensors past the caches
    (which is fastest depends on the CPU)."""
    import torch

    x, y, out = (torch.ones(nbytes // 4) for _ in range(3))
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
    return rates[best], f"memory {format_value(rates[best], 'B/s')} by {text}"


@functools.lru_cache(maxsize=4)
def _measure_cpu_peaks(
    small: bool, bench: Callable[..., Measurement] = benchmark, threads: int = 0
) -> Peaks:
    """The CPU's best fp32 and fp64 matmul rates and memory bandwidth, measured
    (``threads``: torch's thread count, which the cache keys on)."""
    import torch

    plan = _CPU_PLANS[small]
    fp32, fp32_text = _matmul_ceiling("fp32", torch.float32, plan, bench)
    fp64, fp64_text = _matmul_ceiling("fp64", torch.float64, plan, bench)
    nbytes = streaming_bytes(small=small)
    bandwidth, memory_text = _bandwidth_ceiling(plan, bench, nbytes)
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


def _with_negotiated_link(peaks: Peaks, state: GpuState | None) -> Peaks:
    """``peaks`` with the host link the GPU negotiates in its slot (NVML's maximum
    PCIe generation and width) where NVML says and it is plausible; the source
    says why a link NVML gives is not taken."""
    if state is None:
        return peaks
    generation, width = state.pcie_max_generation, state.pcie_max_width
    if not width or generation not in _LANE_BYTES_PER_S:
        return peaks  # no maximum link: the link now is an idle card's, not a peak
    link = _LANE_BYTES_PER_S[generation] * width
    label = f"PCIe gen {generation} x{width}"
    sheet = peaks.host_link_bytes_per_s
    floor = _MIN_PLAUSIBLE_LINK_BYTES_PER_S
    floor = floor if sheet is None else _PLAUSIBLE_LINK_SHARE * sheet
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
    said = f"NVML's {label} ({format_value(link, 'B/s')})"
    return replace(
        peaks, source=f"{peaks.source}; host link: {kept}, as {said} is {why}"
    )


def device_peaks(device: str | torch.device | DeviceInfo | None = None) -> Peaks:
    """Peaks for a device (by default :func:`~gpuguide.device.pick_device`'s):
    datasheet for a known GPU (its host link as negotiated, where NVML says),
    measured for a CPU (once per process and mode), unknown otherwise."""
    info = device if isinstance(device, DeviceInfo) else describe_device(device)
    if info.type == "cpu":
        import torch

        return _measure_cpu_peaks(small_mode(), threads=torch.get_num_threads())
    if info.type != "cuda":
        return _unknown(
            "Apple GPU (MPS)",
            "no datasheet figures for Apple GPUs in gpuguide: figures unknown",
        )
    peaks = _GPU_PEAKS.get(info.variant or "") or _unknown(
        f"unknown GPU ({' '.join(info.name.split())})",
        "no datasheet entry for this GPU in gpuguide.peaks: figures unknown",
    )
    return _with_negotiated_link(peaks, info.gpu_state)
