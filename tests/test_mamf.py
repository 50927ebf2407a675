"""Tests for gpuguide_tools.mamf: the shape grid, the rate statistic, the search.

A fake benchmark gives every shape a known rate, so that the search is tested
without timing anything; the CUDA path runs with stand-in tensors.
"""

from __future__ import annotations

import math

import pytest
import torch

from gpuguide.sizes import SizeBudget
from gpuguide.timing import Measurement
from gpuguide_tools import mamf
from gpuguide_tools.mamf import (
    FASTEST_CALLS,
    MatmulShape,
    ShapeRate,
    ShapeSearch,
    matmul_shapes,
    probe_flops_per_s,
    search_matmul_shapes,
)


def _measurement(times, label="x"):
    return Measurement(label=label, times_s=times, device="cpu", method="wall-clock")


def _budget(memory_bytes=2**30, call_s=0.05, device="cpu"):
    return SizeBudget(
        device=device, memory_bytes=memory_bytes, call_s=call_s, small=False
    )


# --------------------------------------------------------------------------------------
# MatmulShape and ShapeRate
# --------------------------------------------------------------------------------------


def test_matmul_shape():
    shape = MatmulShape(2048, 1024, 13312)
    assert str(shape) == "2048x1024x13312"
    assert shape.flop == 2 * 2048 * 1024 * 13312
    assert shape.memory_bytes(2) == 2 * (2048 * 13312 + 13312 * 1024 + 2048 * 1024)


def test_rate_is_the_median_of_the_five_fastest_calls():
    assert FASTEST_CALLS == 5
    shape = MatmulShape(100, 100, 100)  # 2e6 FLOP
    # The five fastest: 1, 2, 3, 4, 5 ms; their median is 3 ms. Slow calls (a
    # clock that dropped, a hiccup) do not count; the median call does, apart.
    times = (0.009, 0.001, 0.005, 0.003, 0.050, 0.002, 0.004, 0.008)
    result = ShapeRate(shape, _measurement(times))
    assert result.burst_s == pytest.approx(0.003)
    assert result.flops_per_s == pytest.approx(2e6 / 0.003)
    assert result.median_flops_per_s == pytest.approx(2e6 / 0.0045)
    assert result.median_flops_per_s <= result.flops_per_s
    assert "100x100x100" in repr(result)
    assert "median call" in repr(result)


def test_rate_with_fewer_calls_than_five():
    result = ShapeRate(MatmulShape(10, 10, 10), _measurement((0.2, 0.1)))
    assert result.burst_s == pytest.approx(0.15)


def test_a_search_needs_a_confirmed_shape():
    with pytest.raises(ValueError, match="at least one"):
        ShapeSearch("bf16", (), ())


# --------------------------------------------------------------------------------------
# The shape grid
# --------------------------------------------------------------------------------------


def test_grid_is_every_shape_from_the_largest_sizes_that_fit():
    # fp32 at 1e12 FLOP/s planned at half: 50 ms allows 2.5e10 FLOP, a square of
    # 2048 (1.7e10) but not 4096; memory allows anything here.
    shapes = matmul_shapes(
        torch.float32, budget=_budget(), flop_per_s=1e12, levels=3, lo=256
    )
    sides = {side for shape in shapes for side in shape}
    assert sides == {512, 1024, 2048}
    assert MatmulShape(2048, 2048, 2048) in shapes
    assert MatmulShape(512, 2048, 1024) in shapes
    assert len(shapes) == 27
    assert [s.flop for s in shapes] == sorted(s.flop for s in shapes)
    for shape in shapes:
        assert 2 * shape.flop / 1e12 <= 0.05


def test_grid_keeps_only_shapes_that_fit_memory_and_time():
    # Time: 5 ms at 1e12 (planned at half) allows 2.5e9 FLOP: 1024^3 (2.1e9) fits,
    # but 1024 x 1024 x 2048 does not; every kept shape is within both limits.
    budget = _budget(memory_bytes=3 * 1024 * 1024 * 4, call_s=0.005)
    shapes = matmul_shapes(
        torch.float32, budget=budget, flop_per_s=1e12, levels=2, lo=256
    )
    assert shapes
    assert MatmulShape(1024, 1024, 1024) in shapes
    for shape in shapes:
        assert shape.memory_bytes(4) <= budget.memory_bytes
        assert 2 * shape.flop / 1e12 <= budget.call_s
    # The same budget in bf16 has room for twice the elements.
    wide = matmul_shapes(
        torch.bfloat16, budget=_budget(call_s=1.0), flop_per_s=1e12, levels=1, lo=256
    )
    assert wide[-1].memory_bytes(2) <= _budget().memory_bytes


def test_grid_uses_the_multiple_and_levels():
    shapes = matmul_shapes(
        torch.bfloat16,
        budget=_budget(memory_bytes=2**34, call_s=0.05),
        flop_per_s=1e15,
        levels=4,
        lo=256,
        multiple_of=256,
    )
    sides = sorted({side for shape in shapes for side in shape})
    assert sides == [2048, 4096, 8192, 16384]
    assert all(side % 256 == 0 for side in sides)
    assert len(shapes) == 64


def test_grid_with_too_little_time_keeps_the_smallest_square():
    shapes = matmul_shapes(
        torch.float32,
        budget=_budget(call_s=1e-9),
        flop_per_s=1e9,
        lo=32,
        multiple_of=32,
    )
    assert shapes == [MatmulShape(32, 32, 32)]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"flop_per_s": 0.0}, "flop_per_s"), ({"flop_per_s": 1e9, "levels": 0}, "levels")],
)
def test_grid_rejects_bad_arguments(kwargs, error):
    with pytest.raises(ValueError, match=error):
        matmul_shapes(torch.float32, budget=_budget(), **kwargs)


# --------------------------------------------------------------------------------------
# The search
# --------------------------------------------------------------------------------------


class FakeBench:
    """A benchmark whose calls take ``flop / rate(shape)``: no real timing.

    Each call's times are the best time five times, then six at twice it, so the
    rate statistic reads exactly ``rate(shape)``. Scout and confirm calls are
    told apart by their budgets; the confirm rate can differ.
    """

    def __init__(self, rate, confirm_rate=None):
        self.rate = rate
        self.confirm_rate = confirm_rate or rate
        self.calls = []

    def __call__(self, fn, *, args=(), kwargs=None, label=None, **options):
        a, b = args
        shape = MatmulShape(a.shape[0], b.shape[1], a.shape[1])
        scout = "rep_ms" in options
        self.calls.append({"shape": shape, "scout": scout, **options})
        rate = (self.rate if scout else self.confirm_rate)(shape)
        best = shape.flop / rate
        times = (best,) * 5 + (best * 2,) * 6  # the median call is 2x the best
        return _measurement(times, label=label)


def _fast_at(favourite, rate=1e10, boost=2.0):
    return lambda shape: rate * (boost if shape == favourite else 1.0)


def test_search_finds_the_fastest_shape_and_confirms_it():
    favourite = MatmulShape(64, 64, 128)
    bench = FakeBench(_fast_at(favourite))
    found = search_matmul_shapes(
        torch.float32,
        device="cpu",
        label="fp32",
        flop_per_s=1e10,
        budget=_budget(memory_bytes=3 * 128 * 128 * 4, call_s=1.0),
        levels=3,
        bench=bench,
    )
    assert found.label == "fp32"
    assert found.best.shape == favourite
    assert found.best.flops_per_s == pytest.approx(2e10)
    assert found.best.median_flops_per_s == pytest.approx(2e10 / 2)
    scouts = [c for c in bench.calls if c["scout"]]
    confirms = [c for c in bench.calls if not c["scout"]]
    assert len(scouts) == len(found.scouted) == 27  # 32, 64 and 128 per dimension
    assert [c["shape"].flop for c in scouts] == sorted(c["shape"].flop for c in scouts)
    assert len(confirms) == len(found.confirmed) == 3
    assert confirms[0]["shape"] == favourite  # the fastest scout first
    for call in bench.calls:
        assert call["flush_l2"] is True  # every call starts with a cold L2 on CUDA
        assert call["min_reps"] == FASTEST_CALLS
        assert call["device"] == torch.device("cpu")
    rates = [r.flops_per_s for r in found.scouted]
    assert rates == sorted(rates, reverse=True)
    assert "fp32: best 64x64x128" in repr(found)


def test_confirm_decides_between_close_scouts():
    first, second = MatmulShape(128, 128, 128), MatmulShape(128, 64, 128)
    scout = lambda s: {first: 3e10, second: 2.9e10}.get(s, 1e10)  # noqa: E731
    confirm = lambda s: {first: 2.5e10, second: 2.8e10}.get(s, 1e10)  # noqa: E731
    found = search_matmul_shapes(
        torch.float32,
        device="cpu",
        flop_per_s=1e10,
        budget=_budget(call_s=1.0, memory_bytes=3 * 128 * 128 * 4),
        levels=2,
        confirm=2,
        bench=FakeBench(scout, confirm),
    )
    assert [r.shape for r in found.confirmed] == [second, first]
    assert found.best.flops_per_s == pytest.approx(2.8e10)
    assert found.label == "float32"


def test_search_stops_when_calls_take_far_longer_than_planned():
    # Planned at 1e12 FLOP/s but the device does 1e6: the first shape already takes
    # far more than twice the time per call, so no larger one is tried.
    bench = FakeBench(lambda shape: 1e6)
    found = search_matmul_shapes(
        torch.float32,
        device="cpu",
        flop_per_s=1e12,
        budget=_budget(memory_bytes=3 * 128 * 128 * 4, call_s=0.01),
        levels=3,
        bench=bench,
    )
    assert len(found.scouted) == 1
    assert found.best.shape == MatmulShape(32, 32, 32)


def test_search_probes_when_no_rate_is_given():
    bench = FakeBench(lambda shape: 1e9)
    found = search_matmul_shapes(
        torch.bfloat16,
        device="cpu",
        budget=_budget(memory_bytes=3 * 64 * 64 * 2, call_s=1.0),
        levels=2,
        bench=bench,
    )
    probe = bench.calls[0]
    assert probe["shape"] == MatmulShape(64, 64, 64)
    assert probe["rep_ms"] == 5.0
    assert found.best.flops_per_s == pytest.approx(1e9)


def test_probe_flops_per_s():
    bench = FakeBench(lambda shape: 4e9)
    assert probe_flops_per_s(torch.float32, "cpu", n=16, bench=bench) == (
        pytest.approx(4e9)
    )
    with pytest.raises(ValueError, match="n"):
        probe_flops_per_s(torch.float32, "cpu", n=0, bench=bench)


@pytest.mark.parametrize(
    ("device", "small", "levels"),
    [("cpu", "0", 3), ("cpu", "1", 2), ("cuda", "0", 4), ("cuda", "1", 3)],
)
def test_levels_default_to_fewer_off_cuda_and_in_small_mode(
    monkeypatch, device, small, levels
):
    seen = []

    def spy(dtype, **kwargs):
        seen.append(kwargs["levels"])
        return [MatmulShape(32, 32, 32)]

    monkeypatch.setattr(mamf, "matmul_shapes", spy)
    monkeypatch.setattr(mamf, "_inputs", _stand_in_inputs)
    monkeypatch.setenv("GPUGUIDE_SMALL", small)
    search_matmul_shapes(
        torch.float32,
        device=device,
        flop_per_s=1e9,
        budget=_budget(),
        bench=FakeBench(lambda shape: 1e9),
    )
    assert seen == [levels]


def _stand_in_inputs(shape, dtype, device):
    return torch.empty(shape.m, shape.k), torch.empty(shape.k, shape.n), None


def test_search_on_cuda_uses_multiples_of_256(monkeypatch):
    # No GPU needed: stand-in tensors carry the shapes, the fake bench times them.
    made = []

    def fake_inputs(shape, dtype, device):
        made.append((shape, dtype, device))
        return _stand_in_inputs(shape, dtype, device)

    monkeypatch.setattr(mamf, "_inputs", fake_inputs)
    found = search_matmul_shapes(
        torch.bfloat16,
        device="cuda",
        flop_per_s=989.5e12,
        budget=_budget(memory_bytes=3 * 1024 * 1024 * 2, call_s=0.05, device="cuda:0"),
        levels=2,
        bench=FakeBench(lambda shape: 7e14),
    )
    sides = {side for shape, *_ in made for side in shape}
    assert sides == {512, 1024}
    assert all(dtype is torch.bfloat16 for _, dtype, _ in made)
    assert all(device == torch.device("cuda") for *_, device in made)
    assert found.best.flops_per_s == pytest.approx(7e14)


def test_search_really_runs_on_cpu(monkeypatch):
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")
    found = search_matmul_shapes(
        torch.float32, device="cpu", budget=_budget(memory_bytes=3 * 64 * 64 * 4)
    )
    assert found.scouted
    best = found.best
    assert math.isfinite(best.flops_per_s)
    assert best.flops_per_s > 1e6
    assert max(best.shape) <= 64
