"""Tests for gpuguide_tools.mamf: the check-up's "best matmul" figure.

The search itself is the dtypes page's, tested in test_precision; here a fake search
checks what the check-up plans it with and how it turns its result into a figure.
"""

from __future__ import annotations

import pytest
import torch

from gpuguide.chapters import precision
from gpuguide.peaks import _GPU_PEAKS as GPU_PEAKS
from gpuguide.peaks import device_peaks
from gpuguide.timing import Measurement
from gpuguide_tools.mamf import best_matmul


class FakeSearch:
    """search_matmul_shapes, returning ``shape`` at calls of 1, 2, 3, 4 and 5 ps per
    FLOP (MAMF's rate 1/3 PFLOP/s, quartiles 1/4 and 1/2)."""

    def __init__(self, shape=(256, 512, 128)):
        self.shape = shape
        self.calls = []

    def __call__(self, dtype, flop_per_s, **options):
        self.calls.append({"dtype": dtype, "flop_per_s": flop_per_s} | options)
        per_flop = tuple(t * 1e-15 for t in (1, 2, 3, 4, 5))
        return self.shape, Measurement("x", per_flop, "cpu", "wall-clock"), 27


def test_best_matmul_plans_at_the_peak_and_gives_the_pages_figure(monkeypatch):
    search = FakeSearch()
    monkeypatch.setattr(precision, "search_matmul_shapes", search)
    peaks = GPU_PEAKS["H100 SXM5"]
    cuda = torch.device("cuda:0")
    found = best_matmul("tf32", torch.float32, True, device=cuda, levels=2, peaks=peaks)
    assert search.calls == [
        {
            "dtype": torch.float32,
            "flop_per_s": peaks.flops_for(torch.float32, tf32=True),
            "device": cuda,
            "levels": 2,
            "label": "tf32",
            "tf32": True,
        }
    ]
    assert (found.page, found.name, found.unit) == (
        "plot_dtype_throughput",
        "best matmul",
        "FLOP/s",
    )
    assert found.value == pytest.approx(1e15 / 3)
    assert found.spread == pytest.approx((1e15 / 4, 1e15 / 2))
    assert dict(found.config) == {"dtype": "tf32"}
    assert (found.size, found.peak) == ("256x512x128", "tf32")
    plain = best_matmul(
        "fp32", torch.float32, False, device=cuda, levels=2, peaks=peaks
    )
    assert search.calls[-1]["tf32"] is False
    assert search.calls[-1]["flop_per_s"] == peaks.flops_for(torch.float32)
    assert plain.peak == "fp32"


def test_best_matmul_plans_at_a_probe_where_no_peak_is_known(monkeypatch):
    probed = []

    def probe_rate(dtype, device):
        probed.append((dtype, device))
        return 1e9

    search = FakeSearch()
    monkeypatch.setattr(precision, "search_matmul_shapes", search)
    monkeypatch.setattr(precision, "probe_rate", probe_rate)
    peaks = device_peaks("cpu")
    assert peaks.flops_for(torch.float16) is None  # no fp16 ceiling on a CPU
    cpu = torch.device("cpu")
    best_matmul("fp16", torch.float16, False, device=cpu, levels=1, peaks=peaks)
    assert probed == [(torch.float16, cpu)]
    assert search.calls[0]["flop_per_s"] == 1e9


def test_best_matmul_really_runs_on_cpu(monkeypatch):
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")
    cpu = torch.device("cpu")
    peaks = device_peaks(cpu)
    found = best_matmul("fp32", torch.float32, False, device=cpu, levels=1, peaks=peaks)
    assert found.value > 1e6
    low, high = found.spread
    assert low <= found.value <= high
    m, n, k = map(int, found.size.split("x"))
    assert m == n == k
