"""Pick the device to run on and describe it, for labels and provenance lines.

:func:`pick_device` chooses where a page runs and caps a CUDA allocator at
``GPUGUIDE_GPU_MEMORY``; :func:`describe_device` collects what a reader needs to
judge a measurement, and :func:`provenance` makes it one line.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from gpuguide import host, nvml
from gpuguide.datasheet import identify_gpu
from gpuguide.env import (
    DEVICE_ENV,
    GPU_MEMORY_ENV,
    SMALL_GPU_MEMORY,
    device_override,
    gpu_memory_cap,
    small_mode,
)
from gpuguide.nvml import GpuState
from gpuguide.units import format_bytes
from gpuguide.version import __version__, describe_version, version_label

if TYPE_CHECKING:
    import torch

__all__ = ["DeviceInfo", "describe_device", "gpu_state", "pick_device", "provenance"]

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
        variant=identify_gpu(name, sm_count, total_memory_bytes),
        index=index,
        sm_count=sm_count,
        total_memory_bytes=total_memory_bytes,
        compute_capability=(int(props.major), int(props.minor)),
        driver_version=driver_version,
        memory_cap_bytes=memory_cap_bytes,
        gpu_state=_nvml_state(props),
        **fields,
    )


def _nvml_state(props: Any) -> GpuState | None:
    """What NVML says about the GPU of ``torch.cuda.get_device_properties``'s
    ``props``, found by its PCI bus id; None without NVML or a bus id (no query)."""
    ids = [
        getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")
    ]
    if not nvml.available() or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in ids
    ):
        return None
    domain, bus, device = ids
    return nvml.gpu_state(f"{domain:08X}:{bus:02X}:{device:02X}.0")


def gpu_state(device: str | torch.device | None = None) -> GpuState | None:
    """What NVML says now about a CUDA device (:func:`pick_device`'s when omitted):
    clocks, power limit, clock limiters, PCIe link; None off CUDA or without NVML."""
    import torch

    resolved = pick_device(device)
    if resolved.type != "cuda":
        return None
    index = resolved.index if resolved.index is not None else 0
    return _nvml_state(torch.cuda.get_device_properties(index))


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


def provenance(device: str | torch.device | DeviceInfo | None = None) -> str:
    """One compact line that says what a measurement ran on, and the date (UTC;
    what :func:`gpuguide.setup` prints): ``"Measured on H100 SXM5 | torch 2.13.0 |
    CUDA 12.8 | driver 570.86.15 | gpuguide 0.1.0 (f4b16f4) | 2026-11-21"``."""
    info = device if isinstance(device, DeviceInfo) else describe_device(device)
    head = f"Measured on {info.short_name}"
    if info.memory_cap_bytes is not None:
        head += f", GPU memory capped at {format_bytes(info.memory_cap_bytes)}"
    parts = [head, f"torch {info.torch_version}"]
    if info.type == "cuda":
        parts.append(f"CUDA {info.cuda_version or 'unknown'}")
        parts.append(f"driver {info.driver_version or 'unknown'}")
    parts += [info.gpuguide_label, datetime.now(timezone.utc).strftime("%Y-%m-%d")]
    return " | ".join(_clean(part) for part in parts)
