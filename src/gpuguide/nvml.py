"""A GPU's clocks, power limit, clock limiters and PCIe link, read through NVML.

Only where the optional ``nvidia-ml-py`` package (module ``pynvml``) imports and
NVML starts. The GPU is found by its PCI bus id (``"00000000:18:00.0"``), so
that NVML describes the card torch uses whatever ``CUDA_VISIBLE_DEVICES`` says.
Every query may fail on its own: that field is None.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

__all__ = ["GpuState", "available", "gpu_state"]

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
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in asdict(self).items()
            if value is not None
        }


def _clock_limits(reasons: int) -> tuple[str, ...]:
    """The names of NVML's clock-limit bits set in ``reasons``, idle left out;
    an unknown bit by its value (``"0x200"``)."""
    bits = (1 << i for i in range(reasons.bit_length()))
    return tuple(_CLOCK_LIMITS.get(b, hex(b)) for b in bits if reasons & b & ~_IDLE)


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


def _ask(nvml: ModuleType, name: str, *args: object) -> Any:
    """``nvml.<name>(*args)``, or None where NVML lacks or refuses it."""
    try:
        return getattr(nvml, name)(*args)
    except Exception:  # each NVML query fails on its own
        return None


def gpu_state(pci_bus_id: str) -> GpuState | None:
    """The state of the GPU at ``pci_bus_id`` now; None without NVML or that GPU."""
    nvml = _library()
    if nvml is None:
        return None
    handle = _ask(nvml, "nvmlDeviceGetHandleByPciBusId", pci_bus_id.encode("ascii"))
    if handle is None:
        return None

    def query(name: str, *args: object) -> int | None:
        value = _ask(nvml, name, handle, *args)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    sm, mem = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    milliwatts = query("nvmlDeviceGetEnforcedPowerLimit")
    if milliwatts is None:
        milliwatts = query("nvmlDeviceGetPowerManagementLimit")
    reasons = query("nvmlDeviceGetCurrentClocksEventReasons")  # NVML 12.535 and later
    if reasons is None:
        reasons = query("nvmlDeviceGetCurrentClocksThrottleReasons")
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
        clock_limits=None if reasons is None else _clock_limits(reasons),
    )
