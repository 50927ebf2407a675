"""Pick the device to run on and describe it, for labels and provenance lines.

:func:`pick_device` chooses where a page runs and caps a CUDA allocator at
``GPUGUIDE_GPU_MEMORY``; :func:`describe_device` collects what a reader needs to
judge a measurement: the datasheet variant a GPU is, and what NVML says about it
(:class:`GpuState`) where the optional ``nvidia-ml-py`` is installed.
"""

from __future__ import annotations

import functools
import platform
import re
import warnings
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuguide import host
from gpuguide.env import (
    DEVICE_ENV,
    GPU_MEMORY_ENV,
    SMALL_GPU_MEMORY,
    device_override,
    gpu_memory_cap,
    small_mode,
)
from gpuguide.units import format_bytes
from gpuguide.version import __version__, describe_version, version_label

if TYPE_CHECKING:
    import torch

__all__ = ["DeviceInfo", "GpuState", "describe_device", "pick_device"]

# The cap each CUDA device's allocator was last given, by index.
_applied_caps: dict[int, int | None] = {}


def _mps_available() -> bool:
    """Whether this torch build can use Apple's MPS backend here."""
    import torch

    return bool(torch.backends.mps.is_available())


def _check_available(device: torch.device) -> torch.device:
    """``device`` (with a CUDA index filled in); raise if it cannot run here."""
    import torch

    if device.type not in ("cuda", "mps", "cpu"):
        msg = f"device type must be cuda, mps or cpu, got {device.type!r}"
        raise ValueError(msg)
    if device.type == "cpu":
        return torch.device("cpu")
    cuda = device.type == "cuda"
    if not (torch.cuda.is_available() if cuda else _mps_available()):
        msg = (
            f"device {str(device)!r} was asked for, but "
            f"{'CUDA' if cuda else 'the MPS backend'} is not available (torch "
            f"{torch.__version__}, built with CUDA {torch.version.cuda or 'none'}); "
            f"use 'cpu' or unset {DEVICE_ENV}"
        )
        raise RuntimeError(msg)
    if not cuda:
        return torch.device("mps")
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if device.index is None else device.index
    if not 0 <= index < count:
        msg = (
            f"device {str(device)!r} was asked for, but only {count} CUDA "
            "device(s) are visible"
        )
        raise RuntimeError(msg)
    return torch.device("cuda", index)


def pick_device(prefer: str | torch.device | None = None) -> torch.device:
    """Choose the device: ``prefer`` (``"cuda:1"``, ``"mps"``...), else
    ``GPUGUIDE_DEVICE``, else the current CUDA device, else MPS, else the CPU.

    A CUDA device's allocator is capped (:func:`apply_memory_cap`). Raises
    ``RuntimeError`` if the device is not available, else ``ValueError``."""
    import torch

    choice: Any = device_override() if prefer is None else prefer
    if isinstance(choice, str):
        try:
            choice = torch.device(choice.strip())
        except RuntimeError as error:
            msg = f"device must name a device, got {choice!r} ({error})"
            raise ValueError(msg) from None
    if choice is not None:
        device = _check_available(torch.device(choice))
    elif torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    elif _mps_available():
        device = torch.device("mps")
    else:
        device = torch.device("cpu")
    apply_memory_cap(device)  # CUDA only: CPU and MPS ignore the cap
    return device


def apply_memory_cap(device: str | torch.device) -> int | None:
    """Cap this process's CUDA allocator on ``device`` at ``GPUGUIDE_GPU_MEMORY``
    (small mode: by default :data:`gpuguide.env.SMALL_GPU_MEMORY`), so a large GPU
    runs a page as a smaller one would; the cap in bytes, None where none applies."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    cap = gpu_memory_cap()
    small_default = cap is None and small_mode()
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    if not small_default and _applied_caps.get(index) == cap:
        return cap  # also: never capped and no cap asked for, so no CUDA call
    # The allocator's fraction is of the total that cudaMemGetInfo reports.
    total = int(torch.cuda.mem_get_info(index)[1])
    if small_default:
        cap = min(SMALL_GPU_MEMORY, total)
        if _applied_caps.get(index) == cap:
            return cap
    elif cap is not None and cap > total:
        name = _clean(str(torch.cuda.get_device_properties(index).name))
        msg = (
            f"{GPU_MEMORY_ENV} asks for {format_bytes(cap)} ({cap:,} bytes), more "
            f"than the {format_bytes(total)} ({total:,} bytes) of cuda:{index} "
            f"({name}); set at most that, or unset {GPU_MEMORY_ENV}"
        )
        raise ValueError(msg)
    # No cap after a cap (the variable was unset): give the allocator all back.
    torch.cuda.set_per_process_memory_fraction(
        1.0 if cap is None else cap / total, index
    )
    _applied_caps[index] = cap
    return cap


class _GPUName(NamedTuple):
    """How one datasheet variant shows in ``torch.cuda.get_device_properties``."""

    variant: str  # a row of gpuguide.peaks' datasheet figures
    names: tuple[str, ...]  # normalised names (see _normalise)
    sm_count: int
    memory_gib: tuple[float, float]  # the range total_memory falls in
    bare: bool = False  # a name shared by variants: SMs and memory must be reported


# fmt: off
_NAMES: tuple[_GPUName, ...] = tuple(_GPUName(*row) for row in (
    # variant          normalised names                          SMs  memory GiB
    ("H100 SXM5",      ("h100 80gb hbm3", "h100 sxm5 80gb"),     132, (70, 81)),
    ("H100 SXM5",      ("h100",),                                132, (70, 81), True),
    ("H100 PCIe",      ("h100 pcie",),                           114, (70, 81)),
    ("H100 NVL",       ("h100 nvl",),                            132, (85, 96)),
    ("H200 SXM",       ("h200",),                                132, (125, 145)),
    ("H200 NVL",       ("h200 nvl",),                            132, (125, 145)),
    ("A100 SXM4 80GB", ("a100 sxm4 80gb",),                      108, (70, 81)),
    ("A100 SXM4 40GB", ("a100 sxm4 40gb",),                      108, (35, 41)),
    ("A100 PCIe 80GB", ("a100 80gb pcie", "a100 pcie 80gb"),     108, (70, 81)),
    ("A100 PCIe 40GB", ("a100 pcie 40gb", "a100 40gb pcie"),     108, (35, 41)),
    ("A10",            ("a10",),                                 72,  (20, 24.5)),
    ("A10G",           ("a10g",),                                80,  (20, 24.5)),
    ("L4",             ("l4",),                                  58,  (20, 24.5)),
    ("T4",             ("t4",),                                  40,  (13, 16)),
    ("RTX 4090",       ("rtx 4090",),                            128, (20, 24.5)),
))
# fmt: on
_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce"})


def _normalise(name: str) -> str:
    """Lower-case GPU name without vendor words: ``"a100 sxm4 80gb"``."""
    words = re.sub(r"[\s_\-]+", " ", name.lower()).split()
    while words and words[0] in _VENDOR_WORDS:
        words.pop(0)
    return " ".join(words)


def _identify_gpu(
    name: str, sm_count: int | None, total_memory_bytes: int | None
) -> str | None:
    """The datasheet variant (``"H100 SXM5"``) a GPU is, from CUDA's name, SM count
    and memory (each must match where given); None for any other name, or when the
    SMs or memory contradict it (a MIG slice, a cut-down part)."""
    normalised = _normalise(name)
    for rule in _NAMES:
        if normalised not in rule.names:
            continue
        if rule.bare and (sm_count is None or total_memory_bytes is None):
            continue
        if sm_count is not None and int(sm_count) != rule.sm_count:
            continue
        low, high = rule.memory_gib
        if total_memory_bytes is not None and not (
            low * 2**30 <= total_memory_bytes <= high * 2**30
        ):
            continue
        return rule.variant
    return None


#: What limits the clocks, by NVML's bit (``nvmlClocksEventReason*``). "GPU idle"
#: (0x1) is left out: nothing ran when sampled, nothing held a run back.
_CLOCK_LIMITS: dict[int, str] = {
    0x2: "applications clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}
_IDLE = 0x1


@dataclass(frozen=True)
class GpuState:
    """What NVML says about one GPU; None where it did not say.

    Clocks in MHz (now and maximum), the enforced power limit in watts, the PCIe
    link now and the most GPU and slot can negotiate (an idle GPU lowers it), and
    what limited the clocks when sampled (empty: nothing).
    """

    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    memory_clock_mhz: int | None = None
    memory_clock_max_mhz: int | None = None
    power_limit_w: float | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None
    pcie_max_generation: int | None = None
    pcie_max_width: int | None = None
    clock_limits: tuple[str, ...] | None = None

    @property
    def link_label(self) -> str | None:
        """``"PCIe gen 5 x16"``: the most the link negotiates, else the link now."""
        if self.pcie_max_generation and self.pcie_max_width:
            return f"PCIe gen {self.pcie_max_generation} x{self.pcie_max_width}"
        if self.pcie_generation and self.pcie_width:
            return f"PCIe gen {self.pcie_generation} x{self.pcie_width}"
        return None

    def to_json(self) -> dict[str, object]:
        """The known fields, by name (clock limits as a list)."""
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in asdict(self).items()
            if value is not None
        }


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@functools.lru_cache(maxsize=1)
def _nvml() -> ModuleType | None:
    """``pynvml``, initialised once per process; None without it or a driver."""
    try:
        with warnings.catch_warnings():  # the old "pynvml" package warns on import
            warnings.simplefilter("ignore")
            import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]

        pynvml.nvmlInit()
    except Exception:  # no package, no driver, no library: no NVML
        return None
    module: ModuleType = pynvml
    return module


def _gpu_state(props: Any) -> GpuState | None:
    """What NVML says now about the GPU of ``torch.cuda.get_device_properties``'s
    ``props``, found by its PCI bus id (whatever ``CUDA_VISIBLE_DEVICES`` says);
    None without NVML, a bus id or that GPU. Each query may fail on its own."""
    ids = [
        getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")
    ]
    nvml = _nvml()
    if nvml is None or not all(map(_is_int, ids)):
        return None
    domain, bus, device = ids
    bus_id = f"{domain:08X}:{bus:02X}:{device:02X}.0"

    def query(name: str, *args: object) -> Any:
        try:
            return getattr(nvml, name)(*args)
        except Exception:  # each NVML query fails on its own
            return None

    handle = query("nvmlDeviceGetHandleByPciBusId", bus_id.encode("ascii"))
    if handle is None:
        return None

    def number(name: str, *args: object) -> int | None:
        value = query(name, handle, *args)
        return value if _is_int(value) else None

    sm, mem = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    milliwatts = number("nvmlDeviceGetEnforcedPowerLimit")
    if milliwatts is None:
        milliwatts = number("nvmlDeviceGetPowerManagementLimit")
    reasons = number("nvmlDeviceGetCurrentClocksEventReasons")  # NVML 12.535 on
    if reasons is None:
        reasons = number("nvmlDeviceGetCurrentClocksThrottleReasons")
    bits = [1 << i for i in range((reasons or 0).bit_length())]
    return GpuState(
        sm_clock_mhz=number("nvmlDeviceGetClockInfo", sm),
        sm_clock_max_mhz=number("nvmlDeviceGetMaxClockInfo", sm),
        memory_clock_mhz=number("nvmlDeviceGetClockInfo", mem),
        memory_clock_max_mhz=number("nvmlDeviceGetMaxClockInfo", mem),
        power_limit_w=None if milliwatts is None else milliwatts / 1000,
        pcie_generation=number("nvmlDeviceGetCurrPcieLinkGeneration"),
        pcie_width=number("nvmlDeviceGetCurrPcieLinkWidth"),
        pcie_max_generation=number("nvmlDeviceGetMaxPcieLinkGeneration"),
        pcie_max_width=number("nvmlDeviceGetMaxPcieLinkWidth"),
        clock_limits=None
        if reasons is None
        else tuple(_CLOCK_LIMITS.get(b, hex(b)) for b in bits if reasons & b & ~_IDLE),
    )


@dataclass(frozen=True)
class DeviceInfo:
    """What a measurement ran on: the device, its software stack and the host CPU.

    ``variant`` is the datasheet variant (``"H100 SXM5"``) where identified; the
    GPU fields are None off CUDA; ``cpu_threads`` counts usable logical CPUs;
    ``gpu_state`` is what NVML said when described (None without ``nvidia-ml-py``).
    """

    type: str
    name: str
    torch_version: str
    cuda_version: str | None
    cpu_model: str
    cpu_cores: int | None
    cpu_threads: int
    torch_threads: int
    python_version: str
    variant: str | None = None
    index: int | None = None
    sm_count: int | None = None
    total_memory_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    driver_version: str | None = None
    memory_cap_bytes: int | None = None
    cpu_isa: str | None = None
    gpuguide_version: str = __version__
    gpuguide_commit: str | None = None
    gpuguide_dirty: bool = False
    gpu_state: GpuState | None = None

    @property
    def short_name(self) -> str:
        """A label and identity across results files: ``"H100 SXM5"``, the GPU name,
        or ``"CPU: AMD EPYC, 2 threads, AVX2"``."""
        if self.type == "cpu":
            threads = f"{self.cpu_threads} thread" + "s" * (self.cpu_threads != 1)
            label = f"CPU: {self.cpu_model}, {threads}"
            return f"{label}, {self.cpu_isa}" if self.cpu_isa else label
        if self.type == "cuda" and self.variant:
            return self.variant
        return self.name

    @property
    def gpuguide_label(self) -> str:
        """``"gpuguide 0.1.0 (f4b16f4+dirty)"``: the helpers this ran with."""
        return version_label(
            self.gpuguide_version, self.gpuguide_commit, self.gpuguide_dirty
        )

    def provenance(self) -> str:
        """One compact line that says what a measurement ran on, and the date (UTC;
        what :func:`gpuguide.setup` prints): ``"Measured on H100 SXM5 | torch 2.13.0
        | CUDA 12.8 | driver 570.86.15 | gpuguide 0.1.0 (f4b16f4) | 2026-11-21"``."""
        head = f"Measured on {self.short_name}"
        if self.memory_cap_bytes is not None:
            head += f", GPU memory capped at {format_bytes(self.memory_cap_bytes)}"
        parts = [head, f"torch {self.torch_version}"]
        if self.type == "cuda":
            parts.append(f"CUDA {self.cuda_version or 'unknown'}")
            parts.append(f"driver {self.driver_version or 'unknown'}")
        parts += [self.gpuguide_label, datetime.now(timezone.utc).strftime("%Y-%m-%d")]
        return " | ".join(_clean(part) for part in parts)


def _clean(text: str) -> str:
    """Collapse runs of whitespace (newlines included) into single spaces."""
    return " ".join(text.split())


def _torch_cpu_isa() -> str | None:
    """The vector ISA torch's CPU kernels use (``"AVX-512"``), None if unknown."""
    import torch

    capability = str(torch.backends.cpu.get_cpu_capability())
    if capability == "DEFAULT":
        # Every 64-bit ARM CPU has NEON, the default there (Apple silicon).
        return "NEON" if platform.machine().lower() in ("arm64", "aarch64") else None
    return {"AVX512": "AVX-512"}.get(capability, capability)


def _host_fields(cpuinfo_text: str | None = None) -> dict[str, Any]:
    """The DeviceInfo fields of the host and software."""
    import torch

    version = describe_version()
    return {
        "torch_version": str(torch.__version__),
        "cuda_version": torch.version.cuda,
        "cpu_model": host.cpu_model(cpuinfo_text),
        "cpu_cores": host.physical_cores(cpuinfo_text),
        "cpu_threads": host.usable_cpus(),
        "torch_threads": torch.get_num_threads(),
        "python_version": platform.python_version(),
        "cpu_isa": host.vector_isa(cpuinfo_text) or _torch_cpu_isa(),
        "gpuguide_version": version.version,
        "gpuguide_commit": version.commit,
        "gpuguide_dirty": version.dirty,
    }


def _describe_cuda(
    index: int,
    props: Any,
    *,
    torch_version: str,
    cuda_version: str | None,
    driver_version: str | None,
    cpuinfo_text: str | None = None,
    memory_cap_bytes: int | None = None,
) -> DeviceInfo:
    """Describe CUDA device ``index`` from ``get_device_properties``'s ``props``
    (and NVML, where it is found by the PCI bus id in ``props``)."""
    name = _clean(str(props.name))
    sm_count = int(props.multi_processor_count)
    total_memory_bytes = int(props.total_memory)
    fields = _host_fields(cpuinfo_text)
    fields.update(torch_version=torch_version, cuda_version=cuda_version)
    return DeviceInfo(
        type="cuda",
        name=name,
        variant=_identify_gpu(name, sm_count, total_memory_bytes),
        index=index,
        sm_count=sm_count,
        total_memory_bytes=total_memory_bytes,
        compute_capability=(int(props.major), int(props.minor)),
        driver_version=driver_version,
        memory_cap_bytes=memory_cap_bytes,
        gpu_state=_gpu_state(props),
        **fields,
    )


def _describe_host(device_type: str, cpuinfo_text: str | None = None) -> DeviceInfo:
    """Describe the CPU, or the Apple GPU behind MPS."""
    fields = _host_fields(cpuinfo_text)
    name = model = fields["cpu_model"]
    if device_type == "mps":
        name = f"{model} GPU (MPS)" if model.startswith("Apple") else "Apple GPU (MPS)"
    return DeviceInfo(type=device_type, name=name, **fields)


def as_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a ``torch.device``, unchecked; None picks one."""
    import torch

    return pick_device() if device is None else torch.device(device)


def describe_device(device: str | torch.device | None = None) -> DeviceInfo:
    """Describe a device (:func:`pick_device`'s when omitted), its software and host."""
    import torch

    resolved = pick_device(device)
    if resolved.type == "cuda":
        index = resolved.index if resolved.index is not None else 0
        return _describe_cuda(
            index,
            torch.cuda.get_device_properties(index),
            torch_version=str(torch.__version__),
            cuda_version=torch.version.cuda,
            driver_version=host.driver_version(),
            memory_cap_bytes=apply_memory_cap(resolved),
        )
    return _describe_host(resolved.type)
