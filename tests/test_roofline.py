"""Tests for gpuguide.roofline: the model's arithmetic, the regime rule and the plot."""

from __future__ import annotations

import dataclasses
import math

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from gpuguide.device import describe_device
from gpuguide.roofline import (
    OVERHEAD_FRACTION,
    OVERHEAD_S,
    REGIMES,
    RooflinePoint,
    attainable_flops_per_s,
    classify,
    percent_of_roof,
    plot_roofline,
    ridge_intensity,
)
from gpuguide.timing import Measurement

CPU = describe_device("cpu")
#: A made-up device: 10 TFLOP/s and 1 TB/s, so the ridge is at 10 FLOP/byte.
PEAKS = {"peak_flops_per_s": 10e12, "peak_bytes_per_s": 1e12}


def point(intensity: float, percent: float, seconds: float, label: str = "op"):
    """A point at ``intensity`` reaching ``percent`` of the PEAKS roof."""
    roof = min(PEAKS["peak_flops_per_s"], intensity * PEAKS["peak_bytes_per_s"])
    flop = roof * percent / 100 * seconds
    return RooflinePoint(label, flop=flop, nbytes=flop / intensity, seconds=seconds)


# -- RooflinePoint -------------------------------------------------------------


def test_point_rates_and_intensity() -> None:
    p = RooflinePoint("add", flop=1e9, nbytes=12e9, seconds=0.01)
    assert p.intensity == pytest.approx(1 / 12)
    assert p.flops_per_s == pytest.approx(1e11)
    assert p.bytes_per_s == pytest.approx(1.2e12)
    assert str(p) == "add: 10.0 ms, 100 GFLOP/s, 1.20 TB/s, 0.0833 FLOP/byte"


def test_point_is_frozen_and_stores_floats() -> None:
    p = RooflinePoint("mm", flop=2, nbytes=3, seconds=1)
    assert isinstance(p.flop, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.flop = 5.0  # type: ignore[misc]


@pytest.mark.parametrize("field", ["flop", "nbytes", "seconds"])
@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_point_rejects_bad_numbers(field: str, bad: float) -> None:
    values = {"flop": 1.0, "nbytes": 1.0, "seconds": 1.0, field: bad}
    with pytest.raises(ValueError, match=field):
        RooflinePoint("x", **values)


def test_point_from_measurement_uses_the_median() -> None:
    m = Measurement("mm", (0.001, 0.002, 0.010), "cpu", "wall-clock")
    p = RooflinePoint.from_measurement("mm", flop=4e6, nbytes=1e6, measurement=m)
    assert p.seconds == pytest.approx(0.002)
    assert p.flops_per_s == pytest.approx(2e9)


# -- the roofs -----------------------------------------------------------------


def test_ridge_is_the_ratio_of_the_peaks() -> None:
    assert ridge_intensity(**PEAKS) == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("intensity", "roof"), [(0.1, 1e11), (1.0, 1e12), (10.0, 1e13), (1000.0, 1e13)]
)
def test_attainable_is_the_lower_roof(intensity: float, roof: float) -> None:
    assert attainable_flops_per_s(intensity, **PEAKS) == pytest.approx(roof)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"peak_flops_per_s": 0.0, "peak_bytes_per_s": 1e12},
        {"peak_flops_per_s": 1e12, "peak_bytes_per_s": -1.0},
        {"peak_flops_per_s": math.nan, "peak_bytes_per_s": 1e12},
    ],
)
def test_bad_peaks_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="peak_"):
        ridge_intensity(**kwargs)
    with pytest.raises(ValueError, match="peak_"):
        attainable_flops_per_s(1.0, **kwargs)


def test_attainable_rejects_a_bad_intensity() -> None:
    with pytest.raises(ValueError, match="intensity"):
        attainable_flops_per_s(0.0, **PEAKS)


def test_percent_of_roof() -> None:
    assert percent_of_roof(point(0.5, 40.0, 1e-3), **PEAKS) == pytest.approx(40.0)
    assert percent_of_roof(point(100.0, 80.0, 1e-3), **PEAKS) == pytest.approx(80.0)
    # Measured CPU peaks are lower bounds: a point may sit above its roof.
    assert percent_of_roof(point(1.0, 130.0, 1e-3), **PEAKS) == pytest.approx(130.0)


# -- classify ------------------------------------------------------------------


def test_regimes_are_the_three_names() -> None:
    assert REGIMES == ("overhead-bound", "memory-bound", "compute-bound")


@pytest.mark.parametrize(
    ("intensity", "percent", "seconds", "regime"),
    [
        (0.1, 1.0, 5e-6, "overhead-bound"),  # tiny and far below the roof
        (100.0, 1.0, 5e-6, "overhead-bound"),  # a tiny matmul too
        (0.1, 80.0, 5e-6, "memory-bound"),  # short but near the roof
        (0.1, 1.0, 1e-2, "memory-bound"),  # slow and long: the roof still bounds
        (0.1, 80.0, 1e-2, "memory-bound"),
        (9.9, 80.0, 1e-2, "memory-bound"),  # just left of the ridge
        (10.0, 80.0, 1e-2, "compute-bound"),  # at the ridge
        (500.0, 60.0, 1e-2, "compute-bound"),
    ],
)
def test_classify(intensity: float, percent: float, seconds: float, regime: str):
    assert classify(point(intensity, percent, seconds), **PEAKS) == regime


def test_classify_thresholds_are_strict_and_adjustable() -> None:
    edge_time = point(0.1, 1.0, OVERHEAD_S)
    assert classify(edge_time, **PEAKS) == "memory-bound"
    edge_fraction = point(0.1, 100 * OVERHEAD_FRACTION, 1e-6)
    assert classify(edge_fraction, **PEAKS) == "memory-bound"
    p = point(0.1, 30.0, 1e-4)
    assert classify(p, **PEAKS) == "memory-bound"
    loose = {"overhead_fraction": 0.5, "overhead_s": 1e-3}
    assert classify(p, **PEAKS, **loose) == "overhead-bound"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"overhead_fraction": 0.0}, "overhead_fraction"),
        ({"overhead_fraction": 1.5}, "overhead_fraction"),
        ({"overhead_s": 0.0}, "overhead_s"),
        ({"overhead_s": math.inf}, "overhead_s"),
    ],
)
def test_classify_rejects_bad_thresholds(kwargs: dict[str, float], match: str):
    with pytest.raises(ValueError, match=match):
        classify(point(1.0, 50.0, 1e-3), **PEAKS, **kwargs)


# -- plot_roofline -------------------------------------------------------------


def texts(ax: plt.Axes) -> list[str]:
    return [t.get_text() for t in ax.texts]


def roof_line(ax: plt.Axes):
    (line,) = [ln for ln in ax.lines if ln.get_label().startswith("roof:")]
    return line


def test_plot_roofline_draws_roof_ridge_and_points(ax: plt.Axes) -> None:
    points = [
        point(0.1, 1.0, 5e-6, "tiny add"),
        point(0.1, 80.0, 1e-2, "big add"),
        point(100.0, 70.0, 1e-2, "matmul"),
    ]
    plot_roofline(ax, points, **PEAKS, title="matmul is compute-bound", device=CPU)
    ax.figure.canvas.draw()
    assert ax.get_xscale() == "log"
    assert ax.get_yscale() == "log"
    assert ax.get_xlabel() == "arithmetic intensity (FLOP/byte)"
    assert ax.get_ylabel() == "achieved compute (TFLOP/s)"
    assert ax.get_title() == "matmul is compute-bound"
    # The roof: slanted up to the ridge (10 FLOP/byte), flat at 10 TFLOP/s.
    xs, ys = (np.asarray(v, dtype=float) for v in roof_line(ax).get_data())
    assert xs[1] == pytest.approx(10.0)
    assert ys[1:].tolist() == pytest.approx([10.0, 10.0])
    assert ys[0] == pytest.approx(xs[0] * 1.0)  # 1 TB/s x intensity, in TFLOP/s
    assert xs[0] <= 0.1 / 4 * 1.0001
    assert xs[-1] >= 100.0 * 4 * 0.9999
    ridge = [ln for ln in ax.lines if ln.get_linestyle() == ":"]
    assert len(ridge) == 1
    assert "ridge 10 FLOP/byte" in texts(ax)
    for p in points:
        assert p.label in texts(ax)
    # One legend entry per regime, markers at the points' coordinates.
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert set(REGIMES) <= set(legend)
    offsets = np.vstack([np.asarray(c.get_offsets()) for c in ax.collections])
    assert offsets[:, 0].tolist() == pytest.approx([p.intensity for p in points])
    assert offsets[:, 1].tolist() == pytest.approx(
        [p.flops_per_s / 1e12 for p in points]
    )
    labels = [t.get_text() for t in ax.figure.texts]
    assert f"measured on {CPU.short_name}" in labels


def test_plot_roofline_colours_points_by_regime(ax: plt.Axes) -> None:
    points = [point(0.1, 1.0, 5e-6, "a"), point(0.1, 1.0, 6e-6, "b")]
    plot_roofline(ax, points, **PEAKS, title="t", device=CPU)
    first, second = ax.collections
    assert np.allclose(first.get_facecolors(), second.get_facecolors())
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend.count("overhead-bound") == 1
    assert "memory-bound" not in legend


def test_plot_roofline_uses_gflops_for_a_slow_device(ax: plt.Axes) -> None:
    peaks = {"peak_flops_per_s": 200e9, "peak_bytes_per_s": 30e9}
    p = RooflinePoint("mm", flop=2e9, nbytes=1e7, seconds=0.02)
    plot_roofline(ax, [p], **peaks, title="t", device=CPU)
    assert ax.get_ylabel() == "achieved compute (GFLOP/s)"
    (offsets,) = [c.get_offsets() for c in ax.collections]
    assert float(offsets[0, 1]) == pytest.approx(100.0)
    lo, hi = ax.get_ylim()
    assert lo < 100.0 < 200.0 < hi


def test_plot_roofline_sweeps(ax: plt.Axes) -> None:
    run = [point(k, 50.0, 1e-3, f"k={k}") for k in (0.5, 2.0, 8.0, 32.0)]
    plot_roofline(
        ax, [], **PEAKS, title="t", device=CPU, sweeps={"matmul, k grows": run}
    )
    (line,) = [ln for ln in ax.lines if ln.get_label() == "matmul, k grows"]
    assert list(line.get_xdata()) == pytest.approx([p.intensity for p in run])
    assert "k=0.5" in texts(ax)
    assert "k=32.0" in texts(ax)
    assert "k=2.0" not in texts(ax)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "matmul, k grows" in legend
    assert {"memory-bound", "compute-bound"} <= set(legend)


def test_plot_roofline_sweep_of_one_point(ax: plt.Axes) -> None:
    only = point(1.0, 50.0, 1e-3, "only")
    plot_roofline(ax, [], **PEAKS, title="t", device=CPU, sweeps={"s": [only], "e": []})
    assert texts(ax).count("only") == 1


def test_plot_roofline_rejects_no_points_and_bad_peaks(ax: plt.Axes) -> None:
    with pytest.raises(ValueError, match="at least one point"):
        plot_roofline(ax, [], **PEAKS, title="t", device=CPU)
    p = point(1.0, 50.0, 1e-3)
    with pytest.raises(ValueError, match="peak_bytes_per_s"):
        plot_roofline(
            ax, [p], peak_flops_per_s=1e12, peak_bytes_per_s=0, title="t", device=CPU
        )


def test_plot_roofline_shows_points_above_the_roof(ax: plt.Axes) -> None:
    above = point(100.0, 1000.0, 1e-3, "above")  # 10x the compute roof
    plot_roofline(ax, [above], **PEAKS, title="t", device=CPU)
    lo, hi = ax.get_ylim()
    assert lo < 10.0 < 100.0 < hi  # the roof and the point, in TFLOP/s
