"""Tests for gpuguide_tools.mamf: the rate statistic and the search.

A fake timer gives every shape a known rate, so that the search is tested without
timing anything (the shape grid is the dtypes page's, tested in test_precision).
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
# The search
# --------------------------------------------------------------------------------------


class FakeTime:
    """A time_matmul whose calls take ``flop / rate(shape)``: no real timing.

    Each call's times are the best time five times, then six at twice it, so the
    rate statistic reads exactly ``rate(shape)``. Scout and confirm calls are
    told apart by their budgets; the confirm rate can differ.
    """

    def __init__(self, rate, confirm_rate=None):
        self.rate = rate
        self.confirm_rate = confirm_rate or rate
        self.calls = []

    def __call__(self, dtype, shape, *, device, label=None, **options):
        shape = MatmulShape(*shape)
        scout = "rep_ms" in options
        self.calls.append(
            {"shape": shape, "scout": scout, "device": device, "dtype": dtype} | options
        )
        rate = (self.rate if scout else self.confirm_rate)(shape)
        best = shape.flop / rate
        times = (best,) * 5 + (best * 2,) * 6  # the median call is 2x the best
        return _measurement(times, label=label)


def _fast_at(favourite, rate=1e10, boost=2.0):
    return lambda shape: rate * (boost if shape == favourite else 1.0)


def test_search_finds_the_fastest_shape_and_confirms_it():
    favourite = MatmulShape(64, 64, 128)
    bench = FakeTime(_fast_at(favourite))
    found = search_matmul_shapes(
        torch.float32,
        device="cpu",
        label="fp32",
        flop_per_s=1e10,
        budget=_budget(memory_bytes=3 * 128 * 128 * 4, call_s=1.0),
        levels=3,
        time=bench,
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
        time=FakeTime(scout, confirm),
    )
    assert [r.shape for r in found.confirmed] == [second, first]
    assert found.best.flops_per_s == pytest.approx(2.8e10)
    assert found.label == "float32"


def test_search_stops_when_calls_take_far_longer_than_planned():
    # Planned at 1e12 FLOP/s but the device does 1e6: the first shape already takes
    # far more than twice the time per call, so no larger one is tried.
    bench = FakeTime(lambda shape: 1e6)
    found = search_matmul_shapes(
        torch.float32,
        device="cpu",
        flop_per_s=1e12,
        budget=_budget(memory_bytes=3 * 128 * 128 * 4, call_s=0.01),
        levels=3,
        time=bench,
    )
    assert len(found.scouted) == 1
    assert found.best.shape == MatmulShape(32, 32, 32)


def test_search_probes_when_no_rate_is_given(monkeypatch):
    probed = []

    def probe_rate(dtype, device):
        probed.append((dtype, device))
        return 1e9

    monkeypatch.setattr(mamf.precision, "probe_rate", probe_rate)
    bench = FakeTime(lambda shape: 1e9)
    found = search_matmul_shapes(
        torch.bfloat16,
        device="cpu",
        budget=_budget(memory_bytes=3 * 64 * 64 * 2, call_s=1.0),
        levels=2,
        time=bench,
    )
    assert probed == [(torch.bfloat16, torch.device("cpu"))]
    assert found.best.flops_per_s == pytest.approx(1e9)


@pytest.mark.parametrize(
    ("device", "small", "levels"),
    [("cpu", "0", 3), ("cpu", "1", 2), ("cuda", "0", 4), ("cuda", "1", 3)],
)
def test_levels_default_to_fewer_off_cuda_and_in_small_mode(
    monkeypatch, device, small, levels
):
    seen = []

    def spy(dtype, flop_per_s, budget, *, lo, levels):
        seen.append(levels)
        return [(32, 32, 32)]

    monkeypatch.setattr(mamf.precision, "matmul_shapes", spy)
    monkeypatch.setenv("GPUGUIDE_SMALL", small)
    search_matmul_shapes(
        torch.float32,
        device=device,
        flop_per_s=1e9,
        budget=_budget(),
        time=FakeTime(lambda shape: 1e9),
    )
    assert seen == [levels]


def test_search_on_cuda_uses_multiples_of_256():
    # No GPU needed: the fake timer sees the shapes it is asked to time.
    bench = FakeTime(lambda shape: 7e14)
    found = search_matmul_shapes(
        torch.bfloat16,
        device="cuda",
        flop_per_s=989.5e12,
        budget=_budget(memory_bytes=3 * 1024 * 1024 * 2, call_s=0.05, device="cuda:0"),
        levels=2,
        time=bench,
    )
    sides = {side for call in bench.calls for side in call["shape"]}
    assert sides == {512, 1024}
    assert all(call["dtype"] is torch.bfloat16 for call in bench.calls)
    assert all(call["device"] == torch.device("cuda") for call in bench.calls)
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
