"""Tests for gpuguide.sizes: budgets, roofline estimates, sweeps, the largest size."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from gpuguide import sizes
from gpuguide.peaks import Peaks
from gpuguide.sizes import (
    SizeBudget,
    free_memory_bytes,
    largest_size,
    size_budget,
    sweep,
)

MiB = 2**20
GiB = 2**30


@pytest.fixture(autouse=True)
def _full_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUGUIDE_SMALL", raising=False)


def budget(memory_bytes: int = GiB, call_s: float = 1.0) -> SizeBudget:
    return SizeBudget(
        device="cpu", memory_bytes=memory_bytes, call_s=call_s, small=False
    )


# -- free memory ---------------------------------------------------------------


def test_free_memory_cpu_is_the_host_memory_available(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sizes.host, "available_memory_bytes", lambda: 123 * MiB)
    assert free_memory_bytes("cpu") == 123 * MiB


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


# -- GPUGUIDE_GPU_MEMORY: the cap on the GPU memory a plan counts on --------------


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """cuda:0 with 80 GiB, 60 GiB free, 2 GiB reserved by this process; no cap yet."""
    from gpuguide import device as device_mod

    gpu = SimpleNamespace(free=60 * GiB, reserved=2 * GiB, fractions=[])
    monkeypatch.delenv("GPUGUIDE_GPU_MEMORY", raising=False)
    monkeypatch.setattr(device_mod, "_applied_caps", {})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (gpu.free, 80 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d=None: gpu.reserved)
    monkeypatch.setattr(
        torch.cuda,
        "set_per_process_memory_fraction",
        lambda fraction, d: gpu.fractions.append((fraction, d)),
    )
    return gpu


def test_free_memory_cuda_is_capped(
    monkeypatch: pytest.MonkeyPatch, fake_gpu: SimpleNamespace
) -> None:
    assert free_memory_bytes("cuda:0") == 60 * GiB  # no cap: what the driver has
    assert fake_gpu.fractions == []
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "16GiB")
    # The room under the allocator's limit: the cap less what it reserved.
    assert free_memory_bytes("cuda:0") == 14 * GiB
    assert fake_gpu.fractions == [(16 / 80, 0)]  # the allocator's limit, once
    fake_gpu.free = 10 * GiB  # other processes use the GPU: less than the cap
    assert free_memory_bytes("cuda") == 10 * GiB
    fake_gpu.reserved = 20 * GiB  # more reserved than the cap allows
    assert free_memory_bytes("cuda:0") == 0
    assert len(fake_gpu.fractions) == 1


def test_cap_bounds_the_sizes_a_gpu_plans(
    monkeypatch: pytest.MonkeyPatch, fake_gpu: SimpleNamespace
) -> None:
    fake_gpu.reserved = 0
    monkeypatch.delenv("GPUGUIDE_SMALL", raising=False)
    assert size_budget("cuda:0").memory_bytes == 15 * GiB  # a quarter of 60 GiB
    assert sweep(1, 2**40, device="cuda:0", memory_at=lambda n: n)[-1] == 8 * GiB
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "16 GiB")
    assert size_budget("cuda:0").memory_bytes == 4 * GiB  # a quarter of 16 GiB
    assert sweep(1, 2**40, device="cuda:0", memory_at=lambda n: n)[-1] == 4 * GiB
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "16GB")  # decimal: 14.9 GiB
    assert sweep(1, 2**40, device="cuda:0", memory_at=lambda n: n)[-1] == 2 * GiB


def test_cap_larger_than_the_gpu_stops_the_plan(
    monkeypatch: pytest.MonkeyPatch, fake_gpu: SimpleNamespace
) -> None:
    gpu = SimpleNamespace(name="NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: gpu)
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "96GiB")
    with pytest.raises(ValueError, match=r"GPUGUIDE_GPU_MEMORY asks for 96\.0 GiB"):
        size_budget("cuda:0")


def test_cpu_ignores_the_gpu_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "not a size")
    monkeypatch.setattr(sizes.host, "available_memory_bytes", lambda: 123 * MiB)
    assert free_memory_bytes("cpu") == 123 * MiB


# -- the host memory a CPU plan counts on ----------------------------------------


@pytest.mark.parametrize(
    ("available", "expected"),
    [(64 * GiB, 512 * MiB), (4 * GiB, 512 * MiB), (GiB, 256 * MiB)],
)
def test_cpu_budget_counts_on_at_most_host_memory_bytes(
    monkeypatch: pytest.MonkeyPatch, available: int, expected: int
) -> None:
    monkeypatch.setattr(sizes.host, "available_memory_bytes", lambda: available)
    assert size_budget("cpu").memory_bytes == expected
    whole = size_budget("cpu", memory_fraction=1.0).memory_bytes
    assert whole == min(available, 2 * GiB)


# -- size_budget ---------------------------------------------------------------


@pytest.fixture
def fixed_free(monkeypatch: pytest.MonkeyPatch) -> int:
    free = GiB  # below HOST_MEMORY_BYTES, so CPU budgets are a share of it
    monkeypatch.setattr(sizes, "free_memory_bytes", lambda device=None: free)
    return free


def test_size_budget_defaults(fixed_free: int) -> None:
    b = size_budget("cpu")
    assert b == SizeBudget(
        device="cpu", memory_bytes=fixed_free // 4, call_s=0.02, small=False
    )
    assert size_budget("mps").call_s == 0.05
    assert size_budget("mps").device == "mps"


def test_size_budget_cuda(monkeypatch: pytest.MonkeyPatch, fixed_free: int) -> None:
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    b = size_budget("cuda")
    assert (b.device, b.call_s) == ("cuda:3", 0.05)
    assert size_budget("cuda:1").device == "cuda:1"


def test_size_budget_fraction_and_call(fixed_free: int) -> None:
    b = size_budget("cpu", memory_fraction=0.5, call_s=0.1)
    assert b.memory_bytes == fixed_free // 2
    assert b.call_s == 0.1


def test_size_budget_small_caps(
    monkeypatch: pytest.MonkeyPatch, fixed_free: int
) -> None:
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")
    b = size_budget("cpu", call_s=0.1)
    assert b.small is True
    assert b.memory_bytes == 64 * MiB
    assert b.call_s == 0.002


def test_size_budget_small_keeps_smaller_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")
    monkeypatch.setattr(sizes, "free_memory_bytes", lambda device=None: 100 * MiB)
    b = size_budget("cpu", memory_fraction=0.1, call_s=0.001)
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
    assert size_budget().device == "cpu"


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_size_budget_rejects_fraction(fraction: float) -> None:
    with pytest.raises(ValueError, match="memory_fraction"):
        size_budget("cpu", memory_fraction=fraction)


@pytest.mark.parametrize("call_s", [0.0, -1.0, float("inf"), float("nan")])
def test_size_budget_rejects_call_s(call_s: float) -> None:
    with pytest.raises(ValueError, match="call_s"):
        size_budget("cpu", call_s=call_s)


def test_size_budget_real_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    b = size_budget("cpu")
    assert 0 < b.memory_bytes <= free_memory_bytes("cpu")


def test_size_budget_str() -> None:
    text = str(SizeBudget("cuda:0", 64 * MiB, 0.002, small=True))
    assert text == "64.0 MiB and 2.00 ms per call on cuda:0, small mode"
    assert "small" not in str(budget())
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget().call_s = 2.0  # type: ignore[misc]


# -- the roofline estimate that plans sizes --------------------------------------

H100ish = Peaks(
    name="test GPU",
    flops={"fp32": 50e12, "bf16": 1000e12},
    memory_bandwidth_bytes_per_s=3e12,
    source="test",
)
UNKNOWN = Peaks(name="unknown GPU (x)", flops={}, source="none", known=False)


def test_unknown_peaks_plan_with_the_fallback_rates() -> None:
    for work in ({"flop_at": lambda n: 2 * n**3}, {"traffic_at": lambda n: 1e8 * n}):
        kwargs = {"budget": budget(call_s=0.01), "memory_at": lambda n: 0, **work}
        unknown = sweep(1, 4096, peaks=UNKNOWN, **kwargs)
        assert unknown == sweep(1, 4096, peaks=None, **kwargs)
        assert unknown[-1] < sweep(1, 4096, peaks=H100ish, **kwargs)[-1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"flop_at": lambda n: -1.0}, "flop_at"),
        ({"traffic_at": lambda n: float("nan")}, "traffic_at"),
        ({"traffic_at": lambda n: float("inf")}, "traffic_at"),
        ({"efficiency": 0.0}, "efficiency"),
        ({"efficiency": 1.2}, "efficiency"),
    ],
)
def test_sweep_rejects_bad_work_and_efficiency(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sweep(1, 8, budget=budget(), memory_at=lambda n: n, peaks=H100ish, **kwargs)


# -- sweep and largest_size ----------------------------------------------------


def test_sweep_powers_of_two() -> None:
    assert sweep(1, 1024, budget=budget(), memory_at=lambda n: n) == [
        2**i for i in range(11)
    ]


def test_sweep_stops_at_hi_that_is_not_a_power_of_two() -> None:
    assert sweep(3, 50, budget=budget(), memory_at=lambda n: n) == [3, 6, 12, 24, 48]


def test_sweep_per_octave() -> None:
    got = sweep(64, 1024, budget=budget(), memory_at=lambda n: n, per_octave=2)
    # 64 * 2**(i/2): 64, 90.5, 128, 181.0, 256, 362.0, 512, 724.1, 1024
    assert got == [64, 91, 128, 181, 256, 362, 512, 724, 1024]


def test_sweep_multiple_of_rounds_and_dedups() -> None:
    got = sweep(
        1, 1000, budget=budget(), memory_at=lambda n: n, per_octave=4, multiple_of=64
    )
    assert got[0] == 64
    assert all(n % 64 == 0 for n in got)
    assert got == sorted(set(got))
    assert got[-1] <= 1000
    assert got == [64, 128, 192, 256, 320, 384, 448, 512, 640, 704, 832]


def test_sweep_filters_by_memory() -> None:
    got = sweep(
        16, 4096, budget=budget(memory_bytes=MiB), memory_at=lambda n: 4 * n * n
    )
    assert got == [16, 32, 64, 128, 256, 512]


def test_sweep_without_work_does_not_estimate_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sizes, "device_peaks", _no_peaks_expected)
    got = sweep(16, 64, budget=budget(call_s=1e-12), memory_at=lambda n: n)
    assert got == [16, 32, 64]


def test_sweep_filters_by_estimated_time() -> None:
    b = budget(memory_bytes=GiB, call_s=0.01)
    got = sweep(
        128,
        16384,
        budget=b,
        memory_at=lambda n: 3 * 4 * n * n,
        flop_at=lambda n: 2 * n**3,
        traffic_at=lambda n: 3 * 4 * n * n,
        peaks=H100ish,
    )
    assert got[0] == 128
    assert all(3 * 4 * n * n <= b.memory_bytes for n in got)
    assert got[-1] == 4096  # 8192^3 needs 44 ms at 25 TFLOP/s


def test_sweep_traffic_alone_uses_the_bandwidth() -> None:
    # 3 TB/s at 50%: 1.5e10 bytes in the 10 ms budget, 1.5e10 / 16 = 9.4e8 elements.
    got = sweep(
        2**20,
        2**32,
        budget=budget(memory_bytes=2**40, call_s=0.01),
        memory_at=lambda n: 16 * n,
        traffic_at=lambda n: 16 * n,
        peaks=H100ish,
    )
    assert got[-1] == 2**29


def test_sweep_plans_with_the_device_peaks_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = []

    def fake_peaks(device: object) -> Peaks:
        asked.append(device)
        return H100ish

    monkeypatch.setattr(sizes, "device_peaks", fake_peaks)
    kwargs = {"memory_at": lambda n: 0, "flop_at": lambda n: 2 * n**3}
    got = sweep(128, 16384, budget=budget(call_s=0.01), **kwargs)
    assert got[-1] == 4096
    assert asked == ["cpu"]  # the budget's device
    got = sweep(128, 16384, budget=budget(call_s=0.01), device="cuda:1", **kwargs)
    assert asked[-1] == "cuda:1"


def test_sweep_peaks_none_plans_with_fallback_rates() -> None:
    # 1e11 FLOP/s at 50%: 2 n^3 <= 5e8 FLOP in 10 ms, so n <= 630.
    got = sweep(
        16,
        4096,
        budget=budget(call_s=0.01),
        memory_at=lambda n: 0,
        flop_at=lambda n: 2 * n**3,
        peaks=None,
    )
    assert got[-1] == 512


def test_sweep_flop_per_s_overrides_the_fp32_peak() -> None:
    # bf16's 1000 TFLOP/s instead of fp32's 50: 20x the FLOP in the same time.
    kwargs = {"memory_at": lambda n: 0, "flop_at": lambda n: 2 * n**3}
    fp32 = sweep(128, 65536, budget=budget(call_s=0.01), peaks=H100ish, **kwargs)
    bf16 = sweep(
        128, 65536, budget=budget(call_s=0.01), peaks=H100ish, flop_per_s=1e15, **kwargs
    )
    assert (fp32[-1], bf16[-1]) == (4096, 8192)


def test_sweep_efficiency_scales_the_estimate() -> None:
    kwargs = {"memory_at": lambda n: 0, "traffic_at": lambda n: 16 * n}
    full = sweep(
        1, 2**40, budget=budget(call_s=0.01), peaks=H100ish, efficiency=1.0, **kwargs
    )
    tenth = sweep(
        1, 2**40, budget=budget(call_s=0.01), peaks=H100ish, efficiency=0.1, **kwargs
    )
    assert full[-1] == 8 * tenth[-1]


def test_sweep_builds_the_budget_from_device_and_call_s(
    monkeypatch: pytest.MonkeyPatch, fixed_free: int
) -> None:
    monkeypatch.delenv("GPUGUIDE_SMALL", raising=False)
    got = sweep(1, 2**40, device="cpu", memory_at=lambda n: n)
    assert got[-1] == 2**28  # a quarter of 1 GiB
    kwargs = {"memory_at": lambda n: 0, "flop_at": lambda n: 1e9 * n, "peaks": None}
    assert sweep(1, 1024, device="cpu", call_s=0.08, **kwargs)[-1] == 4
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")  # 64 MiB and 2 ms
    assert sweep(1, 2**40, device="cpu", memory_at=lambda n: n)[-1] == 2**26
    assert sweep(1, 1024, device="cpu", call_s=0.08, **kwargs) == [1]


def test_sweep_none_fit() -> None:
    with pytest.raises(ValueError, match=r"smallest size, n=1024, must fit the budget"):
        sweep(
            1024, 4096, budget=budget(memory_bytes=MiB), memory_at=lambda n: 4 * n * n
        )


def test_sweep_too_slow_everywhere_keeps_the_smallest() -> None:
    got = sweep(
        1,
        8,
        budget=budget(call_s=1e-3),
        memory_at=lambda n: 0 if n < 8 else 10**12,
        flop_at=lambda n: 1e15,
        peaks=H100ish,
    )
    assert got == [1]


def test_sweep_no_multiple_in_range() -> None:
    with pytest.raises(ValueError, match="must hold a multiple of 64"):
        sweep(1, 32, budget=budget(), memory_at=lambda n: n, multiple_of=64)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((0, 8), {}, "lo must be >= 1"),
        ((8, 4), {}, "hi must be >= 8"),
        ((1, 8), {"per_octave": 0}, "per_octave"),
        ((1, 8), {"multiple_of": 0}, "multiple_of"),
    ],
)
def test_sweep_rejects_bad_arguments(
    args: tuple[int, int], kwargs: dict[str, int], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        sweep(*args, budget=budget(), memory_at=lambda n: n, **kwargs)


def test_sweep_rejects_non_integers() -> None:
    with pytest.raises(TypeError, match="lo"):
        sweep(1.5, 8, budget=budget(), memory_at=lambda n: n)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="per_octave"):
        sweep(1, 8, budget=budget(), memory_at=lambda n: n, per_octave=True)


def test_largest_size_is_the_last_size_of_the_sweep() -> None:
    kwargs = {
        "budget": budget(memory_bytes=GiB, call_s=0.01),
        "memory_at": lambda n: 3 * 4 * n * n,
        "flop_at": lambda n: 2 * n**3,
        "peaks": H100ish,
        "multiple_of": 64,
    }
    # 100 doubled and rounded to multiples of 64: 128, 192, 384, 832, 1600, 3200, 6400.
    assert largest_size(100, 16384, **kwargs) == sweep(100, 16384, **kwargs)[-1] == 3200
    small = budget(memory_bytes=MiB)
    assert largest_size(16, 4096, budget=small, memory_at=lambda n: 4 * n * n) == 512
    with pytest.raises(ValueError, match="must fit the budget"):
        largest_size(1024, 4096, budget=small, memory_at=lambda n: 4 * n * n)


def _no_peaks_expected(device: object) -> Peaks:
    raise AssertionError("no time estimate was asked for")
