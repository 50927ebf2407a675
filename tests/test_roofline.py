"""Tests for gpuguide.chapters.roofline: the roofline plot and the streaming size."""

from __future__ import annotations

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from gpuguide.chapters import roofline
from gpuguide.chapters.roofline import (
    REGIMES,
    STREAMING_MIN_ELEMENTS,
    Roofline,
    plot_roofline,
    streaming_elements,
)
from gpuguide.device import describe_device
from gpuguide.peaks import streaming_bytes
from gpuguide.sweeps import Sweep, SweepResult
from gpuguide.timing import Measurement

CPU = describe_device("cpu")
#: A made-up device: 10 TFLOP/s and 1 TB/s, so the ridge is at 10 FLOP/byte.
PEAKS = {"peak_flops_per_s": 10e12, "peak_bytes_per_s": 1e12}


def point(intensity: float, percent: float, label: str = "op"):
    """A point at ``intensity`` reaching ``percent`` of the PEAKS roof."""
    roof = min(PEAKS["peak_flops_per_s"], intensity * PEAKS["peak_bytes_per_s"])
    return label, (intensity, roof * percent / 100)


# -- plot_roofline -------------------------------------------------------------


def by_intensity(points) -> dict[str, str]:
    """Each point's regime by the ridge of PEAKS alone (the page adds overhead)."""
    return {
        label: "memory-bound" if intensity < 10 else "compute-bound"
        for label, (intensity, _) in points.items()
    }


def texts(ax: plt.Axes) -> list[str]:
    return [t.get_text() for t in ax.texts]


def roof_line(ax: plt.Axes):
    (line,) = [ln for ln in ax.lines if ln.get_label().startswith("roof:")]
    return line


def test_plot_roofline_draws_roof_ridge_and_points(ax: plt.Axes) -> None:
    points = dict(
        [point(0.1, 1.0, "tiny add"), point(0.1, 80.0, "big add"), point(100.0, 70.0, "matmul")]
    )  # fmt: skip
    regimes = by_intensity(points) | {"tiny add": "overhead-bound"}
    plot_roofline(
        ax,
        points,
        regimes=regimes,
        **PEAKS,
        title="matmul is compute-bound",
        device=CPU,
    )
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
    for label in points:
        assert label in texts(ax)
    # One legend entry per regime, markers at the points' coordinates.
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert set(REGIMES) <= set(legend)
    offsets = np.vstack([np.asarray(c.get_offsets()) for c in ax.collections])
    assert offsets[:, 0].tolist() == pytest.approx([x for x, _ in points.values()])
    assert offsets[:, 1].tolist() == pytest.approx(
        [rate / 1e12 for _, rate in points.values()]
    )
    labels = [t.get_text() for t in ax.figure.texts]
    assert f"measured on {CPU.short_name}" in labels


def test_plot_roofline_colours_points_by_regime(ax: plt.Axes) -> None:
    points = dict([point(0.1, 1.0, "a"), point(0.1, 2.0, "b"), point(5, 1, "c")])
    regimes = {"a": "overhead-bound", "b": "overhead-bound", "c": "compute-bound"}
    plot_roofline(ax, points, regimes=regimes, **PEAKS, title="t", device=CPU)
    first, second, third = ax.collections
    assert np.allclose(first.get_facecolors(), second.get_facecolors())
    assert not np.allclose(first.get_facecolors(), third.get_facecolors())
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend.count("overhead-bound") == 1
    assert "compute-bound" in legend  # as the page said, not by its intensity
    assert "memory-bound" not in legend


@pytest.mark.parametrize("regimes", [{}, {"a": "bandwidth-bound"}])
def test_plot_roofline_needs_a_known_regime_for_every_point(ax, regimes) -> None:
    with pytest.raises(ValueError, match=r"regimes must give each point.*\['a'\]"):
        plot_roofline(
            ax, dict([point(1, 1, "a")]), regimes=regimes, **PEAKS, title="t", device=CPU
        )  # fmt: skip


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
@pytest.mark.parametrize("where", [0, 1])
def test_plot_roofline_rejects_a_point_that_is_not_positive(ax, bad, where) -> None:
    value = [1.0, 1e9]
    value[where] = bad
    with pytest.raises(ValueError, match="'a' must be a finite number > 0"):
        plot_roofline(
            ax, {"a": tuple(value)}, regimes={"a": "memory-bound"}, **PEAKS,
            title="t", device=CPU,
        )  # fmt: skip


def test_plot_roofline_uses_gflops_for_a_slow_device(ax: plt.Axes) -> None:
    peaks = {"peak_flops_per_s": 200e9, "peak_bytes_per_s": 30e9}
    plot_roofline(
        ax, {"mm": (200.0, 100e9)}, regimes={"mm": "compute-bound"}, **peaks,
        title="t", device=CPU,
    )  # fmt: skip
    assert ax.get_ylabel() == "achieved compute (GFLOP/s)"
    (offsets,) = [c.get_offsets() for c in ax.collections]
    assert float(offsets[0, 1]) == pytest.approx(100.0)
    lo, hi = ax.get_ylim()
    assert lo < 100.0 < 200.0 < hi


def test_plot_roofline_sweeps(ax: plt.Axes) -> None:
    run = dict(point(k, 50.0, f"k={k}") for k in (0.5, 2.0, 8.0, 32.0))
    plot_roofline(
        ax,
        {},
        regimes=by_intensity(run),
        **PEAKS,
        title="t",
        device=CPU,
        sweeps={"matmul, k grows": run},
    )
    (line,) = [ln for ln in ax.lines if ln.get_label() == "matmul, k grows"]
    assert list(line.get_xdata()) == pytest.approx([x for x, _ in run.values()])
    assert "k=0.5" in texts(ax)
    assert "k=32.0" in texts(ax)
    assert "k=2.0" not in texts(ax)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "matmul, k grows" in legend
    assert {"memory-bound", "compute-bound"} <= set(legend)


def test_plot_roofline_sweep_of_one_point(ax: plt.Axes) -> None:
    only = dict([point(1.0, 50.0, "only")])
    plot_roofline(
        ax, {}, regimes=by_intensity(only), **PEAKS, title="t", device=CPU,
        sweeps={"s": only, "e": {}},
    )  # fmt: skip
    assert texts(ax).count("only") == 1


def test_plot_roofline_rejects_no_points_and_bad_peaks(ax: plt.Axes) -> None:
    with pytest.raises(ValueError, match="at least one point"):
        plot_roofline(ax, {}, regimes={}, **PEAKS, title="t", device=CPU)
    p = dict([point(1.0, 50.0)])
    with pytest.raises(ValueError, match="peak_bytes_per_s"):
        plot_roofline(
            ax, p, regimes=by_intensity(p), peak_flops_per_s=1e12,
            peak_bytes_per_s=0, title="t", device=CPU,
        )  # fmt: skip


def test_plot_roofline_shows_points_above_the_roof(ax: plt.Axes) -> None:
    above = dict([point(100.0, 1000.0, "above")])  # 10x the compute roof
    plot_roofline(
        ax, above, regimes=by_intensity(above), **PEAKS, title="t", device=CPU
    )
    lo, hi = ax.get_ylim()
    assert lo < 10.0 < 100.0 < hi  # the roof and the point, in TFLOP/s


# -- streaming_elements --------------------------------------------------------


def fake_largest(monkeypatch, answer: int) -> dict:
    """Make ``largest_size`` return ``answer``; the dict gets its arguments."""
    seen: dict = {}

    def largest(lo, hi, **kwargs):
        seen.update(kwargs, lo=lo, hi=hi)
        return answer

    monkeypatch.setattr(roofline, "largest_size", largest)
    return seen


def test_streaming_elements_asks_for_four_float32_tensors(monkeypatch) -> None:
    seen = fake_largest(monkeypatch, 2**20)
    assert streaming_elements(device="cpu", small=True) == 2**20
    assert (seen["lo"], seen["hi"], seen["device"]) == (2**12, 2**28, "cpu")
    # x, y, z and out in float32; z + x*y: 2 FLOP and 16 bytes per element.
    assert seen["memory_at"](1000) == 16_000
    assert seen["flop_at"](1000) == 2_000
    assert seen["traffic_at"](1000) == 16_000


@pytest.mark.parametrize(
    ("fits", "small", "expected"),
    [
        (2**20, False, STREAMING_MIN_ELEMENTS),  # raised past the caches
        (2**26, False, 2**26),  # already larger
        (2**20, True, 2**20),  # small mode keeps what fits
    ],
)
def test_streaming_elements_floor_outside_small_mode(
    monkeypatch, fits: int, small: bool, expected: int
) -> None:
    fake_largest(monkeypatch, fits)
    assert streaming_elements(device="cuda", small=small) == expected


@pytest.mark.parametrize(
    ("ceiling_bytes", "expected"),
    [
        (2**30, 2**28),  # a CPU with large caches: as large as its ceiling's tensors
        (2**20, STREAMING_MIN_ELEMENTS),  # never below the floor
    ],
)
def test_streaming_elements_on_a_cpu_match_its_memory_ceiling(
    monkeypatch, ceiling_bytes: int, expected: int
) -> None:
    fake_largest(monkeypatch, 2**20)
    asked = []
    monkeypatch.setattr(
        roofline, "streaming_bytes", lambda small: asked.append(small) or ceiling_bytes
    )
    assert streaming_elements(device="cpu", small=False) == expected
    assert asked == [False]
    assert streaming_elements(device="cuda", small=False) == STREAMING_MIN_ELEMENTS
    assert streaming_elements(device="cpu", small=True) == 2**20
    assert asked == [False]  # neither a GPU nor small mode asks


@pytest.mark.parametrize(("env", "expected"), [("1", 2**14), ("", 2**24)])
def test_streaming_elements_follows_small_mode_by_default(
    monkeypatch, env: str, expected: int
) -> None:
    monkeypatch.setenv("GPUGUIDE_SMALL", env)
    fake_largest(monkeypatch, 2**14)
    assert streaming_elements(device="cuda") == expected


def test_streaming_elements_on_this_machine() -> None:
    n = streaming_elements(device="cpu", small=False)
    assert max(STREAMING_MIN_ELEMENTS, streaming_bytes(small=False) // 4) <= n
    assert n & (n - 1) == 0  # a power of two
    assert STREAMING_MIN_ELEMENTS == 2**24


# -- Roofline ------------------------------------------------------------------


def timed(seconds: float, label: str = "op") -> Measurement:
    return Measurement(
        label, (seconds * 0.9, seconds, seconds * 1.1), "cpu", "wall-clock"
    )


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
    table = line.table()
    assert table.header[4] == "FLOP per byte"
    assert table.header[-1] == "regime"
    assert [row[5] for row in table.rows] == ["0%", "80%", "50%"]
    assert "ridge: 10 FLOP/byte" in str(table.title)
    assert "(datasheet)" in str(table.title)


def test_measured_roofs_rise_to_the_best_operation() -> None:
    line = Roofline(1e9, 1e9, measured=True)
    line.add("roof", 8e9, 2e9, timed(0.5))  # 16 GFLOP/s, 4 GB/s: sets both roofs
    line.add("above", 1e9, 4e8, timed(1.0))  # 1 GFLOP/s at 2.5 FLOP/byte
    assert line.roofs == (pytest.approx(16e9), pytest.approx(4e9))
    assert line.table().rows[0][5] == "at the roof"
    assert "lower bounds" in str(line.table().title)
    unknown = Roofline(None, None)
    unknown.add("only", 1e9, 1e9, timed(1.0))
    assert unknown.roofs == (pytest.approx(1e9), pytest.approx(1e9))


def test_an_operation_above_its_roof_is_named_under_the_table() -> None:
    line = Roofline(1e9, 1e9)
    line.add("fast", 4e9, 1e9, timed(1.0))  # 4 GFLOP/s on a 1 GFLOP/s roof
    assert line.table().rows[0][5] == "> roof"
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
    _, ax = plt.subplots()
    line.plot(ax, title="t", runs={"k grows": ["k=1", "k=2", "k=4"]})
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
