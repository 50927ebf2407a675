"""Tests for gpuguide.chapters.roofline: the roofline plot and the streaming size."""

from __future__ import annotations

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from gpuguide.chapters import roofline
from gpuguide.chapters.roofline import Roofline, streaming_elements
from gpuguide.peaks import streaming_bytes
from gpuguide.sweeps import Sweep, SweepResult
from gpuguide.timing import Measurement

REGIMES = ("overhead-bound", "memory-bound", "compute-bound")


def timed(seconds: float, label: str = "op") -> Measurement:
    return Measurement(
        label, (seconds * 0.9, seconds, seconds * 1.1), "cpu", "wall-clock"
    )


def place(line: Roofline, label: str, intensity: float, percent: float, s=1e-3):
    """Add an operation at ``intensity`` reaching ``percent`` of ``line``'s roof in
    ``s`` seconds (below 50 us and a quarter of the roof: overhead-bound)."""
    flops, bandwidth = line.peak_flops_per_s, line.peak_bytes_per_s
    flop = min(flops, intensity * bandwidth) * percent / 100 * s
    line.add(label, flop, flop / intensity, timed(s))


def drawn(line: Roofline, runs=None) -> plt.Axes:
    line.plot(title="a title", runs=runs or {})
    return plt.gca()


def texts(ax: plt.Axes) -> list[str]:
    return [t.get_text() for t in ax.texts]


def legend(ax: plt.Axes) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


# -- Roofline.plot ---------------------------------------------------------------


def test_plot_draws_roof_ridge_and_points() -> None:
    line = Roofline(10e12, 1e12)  # ridge at 10 FLOP/byte
    place(line, "tiny add", 0.1, 1.0, s=1e-5)
    place(line, "big add", 0.1, 80.0)
    place(line, "matmul", 100.0, 70.0)
    ax = drawn(line)
    ax.figure.canvas.draw()
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert ax.get_xlabel() == "arithmetic intensity (FLOP/byte)"
    assert ax.get_ylabel() == "achieved compute (TFLOP/s)"
    assert ax.get_title() == "a title"
    # The roof: slanted up to the ridge (10 FLOP/byte), flat at 10 TFLOP/s.
    (roof,) = [ln for ln in ax.lines if ln.get_label().startswith("roof:")]
    xs, ys = (np.asarray(v, dtype=float) for v in roof.get_data())
    assert xs[1] == pytest.approx(10.0)
    assert ys[1:].tolist() == pytest.approx([10.0, 10.0])
    assert ys[0] == pytest.approx(xs[0] * 1.0)  # 1 TB/s x intensity, in TFLOP/s
    assert xs[0] == pytest.approx(0.1 / 4)
    assert xs[-1] == pytest.approx(100.0 * 4)
    assert len([ln for ln in ax.lines if ln.get_linestyle() == ":"]) == 1
    assert "ridge 10 FLOP/byte" in texts(ax)
    assert {"tiny add", "big add", "matmul"} <= set(texts(ax))
    # One legend entry per regime, markers at the points' coordinates.
    assert set(REGIMES) <= set(legend(ax))
    offsets = np.vstack([np.asarray(c.get_offsets()) for c in ax.collections])
    points = [line.point(label) for label in line.ops]
    assert offsets[:, 0].tolist() == pytest.approx([x for x, _ in points])
    assert offsets[:, 1].tolist() == pytest.approx([r / 1e12 for _, r in points])
    assert any(t.get_text().startswith("measured on ") for t in ax.figure.texts)


def test_plot_colours_points_by_regime() -> None:
    line = Roofline(10e12, 1e12)
    place(line, "a", 0.1, 1.0, s=1e-5)
    place(line, "b", 0.1, 2.0, s=1e-5)
    place(line, "c", 50, 1.0)
    ax = drawn(line)
    first, second, third = ax.collections
    assert np.allclose(first.get_facecolors(), second.get_facecolors())
    assert not np.allclose(first.get_facecolors(), third.get_facecolors())
    assert legend(ax).count("overhead-bound") == 1
    assert "compute-bound" in legend(ax)
    assert "memory-bound" not in legend(ax)


def test_plot_uses_gflops_for_a_slow_device() -> None:
    line = Roofline(200e9, 30e9)
    place(line, "mm", 200.0, 50.0)
    ax = drawn(line)
    assert ax.get_ylabel() == "achieved compute (GFLOP/s)"
    (offsets,) = [c.get_offsets() for c in ax.collections]
    assert float(offsets[0, 1]) == pytest.approx(100.0)
    lo, hi = ax.get_ylim()
    assert lo < 100.0 < 200.0 < hi


def test_plot_joins_runs_and_labels_their_ends() -> None:
    line = Roofline(10e12, 1e12)
    for k in (0.5, 2.0, 8.0, 32.0):
        place(line, f"k={k}", k, 50.0)
    place(line, "only", 1.0, 50.0)
    runs = {"matmul, k grows": [f"k={k}" for k in (0.5, 2.0, 8.0, 32.0)]}
    ax = drawn(line, runs | {"one": ["only"], "empty": []})
    (run,) = [ln for ln in ax.lines if ln.get_label() == "matmul, k grows"]
    assert list(run.get_xdata()) == pytest.approx([0.5, 2.0, 8.0, 32.0])
    assert "k=0.5" in texts(ax)
    assert "k=32.0" in texts(ax)
    assert "k=2.0" not in texts(ax)
    assert texts(ax).count("only") == 1
    assert "matmul, k grows" in legend(ax)
    assert {"memory-bound", "compute-bound"} <= set(legend(ax))


def test_plot_shows_points_above_the_roof() -> None:
    line = Roofline(10e12, 1e12)
    place(line, "above", 100.0, 1000.0)  # 10x the compute roof
    lo, hi = drawn(line).get_ylim()
    assert lo < 10.0 < 100.0 < hi  # the roof and the point, in TFLOP/s


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_an_operation_needs_positive_flop_and_bytes(bad) -> None:
    with pytest.raises(ValueError, match="flop must be"):
        Roofline(1e9, 1e9).add("a", bad, 1.0, timed(1.0))
    with pytest.raises(ValueError, match="nbytes must be"):
        Roofline(1e9, 1e9).add("a", 1.0, bad, timed(1.0))


# -- streaming_elements --------------------------------------------------------


def fake_largest(monkeypatch, answer: int) -> dict:
    """Make ``largest_size`` return ``answer``; the dict gets its arguments."""
    seen: dict = {}

    def largest(lo, hi, **kwargs):
        seen.update(kwargs, lo=lo, hi=hi)
        return answer

    monkeypatch.setattr(roofline, "largest_size", largest)
    return seen


def small(monkeypatch, on: bool) -> None:
    monkeypatch.setenv("GPUGUIDE_SMALL", "1" if on else "")


def test_streaming_elements_asks_for_four_float32_tensors(monkeypatch) -> None:
    small(monkeypatch, True)
    seen = fake_largest(monkeypatch, 2**20)
    assert streaming_elements(device="cpu") == 2**20
    assert (seen["lo"], seen["hi"], seen["device"]) == (2**12, 2**28, "cpu")
    # x, y, z and out in float32; z + x*y: 2 FLOP and 16 bytes per element.
    assert seen["memory_at"](1000) == 16_000
    assert seen["flop_at"](1000) == 2_000
    assert seen["traffic_at"](1000) == 16_000


@pytest.mark.parametrize(
    ("fits", "on", "expected"),
    [
        (2**20, False, 2**24),  # raised past the caches
        (2**26, False, 2**26),  # already larger
        (2**20, True, 2**20),  # small mode keeps what fits
    ],
)
def test_streaming_elements_floor_outside_small_mode(
    monkeypatch, fits: int, on: bool, expected: int
) -> None:
    small(monkeypatch, on)
    fake_largest(monkeypatch, fits)
    assert streaming_elements(device="cuda") == expected


@pytest.mark.parametrize(
    ("ceiling_bytes", "expected"),
    [
        (2**30, 2**28),  # a CPU with large caches: as large as its ceiling's tensors
        (2**20, 2**24),  # never below the floor
    ],
)
def test_streaming_elements_on_a_cpu_match_its_memory_ceiling(
    monkeypatch, ceiling_bytes: int, expected: int
) -> None:
    small(monkeypatch, False)
    fake_largest(monkeypatch, 2**20)
    asked = []
    monkeypatch.setattr(
        roofline, "streaming_bytes", lambda small: asked.append(small) or ceiling_bytes
    )
    assert streaming_elements(device="cpu") == expected
    assert asked == [False]
    assert streaming_elements(device="cuda") == 2**24
    small(monkeypatch, True)
    assert streaming_elements(device="cpu") == 2**20
    assert asked == [False]  # neither a GPU nor small mode asks


def test_streaming_elements_on_this_machine(monkeypatch) -> None:
    small(monkeypatch, False)
    n = streaming_elements(device="cpu")
    assert max(2**24, streaming_bytes(small=False) // 4) <= n
    assert n & (n - 1) == 0  # a power of two


# -- Roofline ------------------------------------------------------------------


def test_a_roofline_places_each_operation_by_its_share_of_its_roof() -> None:
    line = Roofline(10e12, 1e12)  # ridge at 10 FLOP/byte
    line.add("tiny", 1e3, 1e3, timed(1e-5))  # 1e8 FLOP/s of a 1e12 roof, 10 us
    line.add("stream", 1e9, 4e9, timed(5e-3))  # 2e11 of 2.5e11: 80%
    line.add("mm", 2e12, 1e9, timed(0.4))  # 5e12 of 1e13: 50%, right of the ridge
    assert line.ridge == pytest.approx(10)
    assert line.share("stream")["value"] == pytest.approx(0.8)
    low, high = line.share("stream")["spread"]
    assert low < 0.8 < high
    assert line.share("stream")["measured"].startswith("80% (")
    assert [line.regime(op) for op in ("tiny", "stream", "mm")] == [
        "overhead-bound",
        "memory-bound",
        "compute-bound",
    ]
    table = str(line)
    header, *rows = table.splitlines()[1:]
    assert header.split()[-6:] == ["FLOP", "per", "byte", "of", "roof", "regime"]
    assert [row.split()[-2] for row in rows[:3]] == ["0%", "80%", "50%"]
    assert "ridge: 10 FLOP/byte" in table
    assert "(datasheet)" in table


def test_measured_roofs_rise_to_the_best_operation() -> None:
    line = Roofline(1e9, 1e9, measured=True)
    line.add("roof", 8e9, 2e9, timed(0.5))  # 16 GFLOP/s, 4 GB/s: sets both roofs
    line.add("above", 1e9, 4e8, timed(1.0))  # 1 GFLOP/s at 2.5 FLOP/byte
    assert line.roofs == (pytest.approx(16e9), pytest.approx(4e9))
    assert "at the roof" in str(line)
    assert "lower bounds" in str(line)
    unknown = Roofline(None, None)
    unknown.add("only", 1e9, 1e9, timed(1.0))
    assert unknown.roofs == (pytest.approx(1e9), pytest.approx(1e9))


def test_an_operation_above_its_roof_is_named_under_the_table() -> None:
    line = Roofline(1e9, 1e9)
    line.add("fast", 4e9, 1e9, timed(1.0))  # 4 GFLOP/s on a 1 GFLOP/s roof
    assert "> roof" in str(line)
    assert "Above the roof: fast." in str(line)


def test_a_sweep_adds_one_operation_per_size_and_plots_as_a_run() -> None:
    sweep = Sweep(
        "mm", lambda k, dev: [], lo=1, hi=4, flop=lambda k: 1e6 * k,
        traffic=lambda k: 1e6,
    )  # fmt: skip
    result = SweepResult(sweep, [1, 2, 4], {"v": [timed(1e-3)] * 3}, {"v": "cpu"})
    line = Roofline(1e12, 1e11)
    assert line.add_sweep(result, "v", "k") == ["k=1", "k=2", "k=4"]
    assert line.point("k=4") == (pytest.approx(4), pytest.approx(4e9))
    line.add("alone", 1e6, 1e6, timed(1e-3))
    ax = drawn(line, {"k grows": ["k=1", "k=2", "k=4"]})
    assert "k grows" in [ln.get_label() for ln in ax.lines]
    assert "alone" in texts(ax)
    plt.close("all")
    with pytest.raises(ValueError, match="flop"):
        Roofline(1.0, 1.0).add_sweep(
            SweepResult(Sweep("t", lambda k, d: [], lo=1, hi=1, memory=int), [1],
                        {"v": [timed(1.0)]}, {"v": "cpu"}),
            "v", "k",
        )  # fmt: skip


def test_measure_times_a_call_and_places_it() -> None:
    line = Roofline(1e12, 1e11)
    x = torch.ones(1024)
    m = line.measure("add", torch.add, x, x, flop=1024, nbytes=12 * 1024)
    assert line.ops["add"][2] is m
    assert m.median_s > 0
    assert line.matmul in ("fp32", "tf32")
    assert Roofline.of("cpu").measured
