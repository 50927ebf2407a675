"""Pick the device to run on and describe it, for labels and provenance lines.

:func:`pick_device` chooses where an example runs (an explicit choice, then the
``GPUGUIDE_DEVICE`` environment variable, then CUDA, MPS and the CPU).
:func:`describe_device` collects what a reader needs to judge a measurement: the
GPU model and variant (SM count, memory, compute capability), the torch, CUDA and
driver versions, and the host CPU with its thread counts. :func:`provenance` turns
that into the one line printed under every measurement.

Examples
--------
>>> from gpuguide.device import describe_device, provenance
>>> info = describe_device("cpu")
>>> info.type
'cpu'
>>> provenance("cpu").startswith("Measured on CPU ")
True
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from gpuguide import host
from gpuguide.datasheet import identify_gpu
from gpuguide.env import DEVICE_ENV, device_override
from gpuguide.units import format_bytes

if TYPE_CHECKING:
    import torch

__all__ = ["DeviceInfo", "as_device", "describe_device", "pick_device", "provenance"]

_SUPPORTED_TYPES = ("cuda", "mps", "cpu")


# --------------------------------------------------------------------------------------
# Choosing a device
# --------------------------------------------------------------------------------------


def _mps_available() -> bool:
    """Whether this torch build can use Apple's Metal (MPS) backend here."""
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def _check_available(device: torch.device) -> torch.device:
    """Return ``device`` (with a CUDA index filled in) or raise if it cannot run here."""
    import torch

    if device.type == "cpu":
        return torch.device("cpu")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            msg = (
                f"device {str(device)!r} was asked for, but CUDA is not available "
                f"(torch {torch.__version__}, built with CUDA "
                f"{torch.version.cuda or 'none'}); use 'cpu' or unset {DEVICE_ENV}"
            )
            raise RuntimeError(msg)
        count = torch.cuda.device_count()
        index = torch.cuda.current_device() if device.index is None else device.index
        if not 0 <= index < count:
            msg = (
                f"device {str(device)!r} was asked for, but only {count} CUDA "
                "device(s) are visible"
            )
            raise RuntimeError(msg)
        return torch.device("cuda", index)
    if device.type == "mps":
        if not _mps_available():
            msg = (
                f"device {str(device)!r} was asked for, but the MPS backend is not "
                f"available; use 'cpu' or unset {DEVICE_ENV}"
            )
            raise RuntimeError(msg)
        return torch.device("mps")
    msg = (
        f"device type must be one of {', '.join(_SUPPORTED_TYPES)}, got {device.type!r}"
    )
    raise ValueError(msg)


def pick_device(prefer: str | torch.device | None = None) -> torch.device:
    """Choose the device to run on.

    Parameters
    ----------
    prefer : str or torch.device, optional
        An explicit choice such as ``"cuda"``, ``"cuda:1"``, ``"mps"`` or
        ``"cpu"``. It wins over everything else.

    Returns
    -------
    torch.device
        ``prefer`` if given; else the ``GPUGUIDE_DEVICE`` environment variable if
        set; else the current CUDA device if CUDA is available; else ``mps`` if
        available; else ``cpu``. CUDA devices always carry an index (``cuda:0``).

    Raises
    ------
    RuntimeError
        If the chosen device (from ``prefer`` or the environment) is not
        available here, e.g. ``"cuda"`` on a machine without CUDA.
    ValueError
        If the choice is not a device string, or names a device type other than
        cuda, mps or cpu.
    """
    import torch

    choice: Any = prefer
    if choice is None:
        choice = device_override()
    if choice is not None:
        if isinstance(choice, str):
            try:
                device = torch.device(choice.strip())
            except RuntimeError as error:
                msg = f"device must name a device, got {choice!r} ({error})"
                raise ValueError(msg) from None
        else:
            device = torch.device(choice)
        return _check_available(device)
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


# --------------------------------------------------------------------------------------
# Describing a device
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceInfo:
    """What a measurement ran on: the device, its software stack and the host CPU.

    Attributes
    ----------
    type : str
        ``"cuda"``, ``"mps"`` or ``"cpu"``.
    name : str
        The device name: the GPU name as CUDA reports it (``"NVIDIA H100 80GB
        HBM3"``), ``"Apple M2 GPU (MPS)"``, or the CPU model.
    variant : str or None
        The :data:`gpuguide.datasheet.FIGURES` variant this GPU was identified as
        (``"H100 SXM5"``), ``None`` when unknown or not a GPU.
    index : int or None
        The CUDA device index; ``None`` elsewhere.
    sm_count : int or None
        Streaming multiprocessors (CUDA only).
    total_memory_bytes : int or None
        Device memory as CUDA reports it, in bytes (CUDA only).
    compute_capability : tuple of int or None
        ``(major, minor)``, e.g. ``(9, 0)`` (CUDA only).
    torch_version : str
        ``torch.__version__``.
    cuda_version : str or None
        The CUDA version torch was built with, ``None`` for CPU-only builds.
    driver_version : str or None
        The NVIDIA driver version where it could be read (CUDA only).
    cpu_model : str
        The host CPU model.
    cpu_cores : int or None
        Physical cores of the host, ``None`` where they could not be derived.
    cpu_threads : int
        Logical CPUs this process may use.
    torch_threads : int
        Threads torch uses for intra-op parallelism on the CPU.
    python_version : str
        ``platform.python_version()``.
    """

    type: str
    name: str
    variant: str | None
    index: int | None
    sm_count: int | None
    total_memory_bytes: int | None
    compute_capability: tuple[int, int] | None
    torch_version: str
    cuda_version: str | None
    driver_version: str | None
    cpu_model: str
    cpu_cores: int | None
    cpu_threads: int
    torch_threads: int
    python_version: str

    @property
    def short_name(self) -> str:
        """A short label for figures: ``"H100 SXM5"``, the GPU name, or the CPU."""
        if self.type == "cpu":
            return f"CPU: {self.cpu_model}, {_count(self.cpu_threads, 'thread')}"
        if self.type == "cuda" and self.variant:
            return self.variant
        return self.name


def _clean(text: str) -> str:
    """Collapse runs of whitespace (newlines included) into single spaces."""
    return " ".join(text.split())


def _count(n: int, noun: str) -> str:
    """``"1 thread"``, ``"2 threads"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _host_fields(cpuinfo_text: str | None = None) -> dict[str, Any]:
    """The DeviceInfo fields that describe the host and software, for any device."""
    import torch

    return {
        "torch_version": str(torch.__version__),
        "cuda_version": torch.version.cuda,
        "cpu_model": host.cpu_model(cpuinfo_text),
        "cpu_cores": host.physical_cores(cpuinfo_text),
        "cpu_threads": host.usable_cpus(),
        "torch_threads": torch.get_num_threads(),
        "python_version": platform.python_version(),
    }


def _describe_cuda(
    index: int,
    props: Any,
    *,
    torch_version: str,
    cuda_version: str | None,
    driver_version: str | None,
    cpuinfo_text: str | None = None,
) -> DeviceInfo:
    """Describe CUDA device ``index`` from ``props``, which has what
    ``torch.cuda.get_device_properties(index)`` has (name, SM count, memory,
    compute capability), the software versions and ``/proc/cpuinfo`` text."""
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
        **fields,
    )


def _describe_host(device_type: str, cpuinfo_text: str | None = None) -> DeviceInfo:
    """Describe the CPU, or the Apple GPU behind MPS, from the host fields."""
    fields = _host_fields(cpuinfo_text)
    if device_type == "mps":
        model = fields["cpu_model"]
        name = f"{model} GPU (MPS)" if model.startswith("Apple") else "Apple GPU (MPS)"
    else:
        name = fields["cpu_model"]
    return DeviceInfo(
        type=device_type,
        name=name,
        variant=None,
        index=None,
        sm_count=None,
        total_memory_bytes=None,
        compute_capability=None,
        driver_version=None,
        **fields,
    )


def as_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a ``torch.device``; ``None`` picks one with :func:`pick_device`.

    Unlike :func:`pick_device`, an explicit device is not checked for being
    available, so code can be driven with a stand-in backend in tests.
    """
    import torch

    return pick_device() if device is None else torch.device(device)


def describe_device(device: str | torch.device | None = None) -> DeviceInfo:
    """Describe a device, its software stack and the host CPU.

    Parameters
    ----------
    device : str or torch.device, optional
        The device to describe; :func:`pick_device` chooses when omitted.

    Returns
    -------
    DeviceInfo
        For CUDA, the GPU's name, identified variant, SM count, memory and
        compute capability, plus the driver version where it can be read.

    Raises
    ------
    RuntimeError
        If the device is not available here.
    """
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
        )
    return _describe_host(resolved.type)


# --------------------------------------------------------------------------------------
# Provenance line
# --------------------------------------------------------------------------------------


def _utc_stamp(now: datetime | None) -> str:
    """``now`` (default: the current time) as ``"2026-11-21 10:42 UTC"``.

    A naive ``now`` is taken to be in UTC already.
    """
    if now is None:
        now = datetime.now(timezone.utc)
    elif now.tzinfo is not None:
        now = now.astimezone(timezone.utc)
    return now.strftime("%Y-%m-%d %H:%M UTC")


def provenance(
    device: str | torch.device | DeviceInfo | None = None,
    *,
    now: datetime | None = None,
) -> str:
    """One line that says what a measurement ran on, and when.

    Parameters
    ----------
    device : str, torch.device or DeviceInfo, optional
        The device (described with :func:`describe_device`), or a description
        already made. :func:`pick_device` chooses when omitted.
    now : datetime, optional
        The time to print; the current time by default. Printed in UTC (a naive
        datetime is taken to be UTC).

    Returns
    -------
    str
        A single line starting with ``"Measured on "``, e.g. ``"Measured on
        NVIDIA H100 80GB HBM3 [H100 SXM5] (132 SMs, 79.2 GiB, compute capability
        9.0) | torch 2.13.0 | CUDA 12.8 | driver 570.86.15 | 2026-11-21 10:42
        UTC"`` or ``"Measured on CPU Intel(R) Xeon(R) Platinum 8375C (2 cores, 2
        threads; torch uses 2 threads) | torch 2.13.0+cpu | CUDA: none (CPU-only
        run) | 2026-11-21 10:42 UTC"``.
    """
    info = device if isinstance(device, DeviceInfo) else describe_device(device)
    parts: list[str] = []
    if info.type == "cuda":
        head = f"Measured on {_clean(info.name)}"
        if info.variant:
            head += f" [{info.variant}]"
        details = []
        if info.sm_count is not None:
            details.append(_count(info.sm_count, "SM"))
        if info.total_memory_bytes is not None:
            details.append(format_bytes(info.total_memory_bytes))
        if info.compute_capability is not None:
            major, minor = info.compute_capability
            details.append(f"compute capability {major}.{minor}")
        if details:
            head += f" ({', '.join(details)})"
        parts.append(head)
        parts.append(f"torch {info.torch_version}")
        parts.append(
            f"CUDA {info.cuda_version}" if info.cuda_version else "CUDA: unknown"
        )
        parts.append(f"driver {info.driver_version or 'unknown'}")
    else:
        counts = []
        if info.cpu_cores is not None:
            counts.append(_count(info.cpu_cores, "core"))
        counts.append(_count(info.cpu_threads, "thread"))
        threads = (
            f"{', '.join(counts)}; torch uses {_count(info.torch_threads, 'thread')}"
        )
        if info.type == "mps":
            parts.append(f"Measured on {_clean(info.name)} (host CPU: {threads})")
        else:
            parts.append(f"Measured on CPU {_clean(info.cpu_model)} ({threads})")
        parts.append(f"torch {info.torch_version}")
        if info.cuda_version:
            parts.append(f"CUDA {info.cuda_version} build, not used")
        elif info.type == "mps":
            parts.append("CUDA: none (MPS run)")
        else:
            parts.append("CUDA: none (CPU-only run)")
    parts.append(_utc_stamp(now))
    return " | ".join(_clean(part) for part in parts)
