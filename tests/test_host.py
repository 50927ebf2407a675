"""Tests for gpuguide.host: sample /proc texts, fake commands, files that fail."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import CPUINFO_ARM, CPUINFO_PI, CPUINFO_PPC, CPUINFO_X86

from gpuguide import host

PROC_DRIVER = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan  8 "
    "01:26:05 UTC 2025\nGCC version:  gcc version 12.3.0\n"
)
PROC_DRIVER_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release "
    "Build  (dvs-builder@U16-T02-35-3)  Tue Mar  5 22:15:33 UTC 2024\n"
)


def test_read_text_reads_and_never_raises(tmp_path):
    path = tmp_path / "version"
    path.write_bytes(b"driver \xff 570\n")  # not UTF-8
    assert host.read_text(path) == "driver \ufffd 570\n"
    assert host.read_text(tmp_path / "absent") is None
    assert host.read_text(tmp_path) is None  # a directory


# --------------------------------------------------------------------------------------
# The CPU and the driver version
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "model"),
    [
        (CPUINFO_X86, "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"),
        (CPUINFO_PI, "ARMv7 Processor rev 3 (v7l)"),
        (CPUINFO_PPC, "POWER9, altivec supported"),
        (CPUINFO_ARM, None),
        ("", None),
    ],
)
def test_cpu_model(monkeypatch, text, model):
    monkeypatch.setattr(host.platform, "processor", lambda: "")
    monkeypatch.setattr(host.platform, "machine", lambda: "")
    assert host.cpu_model(text) == (model or "unknown CPU")


def test_cpu_model_falls_back_to_hardware():
    text = "processor\t: 0\nBogoMIPS\t: 38.40\n\nHardware\t: BCM2835\n"
    assert host.cpu_model(text) == "BCM2835"


@pytest.mark.parametrize(
    ("text", "cores"),
    [
        (CPUINFO_X86, 4),
        # One processor block without ids: the count cannot be derived.
        (CPUINFO_X86 + "\n\nprocessor\t: 8\nmodel name\t: x\n", None),
        (CPUINFO_ARM, None),
        ("", None),
        ("model name\t: no processor lines\n", None),
    ],
)
def test_physical_cores(text, cores):
    assert host.physical_cores(text) == cores


def _flags(line: str) -> str:
    return f"processor\t: 0\nmodel name\t: AMD EPYC\n{line}\n\nprocessor\t: 1\n"


@pytest.mark.parametrize(
    ("text", "isa"),
    [
        # Sapphire Rapids: AMX, which implies everything below it.
        (_flags("flags\t\t: fpu avx avx2 avx512f avx512_bf16 amx_bf16 amx_tile"), "AMX"),
        # Zen 4, Cooper Lake: AVX-512 with bf16 dot products.
        (_flags("flags\t\t: fpu sse4_2 avx avx2 avx512f avx512bw avx512_bf16"), "AVX-512 BF16"),
        (_flags("flags\t\t: fpu avx avx2 avx512f avx512dq avx512_vnni"), "AVX-512"),
        (_flags("flags\t\t: fpu fma avx avx2 avx_vnni"), "AVX2"),  # Alder Lake: VNNI, no AVX-512
        (_flags("flags\t\t: fpu avx"), "AVX"),
        (_flags("flags\t\t: fpu sse sse2"), None),
        # ARM servers: Graviton3 (SVE, bf16), Graviton2 (NEON only).
        (_flags("Features\t: fp asimd sve bf16 i8mm"), "SVE BF16"),
        (_flags("Features\t: fp asimd sve2 sve"), "SVE2"),
        (_flags("Features\t: fp asimd evtstrm"), "NEON"),
        (CPUINFO_X86, None),  # no flags line: unknown here
        (CPUINFO_PPC, None),
        ("", None),
    ],
)  # fmt: skip
def test_vector_isa(text, isa):
    assert host.vector_isa(text) == isa


def test_vector_isa_reads_proc_cpuinfo(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(_flags("flags\t\t: fpu avx avx2 avx512f"))
    monkeypatch.setattr(host, "_PROC_CPUINFO", str(cpuinfo))
    assert host.vector_isa() == "AVX-512"
    monkeypatch.setattr(host, "_PROC_CPUINFO", str(tmp_path / "missing"))
    assert host.vector_isa() is None


def test_cpu_model_falls_back_to_platform(monkeypatch):
    monkeypatch.setattr(host.platform, "processor", lambda: "")
    monkeypatch.setattr(host.platform, "machine", lambda: "x86_64")
    assert host.cpu_model("") == "x86_64"
    assert host.cpu_model(CPUINFO_ARM) == "x86_64"
    monkeypatch.setattr(host.platform, "machine", lambda: "")
    assert host.cpu_model("") == "unknown CPU"
    assert host.cpu_model(CPUINFO_X86).startswith("Intel(R) Xeon(R) Platinum")


def test_usable_cpus_matches_affinity():
    threads = host.usable_cpus()
    assert threads >= 1
    assert threads == len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (PROC_DRIVER, "570.86.15"),
        (PROC_DRIVER_OPEN, "550.54.15"),
        ("NVRM version: NVIDIA UNIX Kernel Module 535.104", "535.104"),
        ("nothing to see", None),
        ("", None),
    ],
)
def test_driver_version(tmp_path, monkeypatch, text, version):
    (tmp_path / "version").write_text(text)
    monkeypatch.setattr(host, "_PROC_DRIVER_VERSION", str(tmp_path / "version"))
    host.driver_version.cache_clear()
    try:
        assert host.driver_version() == version
    finally:
        host.driver_version.cache_clear()


def test_driver_version_reads_proc(tmp_path, monkeypatch):
    proc = tmp_path / "version"
    proc.write_text(PROC_DRIVER)
    monkeypatch.setattr(host, "_PROC_DRIVER_VERSION", str(proc))
    host.driver_version.cache_clear()
    try:
        assert host.driver_version() == "570.86.15"
        monkeypatch.setattr(host, "_PROC_DRIVER_VERSION", str(tmp_path / "absent"))
        host.driver_version.cache_clear()
        assert host.driver_version() is None
    finally:
        host.driver_version.cache_clear()


def test_driver_version_is_cached():
    host.driver_version.cache_clear()
    first = host.driver_version()
    assert host.driver_version() == first
    assert host.driver_version.cache_info().hits >= 1


def test_usable_cpus_uses_the_affinity_mask(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert host.usable_cpus() == 3


def test_usable_cpus_falls_back_to_cpu_count(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert host.usable_cpus() == 1
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert host.usable_cpus() == 6


# --------------------------------------------------------------------------------------
# Caches
# --------------------------------------------------------------------------------------


def _llc(root: Path) -> int | None:
    """last_level_cache_bytes of a sysfs tree at ``root``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(host, "_SYS_CPU", str(root))
        return host.last_level_cache_bytes()


def _cache(root: Path, cpu: int, index: int, level, kind, size, shared) -> None:
    folder = root / f"cpu{cpu}" / "cache" / f"index{index}"
    folder.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size)):
        if value is not None:
            (folder / name).write_text(f"{value}\n")
    if shared is not None:
        (folder / "shared_cpu_list").write_text(f"{shared}\n")


def test_last_level_cache_counts_each_instance_of_the_top_level_once(tmp_path):
    # Two sockets of two CPUs: per-CPU L1 and L2, one 32 MiB L3 per socket.
    for cpu in range(4):
        socket = "0-1" if cpu < 2 else "2-3"
        _cache(tmp_path, cpu, 0, 1, "Data", "32K", str(cpu))
        _cache(tmp_path, cpu, 1, 1, "Instruction", "32K", str(cpu))
        _cache(tmp_path, cpu, 2, 2, "Unified", "1M", str(cpu))
        _cache(tmp_path, cpu, 3, 3, "Unified", "32768K", socket)
    assert _llc(tmp_path) == 2 * 32 * 2**20


def test_last_level_cache_ignores_instruction_caches_and_bad_entries(tmp_path):
    _cache(tmp_path, 0, 0, 2, "Unified", "512", "0")  # plain bytes
    _cache(tmp_path, 0, 1, 3, "Instruction", "64M", "0")  # not data
    _cache(tmp_path, 0, 2, 4, "Unified", "big", "0")  # unreadable size
    _cache(tmp_path, 0, 3, None, "Unified", "8M", "0")  # no level
    _cache(tmp_path, 1, 0, 2, "Unified", "1K", None)  # no shared list: its own
    assert _llc(tmp_path) == 512 + 1024


def test_last_level_cache_without_shared_lists_counts_each_cache_id_once(tmp_path):
    for cpu in range(4):
        _cache(tmp_path, cpu, 3, 3, "Unified", "16M", None)
        (tmp_path / f"cpu{cpu}" / "cache" / "index3" / "id").write_text(f"{cpu // 2}\n")
    assert _llc(tmp_path) == 2 * 16 * 2**20


def test_last_level_cache_unknown_without_cache_folders(tmp_path):
    assert _llc(tmp_path) is None
    (tmp_path / "cpu0").mkdir()
    assert _llc(tmp_path) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("32768K", 32 * 2**20), ("1M", 2**20), ("2G", 2**31), ("512", 512), ("x", None)],
)
def test_cache_size_bytes(text, expected):
    assert host._cache_size_bytes(text) == expected


def test_last_level_cache_of_this_machine_is_plausible():
    size = host.last_level_cache_bytes()
    assert size is None or 2**16 <= size <= 2**36


# --------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------

MEMINFO = """\
MemTotal:       24684096 kB
MemFree:         1000000 kB
MemAvailable:   20000000 kB
Buffers:          200000 kB
Cached:          3000000 kB
"""


@pytest.mark.parametrize(
    ("meminfo", "limit", "used", "expected"),
    [
        (MEMINFO, None, None, 20000000 * 1024),  # MemAvailable
        (MEMINFO, "max\n", "123\n", 20000000 * 1024),  # no cgroup limit
        (MEMINFO, "1000\n", "400\n", 600),  # the room under the cgroup's limit
        (MEMINFO, "1000\n", "4000\n", 0),
        ("nonsense", "1000\n", "", 2**30),  # nothing readable: a low guess
    ],
)
def test_available_memory(monkeypatch, tmp_path, meminfo, limit, used, expected):
    for name, text in (("_MEMINFO", meminfo), ("_CGROUP_MAX", limit)):
        if text is not None:
            (tmp_path / name).write_text(text)
        monkeypatch.setattr(host, name, str(tmp_path / name))
    (tmp_path / "used").write_text(used or "")
    monkeypatch.setattr(host, "_CGROUP_CURRENT", str(tmp_path / "used"))
    assert host.available_memory_bytes() == expected


def test_available_memory_is_plausible() -> None:
    free = host.available_memory_bytes()
    assert free > 0
    meminfo = Path("/proc/meminfo").read_text(encoding="ascii")
    total = int(re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.MULTILINE)[1]) * 1024
    assert free <= total


def test_available_memory_cgroup_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    (tmp_path / "meminfo").write_text(MEMINFO)
    (tmp_path / "max").write_text("3000000000\n")
    (tmp_path / "current").write_text("1000000000\n")
    monkeypatch.setattr(host, "_MEMINFO", str(tmp_path / "meminfo"))
    monkeypatch.setattr(host, "_CGROUP_MAX", str(tmp_path / "max"))
    monkeypatch.setattr(host, "_CGROUP_CURRENT", str(tmp_path / "current"))
    assert host.available_memory_bytes() == 2_000_000_000


def test_available_memory_without_proc(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    missing = str(tmp_path / "missing")
    for name in ("_MEMINFO", "_CGROUP_MAX", "_CGROUP_CURRENT"):
        monkeypatch.setattr(host, name, missing)
    # A fixed conservative guess.
    assert host.available_memory_bytes() == host._FALLBACK_FREE_BYTES
