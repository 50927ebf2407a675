"""Tests for gpuguide.sizes: small mode, budgets, roofline estimates and sweeps."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gpuguide import sizes
from gpuguide.peaks import Peaks
from gpuguide.sizes import (
    SizeBudget,
    estimate_seconds,
    free_memory_bytes,
    size_budget,
    small_mode,
    sweep,
)

MiB = 2**20
GiB = 2**30


def budget(memory_bytes: int = GiB, call_s: float = 1.0) -> SizeBudget:
    return SizeBudget(
        device="cpu", memory_bytes=memory_bytes, call_s=call_s, small=False
    )


# -- small mode ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "Yes", "on", " on "])
def test_small_mode_on(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GPUGUIDE_SMALL", value)
    assert small_mode() is True


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off", "small"])
def test_small_mode_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GPUGUIDE_SMALL", value)
    assert small_mode() is False


def test_small_mode_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUGUIDE_SMALL", raising=False)
    assert small_mode() is False


# -- free memory ---------------------------------------------------------------

MEMINFO = """\
MemTotal:       24684096 kB
MemFree:         1000000 kB
MemAvailable:   20000000 kB
Buffers:          200000 kB
Cached:          3000000 kB
"""


def test_meminfo_prefers_memavailable() -> None:
    assert sizes._meminfo_available_bytes(MEMINFO) == 20000000 * 1024


def test_meminfo_without_memavailable() -> None:
    old_kernel = "\n".join(
        line for line in MEMINFO.splitlines() if "MemAvailable" not in line
    )
    expected = (1000000 + 200000 + 3000000) * 1024
    assert sizes._meminfo_available_bytes(old_kernel) == expected


def test_meminfo_unreadable() -> None:
    assert sizes._meminfo_available_bytes("nonsense") is None


def test_cgroup_room() -> None:
    assert sizes._cgroup_available_bytes("max\n", "123\n") is None
    assert sizes._cgroup_available_bytes("1000\n", "400\n") == 600
    assert sizes._cgroup_available_bytes("1000\n", "4000\n") == 0
    assert sizes._cgroup_available_bytes("1000\n", "") is None


def test_free_memory_cpu_is_plausible() -> None:
    free = free_memory_bytes("cpu")
    assert free > 0
    total = 0
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
    assert free <= total


def test_free_memory_cpu_cgroup_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    (tmp_path / "meminfo").write_text(MEMINFO)
    (tmp_path / "max").write_text("3000000000\n")
    (tmp_path / "current").write_text("1000000000\n")
    monkeypatch.setattr(sizes, "_MEMINFO", str(tmp_path / "meminfo"))
    monkeypatch.setattr(sizes, "_CGROUP_MAX", str(tmp_path / "max"))
    monkeypatch.setattr(sizes, "_CGROUP_CURRENT", str(tmp_path / "current"))
    assert free_memory_bytes("cpu") == 2_000_000_000


def test_free_memory_cpu_without_proc(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    missing = str(tmp_path / "missing")
    for name in ("_MEMINFO", "_CGROUP_MAX", "_CGROUP_CURRENT"):
        monkeypatch.setattr(sizes, name, missing)
    assert free_memory_bytes("cpu") > 0
    # And without sysconf either: a fixed conservative guess.
    monkeypatch.setattr(sizes.os, "sysconf", _raise_value_error)
    assert free_memory_bytes("cpu") == sizes._FALLBACK_FREE_BYTES


def _raise_value_error(name: str) -> int:
    raise ValueError(name)


def test_free_memory_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def mem_get_info(device: torch.device) -> tuple[int, int]:
        seen.append(device)
        return 60 * GiB, 80 * GiB

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    assert free_memory_bytes("cuda:0") == 60 * GiB
    assert seen == [torch.device("cuda:0")]


def test_free_memory_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 16 * GiB)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 4 * GiB)
    assert free_memory_bytes("mps") == 12 * GiB
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 20 * GiB)
    assert free_memory_bytes("mps") == 0


# -- size_budget ---------------------------------------------------------------


@pytest.fixture
def fixed_free(monkeypatch: pytest.MonkeyPatch) -> int:
    free = 8 * GiB
    monkeypatch.setattr(sizes, "free_memory_bytes", lambda device=None: free)
    return free


def test_size_budget_defaults(fixed_free: int) -> None:
    b = size_budget("cpu", small=False)
    assert b == SizeBudget(
        device="cpu", memory_bytes=fixed_free // 4, call_s=0.02, small=False
    )
    assert size_budget("mps", small=False).call_s == 0.05
    assert size_budget("mps", small=False).device == "mps"


def test_size_budget_cuda(monkeypatch: pytest.MonkeyPatch, fixed_free: int) -> None:
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    b = size_budget("cuda", small=False)
    assert (b.device, b.call_s) == ("cuda:3", 0.05)
    assert size_budget("cuda:1", small=False).device == "cuda:1"


def test_size_budget_fraction_and_call(fixed_free: int) -> None:
    b = size_budget("cpu", memory_fraction=0.5, call_s=0.1, small=False)
    assert b.memory_bytes == fixed_free // 2
    assert b.call_s == 0.1


def test_size_budget_small_caps(fixed_free: int) -> None:
    b = size_budget("cpu", call_s=0.1, small=True)
    assert b.small is True
    assert b.memory_bytes == 64 * MiB
    assert b.call_s == 0.002


def test_size_budget_small_keeps_smaller_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sizes, "free_memory_bytes", lambda device=None: 100 * MiB)
    b = size_budget("cpu", memory_fraction=0.1, call_s=0.001, small=True)
    assert b.memory_bytes == 10 * MiB
    assert b.call_s == 0.001


def test_size_budget_follows_environment(
    monkeypatch: pytest.MonkeyPatch, fixed_free: int
) -> None:
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")
    assert size_budget("cpu").small is True
    monkeypatch.setenv("GPUGUIDE_SMALL", "0")
    assert size_budget("cpu").small is False


def test_size_budget_default_device(
    monkeypatch: pytest.MonkeyPatch, fixed_free: int
) -> None:
    monkeypatch.setenv("GPUGUIDE_DEVICE", "cpu")
    assert size_budget(small=False).device == "cpu"


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_size_budget_rejects_fraction(fraction: float) -> None:
    with pytest.raises(ValueError, match="memory_fraction"):
        size_budget("cpu", memory_fraction=fraction)


@pytest.mark.parametrize("call_s", [0.0, -1.0, float("inf"), float("nan")])
def test_size_budget_rejects_call_s(call_s: float) -> None:
    with pytest.raises(ValueError, match="call_s"):
        size_budget("cpu", call_s=call_s)


def test_size_budget_real_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    b = size_budget("cpu", small=False)
    assert 0 < b.memory_bytes <= free_memory_bytes("cpu")


def test_size_budget_str() -> None:
    text = str(SizeBudget("cuda:0", 64 * MiB, 0.002, small=True))
    assert text == "64.0 MiB and 2.00 ms per call on cuda:0, small mode"
    assert "small" not in str(budget())
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget().call_s = 2.0  # type: ignore[misc]


# -- estimate_seconds ----------------------------------------------------------

H100ish = Peaks(
    name="test GPU",
    flops={"fp32": 50e12, "bf16": 1000e12},
    memory_bandwidth_bytes_per_s=3e12,
    source="test",
)
UNKNOWN = Peaks(name="unknown GPU (x)", flops={}, source="none", known=False)


def test_estimate_compute_bound() -> None:
    # 2 * 4096^3 FLOP at 50 TFLOP/s and 50% efficiency.
    flop = 2 * 4096**3
    est = estimate_seconds(flop=flop, nbytes=3 * 4 * 4096**2, peaks=H100ish)
    assert est == pytest.approx(flop / 50e12 / 0.5)


def test_estimate_memory_bound() -> None:
    est = estimate_seconds(flop=1e6, nbytes=3e9, peaks=H100ish, efficiency=1.0)
    assert est == pytest.approx(1e-3)


def test_estimate_unknown_peaks_use_conservative_defaults() -> None:
    for peaks in (UNKNOWN, None):
        assert estimate_seconds(flop=1e11, peaks=peaks, efficiency=1.0) == 1.0
        assert estimate_seconds(nbytes=1e10, peaks=peaks, efficiency=1.0) == 1.0
    # The defaults are slower than any real GPU: estimates err on the long side.
    known = estimate_seconds(flop=1e12, nbytes=1e9, peaks=H100ish)
    assert estimate_seconds(flop=1e12, nbytes=1e9, peaks=UNKNOWN) > known


def test_estimate_zero_work() -> None:
    assert estimate_seconds(peaks=H100ish) == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"flop": -1.0},
        {"nbytes": -1.0},
        {"flop": float("nan")},
        {"nbytes": float("inf")},
        {"efficiency": 0.0},
        {"efficiency": 1.2},
    ],
)
def test_estimate_rejects_bad_arguments(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        estimate_seconds(peaks=H100ish, **kwargs)


# -- sweep ---------------------------------------------------------------------


def test_sweep_powers_of_two() -> None:
    assert sweep(1, 1024, budget=budget(), bytes_at=lambda n: n) == [
        2**i for i in range(11)
    ]


def test_sweep_stops_at_hi_that_is_not_a_power_of_two() -> None:
    assert sweep(3, 50, budget=budget(), bytes_at=lambda n: n) == [3, 6, 12, 24, 48]


def test_sweep_per_octave() -> None:
    got = sweep(64, 1024, budget=budget(), bytes_at=lambda n: n, per_octave=2)
    # 64 * 2**(i/2): 64, 90.5, 128, 181.0, 256, 362.0, 512, 724.1, 1024
    assert got == [64, 91, 128, 181, 256, 362, 512, 724, 1024]


def test_sweep_multiple_of_rounds_and_dedups() -> None:
    got = sweep(
        1, 1000, budget=budget(), bytes_at=lambda n: n, per_octave=4, multiple_of=64
    )
    assert got[0] == 64
    assert all(n % 64 == 0 for n in got)
    assert got == sorted(set(got))
    assert got[-1] <= 1000
    assert got == [64, 128, 192, 256, 320, 384, 448, 512, 640, 704, 832]


def test_sweep_filters_by_memory() -> None:
    got = sweep(16, 4096, budget=budget(memory_bytes=MiB), bytes_at=lambda n: 4 * n * n)
    assert got == [16, 32, 64, 128, 256, 512]


def test_sweep_filters_by_time() -> None:
    got = sweep(
        16,
        4096,
        budget=budget(call_s=1e-3),
        bytes_at=lambda n: 0,
        seconds_at=lambda n: n * 1e-6,
    )
    assert got == [16, 32, 64, 128, 256, 512]


def test_sweep_with_estimate_seconds() -> None:
    b = budget(memory_bytes=GiB, call_s=0.01)
    got = sweep(
        128,
        16384,
        budget=b,
        bytes_at=lambda n: 3 * 4 * n * n,
        seconds_at=lambda n: estimate_seconds(
            flop=2 * n**3, nbytes=3 * 4 * n * n, peaks=H100ish
        ),
    )
    assert got[0] == 128
    assert all(3 * 4 * n * n <= b.memory_bytes for n in got)
    assert got[-1] == 4096  # 8192^3 needs 44 ms at 25 TFLOP/s


def test_sweep_none_fit() -> None:
    with pytest.raises(ValueError, match=r"no size in \[1024, 4096\] fits.*n=1024"):
        sweep(1024, 4096, budget=budget(memory_bytes=MiB), bytes_at=lambda n: 4 * n * n)


def test_sweep_too_slow_everywhere_keeps_the_smallest() -> None:
    got = sweep(
        1,
        8,
        budget=budget(call_s=1e-3),
        bytes_at=lambda n: 0 if n < 8 else 10**12,
        seconds_at=lambda n: 1.0,
    )
    assert got == [1]


def test_sweep_no_multiple_in_range() -> None:
    with pytest.raises(ValueError, match="no multiple of 64"):
        sweep(1, 32, budget=budget(), bytes_at=lambda n: n, multiple_of=64)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((0, 8), {}, "lo"),
        ((8, 4), {}, "hi must be >= lo"),
        ((1, 8), {"per_octave": 0}, "per_octave"),
        ((1, 8), {"multiple_of": 0}, "multiple_of"),
    ],
)
def test_sweep_rejects_bad_arguments(
    args: tuple[int, int], kwargs: dict[str, int], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        sweep(*args, budget=budget(), bytes_at=lambda n: n, **kwargs)


def test_sweep_rejects_non_integers() -> None:
    with pytest.raises(TypeError, match="lo"):
        sweep(1.5, 8, budget=budget(), bytes_at=lambda n: n)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="per_octave"):
        sweep(1, 8, budget=budget(), bytes_at=lambda n: n, per_octave=True)
