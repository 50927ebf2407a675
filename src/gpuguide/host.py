"""Facts about the host machine, read from /proc, /sys and the operating system.

CPU model, cores, vector instruction set, usable CPUs, NVIDIA driver version and
available memory, each read without torch. Imports nothing else from gpuguide.
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


def read_text(path: str | os.PathLike[str]) -> str | None:
    """The contents of a small text file (bad UTF-8 replaced), or None if unreadable."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _clean(text: str) -> str:
    """Collapse runs of whitespace into single spaces."""
    return " ".join(text.split())


def _cpuinfo_blocks(cpuinfo_text: str) -> list[dict[str, str]]:
    """Split ``/proc/cpuinfo`` text into one ``{key: value}`` dict per block."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in cpuinfo_text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current.setdefault(key.strip(), value.strip())
    if current:
        blocks.append(current)
    return blocks


def _parse_cpu_model(cpuinfo_text: str) -> str | None:
    """The CPU model in ``/proc/cpuinfo`` text, or None."""
    blocks = _cpuinfo_blocks(cpuinfo_text)
    for key in ("model name", "cpu model", "Hardware", "Model", "cpu"):
        for block in blocks:
            value = _clean(block.get(key, ""))
            if value:
                return value
    return None


def _parse_physical_cores(cpuinfo_text: str) -> int | None:
    """Unique (physical id, core id) pairs in ``/proc/cpuinfo`` text, or None."""
    pairs: set[tuple[str, str]] = set()
    processors = 0
    for block in _cpuinfo_blocks(cpuinfo_text):
        if "processor" not in block:
            continue
        processors += 1
        physical, core = block.get("physical id"), block.get("core id")
        if physical is None or core is None:
            return None
        pairs.add((physical, core))
    return len(pairs) if processors and pairs else None


# Vector instruction sets by CPU flag, widest first: they decide a CPU's matmul rate.
_X86_ISAS = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX-512 BF16"),
             ("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"))  # fmt: skip
_ARM_ISAS = (("sve2", "SVE2"), ("sve", "SVE"), ("asimd", "NEON"))


def _parse_vector_isa(cpuinfo_text: str) -> str | None:
    """The widest vector ISA of the first processor in ``/proc/cpuinfo`` text."""
    for block in _cpuinfo_blocks(cpuinfo_text):
        if "flags" in block:
            flags = set(block["flags"].split())
            return next((name for flag, name in _X86_ISAS if flag in flags), None)
        if "Features" in block:
            features = set(block["Features"].split())
            isa = next((name for flag, name in _ARM_ISAS if flag in features), None)
            if isa is not None and "bf16" in features:
                isa += " BF16"
            return isa
    return None


def vector_isa(cpuinfo_text: str | None = None) -> str | None:
    """The host CPU's widest vector instruction set (``"AVX-512 BF16"``), or None."""
    if cpuinfo_text is None:
        cpuinfo_text = read_text(_PROC_CPUINFO)
    return _parse_vector_isa(cpuinfo_text) if cpuinfo_text else None


def cpu_model(cpuinfo_text: str | None = None) -> str:
    """The host CPU's model (``"AMD EPYC 7B13"``)."""
    if cpuinfo_text is None:
        cpuinfo_text = read_text(_PROC_CPUINFO)
    model = _parse_cpu_model(cpuinfo_text) if cpuinfo_text else None
    return _clean(model or platform.processor() or platform.machine() or "unknown CPU")


def physical_cores(cpuinfo_text: str | None = None) -> int | None:
    """Physical cores of the host from ``/proc/cpuinfo``; None where not derivable."""
    if cpuinfo_text is None:
        cpuinfo_text = read_text(_PROC_CPUINFO)
    return _parse_physical_cores(cpuinfo_text) if cpuinfo_text else None


def usable_cpus() -> int:
    """Number of logical CPUs this process may run on (its affinity mask), at least 1."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        try:
            return max(len(getaffinity(0)), 1)
        except OSError:  # pragma: no cover - affinity not readable
            pass
    return max(os.cpu_count() or 1, 1)  # pragma: no cover - non-Linux fallback


_CACHE_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)", re.IGNORECASE)


def _cache_size_bytes(text: str) -> int | None:
    """A sysfs cache size (``"32768K"``, ``"1M"``, ``"512"``) in bytes, or None."""
    match = _CACHE_SIZE.match(text)
    if match is None:
        return None
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2).upper()]
    return int(match.group(1)) * scale


def last_level_cache_bytes(root: str | os.PathLike[str] | None = None) -> int | None:
    """The CPU's last-level caches, all instances together, in bytes (None where
    sysfs does not say): two sockets with 32 MiB of L3 each give 64 MiB."""
    base = Path(_SYS_CPU if root is None else root)
    instances: dict[tuple[int, str], int] = {}
    for index in base.glob("cpu[0-9]*/cache/index[0-9]*"):
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


def _parse_driver_version(text: str) -> str | None:
    """The driver version in ``/proc/driver/nvidia/version`` text, or None."""
    match = re.search(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)*)\s", text + " ")
    return match.group(1) if match else None


@functools.lru_cache(maxsize=1)
def driver_version() -> str | None:
    """The NVIDIA driver version of the kernel module, read once per process; None
    without a driver (or where /proc does not say)."""
    text = read_text(_PROC_DRIVER_VERSION)
    return _parse_driver_version(text) if text else None


def _meminfo_available_bytes(text: str) -> int | None:
    """``MemAvailable`` (else ``MemFree + Buffers + Cached``) in bytes, or None."""
    fields = {
        m.group(1): int(m.group(2)) * 1024
        for m in re.finditer(r"^(\w+):\s+(\d+)\s+kB", text, flags=re.MULTILINE)
    }
    if "MemAvailable" in fields:
        return fields["MemAvailable"]
    if "MemFree" in fields:
        return fields["MemFree"] + fields.get("Buffers", 0) + fields.get("Cached", 0)
    return None


def _cgroup_available_bytes(max_text: str, current_text: str) -> int | None:
    """Room left under a cgroup v2 memory limit (None when unlimited)."""
    limit = max_text.strip()
    if limit == "max" or not limit.isdigit() or not current_text.strip().isdigit():
        return None
    return max(int(limit) - int(current_text.strip()), 0)


def available_memory_bytes() -> int:
    """Host memory available to this process (within a cgroup v2 limit), in bytes."""
    candidates = []
    meminfo = read_text(_MEMINFO)
    if meminfo is not None:
        candidates.append(_meminfo_available_bytes(meminfo))
    cg_max, cg_current = read_text(_CGROUP_MAX), read_text(_CGROUP_CURRENT)
    if cg_max is not None and cg_current is not None:
        candidates.append(_cgroup_available_bytes(cg_max, cg_current))
    known = [c for c in candidates if c is not None]
    return min(known) if known else _FALLBACK_FREE_BYTES
