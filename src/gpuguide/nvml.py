"""A GPU's clocks, power limit, clock limiters and PCIe link, read through NVML.

Only where the optional ``nvidia-ml-py`` package (module ``pynvml``) is
importable and NVML starts: :func:`gpu_state` returns None otherwise, and
nothing else in gpuguide changes. The GPU is found by its PCI bus id
(``"00000000:18:00.0"``), so that the card NVML describes is the one torch
uses, whatever ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` say. Every
query may fail on its own (a GPU or driver without it): that field is None.
A foundation module: it imports nothing else from gpuguide.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = ["GpuState", "available", "gpu_state", "link_bytes_per_s"]

#: What limits the clocks, by NVML's bit (``nvmlClocksEventReason*``, formerly
#: ``nvmlClocksThrottleReason*``; one set of values). "GPU idle" (0x1) is left out:
#: it says that nothing ran at the moment of the sample, not what held a run back.
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

#: Nominal bytes per second per lane and direction of each PCIe generation, as the
#: datasheets count them (x16: gen 3, 4 and 5 give 16, 32 and 64 GB/s).
_LANE_BYTES_PER_S = {1: 0.25e9, 2: 0.5e9, 3: 1e9, 4: 2e9, 5: 4e9, 6: 8e9}

_NVML_CLOCK_SM, _NVML_CLOCK_MEM = 1, 2  # nvmlClockType_t


@dataclass(frozen=True)
class GpuState:
    """What NVML says about one GPU; None where it did not say.

    Clocks in MHz (current and maximum), the power limit the driver enforces in
    watts, the PCIe link generation and width now and the most this GPU and its
    slot can negotiate (an idle GPU may lower its link to save power), and what
    limited the clocks when sampled (:data:`_CLOCK_LIMITS`, empty: nothing).
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
        """``"PCIe gen 5 x16"`` (the link :attr:`link_bytes_per_s` counts), or None."""
        if self.pcie_max_generation and self.pcie_max_width:
            return f"PCIe gen {self.pcie_max_generation} x{self.pcie_max_width}"
        if self.pcie_generation and self.pcie_width:
            return f"PCIe gen {self.pcie_generation} x{self.pcie_width}"
        return None

    def describe(self) -> str:
        """The state in a few words: ``"SM clock 1755 of 1980 MHz, memory clock
        2619 of 2619 MHz, power limit 700 W, PCIe gen 1 x16 now (up to gen 5 x16),
        clocks limited by: software power cap"``; empty when nothing is known."""
        parts = []
        for what, now, most in (
            ("SM clock", self.sm_clock_mhz, self.sm_clock_max_mhz),
            ("memory clock", self.memory_clock_mhz, self.memory_clock_max_mhz),
        ):
            if now is not None and most is not None:
                parts.append(f"{what} {now} of {most} MHz")
            elif now is not None or most is not None:
                parts.append(f"{what} {now} MHz" if now else f"{what} max {most} MHz")
        if self.power_limit_w is not None:
            parts.append(f"power limit {self.power_limit_w:.0f} W")
        if self.pcie_generation and self.pcie_width:
            link = f"PCIe gen {self.pcie_generation} x{self.pcie_width} now"
            top = (self.pcie_max_generation, self.pcie_max_width)
            if all(top) and top != (self.pcie_generation, self.pcie_width):
                link += f" (up to gen {top[0]} x{top[1]})"
            parts.append(link)
        elif self.link_label:
            parts.append(self.link_label)
        if self.clock_limits:
            parts.append(f"clocks limited by: {', '.join(self.clock_limits)}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, object]:
        """The known fields, by name (clock limits as a list)."""
        data: dict[str, object] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value is not None:
                data[name] = list(value) if isinstance(value, tuple) else value
        return data


def link_bytes_per_s(generation: int | None, width: int | None) -> float | None:
    """Nominal bytes/s per direction of a PCIe link; None for an unknown one."""
    if not generation or not width or generation not in _LANE_BYTES_PER_S:
        return None
    return _LANE_BYTES_PER_S[generation] * width


def _clock_limits(reasons: int) -> tuple[str, ...]:
    """The names of NVML's clock-limit bits set in ``reasons``, idle left out;
    an unknown bit by its value (``"0x200"``)."""
    names = []
    bit = 1
    while bit <= reasons:
        if reasons & bit and bit != _IDLE:
            names.append(_CLOCK_LIMITS.get(bit, hex(bit)))
        bit <<= 1
    return tuple(names)


@functools.lru_cache(maxsize=1)
def _library() -> ModuleType | None:
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


def available() -> bool:
    """Whether NVML can be asked here (``pynvml`` imports and NVML starts)."""
    return _library() is not None


def _ask(call: Any, *args: object) -> Any:
    """``call(*args)``, or None when NVML refuses (not supported, no permission)."""
    try:
        return call(*args)
    except Exception:  # each NVML query fails on its own
        return None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _reasons(nvml: ModuleType, handle: object) -> tuple[str, ...] | None:
    for name in (
        "nvmlDeviceGetCurrentClocksEventReasons",  # NVML 12.535 and later
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ):
        call = getattr(nvml, name, None)
        bits = _count(_ask(call, handle)) if call is not None else None
        if bits is not None:
            return _clock_limits(bits)
    return None


def _handle(nvml: ModuleType, pci_bus_id: str) -> object | None:
    find = getattr(nvml, "nvmlDeviceGetHandleByPciBusId", None)
    return None if find is None else _ask(find, pci_bus_id.encode("ascii"))


def gpu_state(pci_bus_id: str) -> GpuState | None:
    """The state of the GPU at ``pci_bus_id`` now; None without NVML or that GPU."""
    nvml = _library()
    if nvml is None or (handle := _handle(nvml, pci_bus_id)) is None:
        return None

    def query(name: str, *args: object) -> int | None:
        call = getattr(nvml, name, None)
        return None if call is None else _count(_ask(call, handle, *args))

    sm = getattr(nvml, "NVML_CLOCK_SM", _NVML_CLOCK_SM)
    mem = getattr(nvml, "NVML_CLOCK_MEM", _NVML_CLOCK_MEM)
    milliwatts = query("nvmlDeviceGetEnforcedPowerLimit")
    if milliwatts is None:
        milliwatts = query("nvmlDeviceGetPowerManagementLimit")
    return GpuState(
        sm_clock_mhz=query("nvmlDeviceGetClockInfo", sm),
        sm_clock_max_mhz=query("nvmlDeviceGetMaxClockInfo", sm),
        memory_clock_mhz=query("nvmlDeviceGetClockInfo", mem),
        memory_clock_max_mhz=query("nvmlDeviceGetMaxClockInfo", mem),
        power_limit_w=None if milliwatts is None else milliwatts / 1000,
        pcie_generation=query("nvmlDeviceGetCurrPcieLinkGeneration"),
        pcie_width=query("nvmlDeviceGetCurrPcieLinkWidth"),
        pcie_max_generation=query("nvmlDeviceGetMaxPcieLinkGeneration"),
        pcie_max_width=query("nvmlDeviceGetMaxPcieLinkWidth"),
        clock_limits=_reasons(nvml, handle),
    )
