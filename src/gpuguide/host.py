"""Facts about the host machine, read from /proc, /sys and the operating system.

CPU model, cores, vector instruction set, usable CPUs, last-level caches, NVIDIA
driver version and available memory, each read without torch.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from pathlib import Path

__all__ = ["usable_cpus"]

# Module-level so tests can point them elsewhere.
_PROC_CPUINFO = "/proc/cpuinfo"
_PROC_DRIVER_VERSION = "/proc/driver/nvidia/version"
_MEMINFO = "/proc/meminfo"
_CGROUP_MAX = "/sys/fs/cgroup/memory.max"
_CGROUP_CURRENT = "/sys/fs/cgroup/memory.current"
_SYS_CPU = "/sys/devices/system/cpu"
#: Memory assumed free when nothing can be read, in bytes (deliberately low).
_FALLBACK_FREE_BYTES = 2**30

# Vector instruction sets by CPU flag, widest first: they decide a CPU's matmul rate.
_X86_ISAS = {
    "amx_bf16": "AMX",
    "avx512_bf16": "AVX-512 BF16",
    "avx512f": "AVX-512",
    "avx2": "AVX2",
    "avx": "AVX",
}
_ARM_ISAS = {"sve2": "SVE2", "sve": "SVE", "asimd": "NEON"}


def read_text(path: str | os.PathLike[str]) -> str | None:
    """The contents of a small text file (bad UTF-8 replaced), or None if unreadable."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _cpuinfo(text: str | None) -> list[dict[str, str]]:
    """``/proc/cpuinfo`` text (None: this host's) as a ``{key: value}`` per block."""
    text = read_text(_PROC_CPUINFO) if text is None else text
    blocks = []
    for block in re.split(r"\n\s*\n", text or ""):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip(), value.strip())
        if fields:
            blocks.append(fields)
    return blocks


def vector_isa(cpuinfo_text: str | None = None) -> str | None:
    """The host CPU's widest vector instruction set (``"AVX-512 BF16"``), or None."""
    for block in _cpuinfo(cpuinfo_text):
        if "flags" in block:
            flags = set(block["flags"].split())
            return next((isa for f, isa in _X86_ISAS.items() if f in flags), None)
        if "Features" in block:
            features = set(block["Features"].split())
            isa = next((isa for f, isa in _ARM_ISAS.items() if f in features), None)
            return f"{isa} BF16" if isa and "bf16" in features else isa
    return None


def cpu_model(cpuinfo_text: str | None = None) -> str:
    """The host CPU's model (``"AMD EPYC 7B13"``)."""
    blocks = _cpuinfo(cpuinfo_text)
    for key in ("model name", "cpu model", "Hardware", "Model", "cpu"):
        for block in blocks:
            if model := " ".join(block.get(key, "").split()):
                return model
    return " ".join(
        (platform.processor() or platform.machine() or "unknown CPU").split()
    )


def physical_cores(cpuinfo_text: str | None = None) -> int | None:
    """Physical cores of the host (unique physical and core ids in
    ``/proc/cpuinfo``); None where not derivable."""
    cpus = [block for block in _cpuinfo(cpuinfo_text) if "processor" in block]
    cores = {(cpu.get("physical id"), cpu.get("core id")) for cpu in cpus}
    return len(cores) if cpus and all(None not in core for core in cores) else None


def usable_cpus() -> int:
    """Logical CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):  # not Linux, or the mask is not readable
        return max(os.cpu_count() or 1, 1)


def _cache_size_bytes(text: str) -> int | None:
    """A sysfs cache size (``"32768K"``, ``"1M"``, ``"512"``) in bytes, or None."""
    match = re.match(r"\s*(\d+)\s*([KMG]?)", text, re.IGNORECASE)
    if match is None:
        return None
    return int(match[1]) << 10 * " KMG".index(match[2].upper() or " ")  # x 1024^k


def last_level_cache_bytes() -> int | None:
    """The CPU's last-level caches, all instances together, in bytes (None where
    sysfs does not say): two sockets with 32 MiB of L3 each give 64 MiB."""
    instances: dict[tuple[int, str], int] = {}
    for index in Path(_SYS_CPU).glob("cpu[0-9]*/cache/index[0-9]*"):
        level, kind = read_text(index / "level"), read_text(index / "type")
        size = _cache_size_bytes(read_text(index / "size") or "")
        if level is None or not level.strip().isdigit() or size is None:
            continue
        if (kind or "").strip().lower() == "instruction":
            continue
        # One instance per set of CPUs sharing it (else per cache id, else per CPU).
        shared = (read_text(index / "shared_cpu_list") or "").strip()
        cache_id = (read_text(index / "id") or "").strip()
        instance = shared or (
            f"id {cache_id}" if cache_id else index.parent.parent.name
        )
        instances[(int(level), instance)] = size
    if not instances:
        return None
    top = max(level for level, _ in instances)
    return sum(size for (level, _), size in instances.items() if level == top)


@functools.lru_cache(maxsize=1)
def driver_version() -> str | None:
    """The NVIDIA driver version of the kernel module, read once per process; None
    without a driver (or where /proc does not say)."""
    text = read_text(_PROC_DRIVER_VERSION) or ""
    match = re.search(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)*)\s", text + " ")
    return match.group(1) if match else None


def available_memory_bytes() -> int:
    """Host memory available to this process (``MemAvailable``, within a cgroup v2
    limit), in bytes; a low guess where neither can be read."""
    known = []
    meminfo = read_text(_MEMINFO) or ""
    if found := re.search(r"^MemAvailable:\s+(\d+)\s+kB", meminfo, re.MULTILINE):
        known.append(int(found[1]) * 1024)
    limit = (read_text(_CGROUP_MAX) or "").strip()
    used = (read_text(_CGROUP_CURRENT) or "").strip()
    if limit.isdigit() and used.isdigit():
        known.append(max(int(limit) - int(used), 0))
    return min(known, default=_FALLBACK_FREE_BYTES)
