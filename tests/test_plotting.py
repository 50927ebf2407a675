"""Tests for gpuguide.plotting, asserting on the matplotlib objects (Agg backend)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.collections import PolyCollection
from matplotlib.container import BarContainer, ErrorbarContainer

from gpuguide import plotting
from gpuguide.device import describe_device
from gpuguide.plotting import (
    label_device,
    plot_bars,
    plot_sweep,
    style_axes,
)
from gpuguide.timing import Measurement

CPU = describe_device("cpu")
GPU = dataclasses.replace(
    CPU, type="cuda", name="NVIDIA H100 80GB HBM3", variant="H100 SXM5"
)


def meas(*times_s: float, label: str = "op") -> Measurement:
    return Measurement(label=label, times_s=times_s, device="cpu", method="wall-clock")


def device_texts(fig: plt.Figure) -> list[str]:
    return [t.get_text() for t in fig.texts if t.get_text().startswith("measured on ")]


def band_limits(collection: PolyCollection) -> tuple[float, float]:
    ys = np.concatenate([p.vertices[:, 1] for p in collection.get_paths()])
    return float(ys.min()), float(ys.max())


# -- require_unit --------------------------------------------------------------


@pytest.mark.parametrize("label", ["time (ms)", "bandwidth (GB/s)", "size (elements)"])
def test_require_unit_accepts(label: str) -> None:
    assert plotting._require_unit(label) == label


@pytest.mark.parametrize("label", ["time", "time ()", "time ( )", "", "ms)"])
def test_require_unit_rejects(label: str) -> None:
    with pytest.raises(ValueError, match="must name a unit"):
        plotting._require_unit(label)


def test_require_unit_rejects_non_strings() -> None:
    with pytest.raises(ValueError, match="must name a unit"):
        plotting._require_unit(None)  # type: ignore[arg-type]


# -- style_axes ----------------------------------------------------------------


def test_style_axes_sets_rcparams() -> None:
    style_axes()
    assert mpl.rcParams["axes.grid"] is True
    assert mpl.rcParams["figure.constrained_layout.use"] is True
    assert tuple(mpl.rcParams["figure.figsize"]) == (7.0, 4.5)
    assert 72 <= mpl.rcParams["figure.dpi"] <= 150
    colors = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
    assert len(colors) >= 6
    fig = plt.figure()
    assert tuple(fig.get_size_inches()) == (7.0, 4.5)


# -- label_device --------------------------------------------------------------


def test_label_device_writes_once_in_lower_right() -> None:
    fig = plt.figure()
    label_device(fig, CPU)
    label_device(fig, CPU)
    assert device_texts(fig) == [f"measured on {CPU.short_name}"]
    (text,) = [t for t in fig.texts if t.get_text().startswith("measured on")]
    x, y = text.get_position()
    assert x > 0.9
    assert y < 0.1
    assert text.get_horizontalalignment() == "right"


def test_label_device_replaces_the_label() -> None:
    fig = plt.figure()
    label_device(fig, CPU)
    label_device(fig, GPU)
    assert device_texts(fig) == ["measured on H100 SXM5"]


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_label_device_describes_devices(device: str | torch.device) -> None:
    fig = plt.figure()
    label_device(fig, device)
    assert device_texts(fig) == [f"measured on {CPU.short_name}"]
    assert CPU.short_name.startswith("CPU: ")


def test_label_device_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUGUIDE_DEVICE", "cpu")
    fig = plt.figure()
    label_device(fig, None)
    assert device_texts(fig) == [f"measured on {CPU.short_name}"]


# -- plot_sweep ----------------------------------------------------------------


def test_plot_sweep_measurements(ax: plt.Axes) -> None:
    x = [256, 512, 1024, 2048]
    fast = [meas(0.001, 0.002, 0.003) for _ in x]
    slow = [meas(0.010, 0.020, 0.030) for _ in x]
    plot_sweep(
        ax,
        x,
        {"fast": fast, "slow": slow},
        xlabel="size (elements)",
        ylabel="time (ms)",
        title="slow is 10x slower",
        device=CPU,
    )
    ax.figure.canvas.draw()
    assert ax.get_xscale() == "log"
    assert ax.get_yscale() == "log"
    assert ax.xaxis.get_transform().base == 2
    assert ax.get_xlabel() == "size (elements)"
    assert ax.get_ylabel() == "time (ms)"
    assert ax.get_title() == "slow is 10x slower"
    assert [line.get_label() for line in ax.lines] == ["fast", "slow"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["fast", "slow"]
    # Medians in ms, with one IQR band per series in the line's colour.
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [2.0] * 4)
    np.testing.assert_allclose(ax.lines[1].get_ydata(), [20.0] * 4)
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    assert band_limits(bands[0]) == pytest.approx((1.5, 2.5))
    assert band_limits(bands[1]) == pytest.approx((15.0, 25.0))
    np.testing.assert_allclose(
        bands[0].get_facecolor()[0][:3], mpl.colors.to_rgb(ax.lines[0].get_color())
    )
    assert device_texts(ax.figure) == [f"measured on {CPU.short_name}"]
    assert ax.figure.get_layout_engine() is not None
    assert ax.xaxis.get_gridlines()[0].get_visible()


def test_plot_sweep_floats_none_and_nonpositive(ax: plt.Axes) -> None:
    x = [1, 2, 4, 8]
    plot_sweep(
        ax,
        x,
        {"throughput": [10.0, None, 0.0, 40.0], "empty": [None] * 4},
        xlabel="batch (samples)",
        ylabel="throughput (samples/s)",
        title="t",
        device=GPU,
    )
    ax.figure.canvas.draw()
    # None and the non-positive point (no place on a log axis) are left out;
    # a series without points draws nothing.
    assert len(ax.lines) == 1
    np.testing.assert_allclose(ax.lines[0].get_xdata(), [1, 8])
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [10.0, 40.0])
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert device_texts(ax.figure) == ["measured on H100 SXM5"]


def test_plot_sweep_decreasing_value_transform(ax: plt.Axes) -> None:
    work = 1e9
    plot_sweep(
        ax,
        [1024, 2048],
        {"copy": [meas(0.1, 0.2, 0.3), meas(0.2, 0.4, 0.6)]},
        xlabel="size (MiB)",
        ylabel="bandwidth (GB/s)",
        title="t",
        device=CPU,
        value=lambda s: work / s / 1e9,
    )
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [5.0, 2.5])
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    lo, hi = band_limits(band)
    # Quartiles 0.15 s and 0.25 s become 6.67 and 4 GB/s: the band keeps both.
    assert lo == pytest.approx(1 / 0.5)
    assert hi == pytest.approx(1 / 0.15)


def test_plot_sweep_linear_axes_and_decimal_sizes(ax: plt.Axes) -> None:
    plot_sweep(
        ax,
        [0.5, 1.5],
        {"a": [-1.0, 2.0]},
        xlabel="size (GB)",
        ylabel="change (%)",
        title="t",
        device=CPU,
        logx=False,
        logy=False,
    )
    assert ax.get_xscale() == "linear"
    assert ax.get_yscale() == "linear"
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [-1.0, 2.0])


def test_plot_sweep_base_10_for_fractional_sizes(ax: plt.Axes) -> None:
    plot_sweep(
        ax,
        [0.5, 1.5, 4.5],
        {"a": [1.0, 2.0, 3.0]},
        xlabel="size (GB)",
        ylabel="time (ms)",
        title="t",
        device=CPU,
    )
    assert ax.xaxis.get_transform().base == 10


def test_plot_sweep_validates_before_drawing(ax: plt.Axes) -> None:
    with pytest.raises(ValueError, match="must name a unit"):
        plot_sweep(
            ax,
            [1],
            {"a": [1.0]},
            xlabel="size",
            ylabel="time (ms)",
            title="t",
            device=CPU,
        )
    with pytest.raises(ValueError, match="must name a unit"):
        plot_sweep(
            ax, [1], {"a": [1.0]}, xlabel="n (1)", ylabel="time", title="t", device=CPU
        )
    with pytest.raises(ValueError, match="must have 3 values, got 2"):
        plot_sweep(
            ax,
            [1, 2, 3],
            {"a": [1.0, 2.0]},
            xlabel="n (1)",
            ylabel="t (s)",
            title="t",
            device=CPU,
        )
    assert not ax.lines
    assert not device_texts(ax.figure)


# -- plot_bars -----------------------------------------------------------------


def ratio_texts(ax: plt.Axes) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_plot_bars_ratios_and_error_bars(ax: plt.Axes) -> None:
    values = {
        "eager": meas(0.009, 0.010, 0.011),
        "compiled": meas(0.0025, 0.0031, 0.0035),
    }
    plot_bars(ax, values, ylabel="time (ms)", title="compiled is 3x faster", device=CPU)
    ax.figure.canvas.draw()
    (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [b.get_height() for b in bars] == pytest.approx([10.0, 3.1])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["eager", "compiled"]
    assert ratio_texts(ax) == ["1.00x", "0.31x"]
    assert any(isinstance(c, ErrorbarContainer) for c in ax.containers)
    assert ax.get_ylabel() == "time (ms)"
    assert ax.get_title() == "compiled is 3x faster"
    assert device_texts(ax.figure) == [f"measured on {CPU.short_name}"]
    # Each ratio sits above its bar's error bar.
    for text, top in zip(ax.texts, [10.5, 3.3], strict=True):
        assert text.xy[1] == pytest.approx(top)


def test_plot_bars_named_baseline_and_floats(ax: plt.Axes) -> None:
    values = {"pageable": 12.0, "pinned": 24.0, "pinned + non_blocking": 36.0}
    plot_bars(
        ax,
        values,
        ylabel="bandwidth (GB/s)",
        title="t",
        device="cpu",
        baseline="pinned",
    )
    assert ratio_texts(ax) == ["0.5x", "1.00x", "1.5x"]
    assert not any(isinstance(c, ErrorbarContainer) for c in ax.containers)
    # Long names are slanted so that they do not overlap.
    assert ax.get_xticklabels()[0].get_rotation() == pytest.approx(20)


def test_plot_bars_value_transform(ax: plt.Axes) -> None:
    values = {"a": meas(0.002), "b": meas(0.001)}
    plot_bars(
        ax,
        values,
        ylabel="throughput (calls/s)",
        title="t",
        device=CPU,
        value=lambda s: 1 / s,
    )
    (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [b.get_height() for b in bars] == pytest.approx([500.0, 1000.0])
    assert ratio_texts(ax) == ["1.00x", "2.00x"]


def test_plot_bars_zero_baseline(ax: plt.Axes) -> None:
    plot_bars(ax, {"zero": 0.0, "one": 1.0}, ylabel="time (ms)", title="t", device=CPU)
    assert ratio_texts(ax) == ["n/a", "n/a"]


def test_plot_bars_rejects_bad_input(ax: plt.Axes) -> None:
    with pytest.raises(ValueError, match="must name a unit"):
        plot_bars(ax, {"a": 1.0}, ylabel="time", title="t", device=CPU)
    with pytest.raises(ValueError, match="at least one bar"):
        plot_bars(ax, {}, ylabel="time (ms)", title="t", device=CPU)
    with pytest.raises(ValueError, match=r"baseline must be one of .*got 'c'"):
        plot_bars(
            ax, {"a": 1.0}, ylabel="time (ms)", title="t", device=CPU, baseline="c"
        )
    assert not ax.patches


def test_device_label_gets_its_own_strip_below_the_axes() -> None:
    fig, axes = plt.subplots(1, 2)
    for ax in axes:
        plot_bars(ax, {"a": 1.0, "b": 2.0}, ylabel="time (ms)", title="t", device="cpu")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    label = next(t for t in fig.texts if t.get_text().startswith("measured on"))
    box = label.get_window_extent(renderer)
    for ax in axes:
        for tick in ax.get_xticklabels():
            assert not box.overlaps(tick.get_window_extent(renderer)), tick
    plt.close(fig)


def test_plots_name_the_picked_device_by_default(monkeypatch, ax) -> None:
    # Whatever pick_device picks is what the figure names, not a fixed device.
    monkeypatch.setattr(plotting, "pick_device", lambda: "picked")
    monkeypatch.setattr(
        plotting, "describe_device", lambda d: SimpleNamespace(short_name=f"{d} GPU")
    )
    plot_sweep(
        ax, [1, 2], {"a": [1.0, 2.0]}, xlabel="n (count)", ylabel="t (ms)", title="t"
    )
    assert device_texts(ax.figure) == ["measured on picked GPU"]
    fig, bar_ax = plt.subplots()
    plot_bars(bar_ax, {"a": 1.0}, ylabel="t (ms)", title="t")
    assert device_texts(fig) == ["measured on picked GPU"]
    plot_bars(bar_ax, {"a": 1.0}, ylabel="t (ms)", title="t", device=CPU)
    assert device_texts(fig) == [f"measured on {CPU.short_name}"]


# -- recording a sweep ---------------------------------------------------------------


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch, fresh_results: None):
    """plot_sweep(record=...) of a page named plot_demo; what it recorded."""
    from gpuguide import results

    monkeypatch.setattr("sys.argv", ["/x/examples/01_a/plot_demo.py"])
    return results.recorded


@pytest.mark.parametrize(
    ("label", "unit", "scale"),
    [
        ("time (ms)", "s", 1e-3),
        ("time (s)", "s", 1.0),
        ("time per call (us)", "s", 1e-6),
        ("time (\N{MICRO SIGN}s)", "s", 1e-6),
        ("time (ns) ", "s", 1e-9),
        ("bandwidth (GB/s)", "B/s", 1e9),
        ("bandwidth (GiB/s)", "B/s", 2.0**30),
        ("throughput (TFLOP/s)", "FLOP/s", 1e12),
        ("work (GFLOP)", "FLOP", 1e9),
        ("memory (MiB)", "B", 2.0**20),
        ("memory (KiB)", "B", 2.0**10),
        ("speed-up (x)", "x", 1.0),
        ("share of peak (%)", "%", 1.0),
        # Binary prefixes are for bytes only; anything else is its own unit.
        ("time (Mis)", "Mis", 1.0),
        ("rate (GiFLOP/s)", "GiFLOP/s", 1.0),
        ("size (elements)", "elements", 1.0),
    ],
)
def test_a_recorded_sweep_is_in_the_base_unit_of_its_axis(
    ax: plt.Axes, recording, label: str, unit: str, scale: float
) -> None:
    plot_sweep(ax, [4], {"a": [1.0]}, xlabel="n (x)", ylabel=label, title="t",
               device="cpu", record="sweep")  # fmt: skip
    (point,) = recording()
    assert point.unit == unit
    assert point.value == pytest.approx(scale, rel=1e-12)


def test_a_sweep_recorded_needs_its_unit_at_the_end_of_the_label(
    ax: plt.Axes, recording
) -> None:
    with pytest.raises(ValueError, match="must end with a unit in parentheses"):
        plot_sweep(ax, [4], {"a": [1.0]}, xlabel="n (x)", ylabel="time (ms) per call",
                   title="t", device="cpu", record="sweep")  # fmt: skip


def test_plot_sweep_records_every_point_with_its_spread(
    ax: plt.Axes, recording
) -> None:
    fast = Measurement("m", (1e-3, 2e-3, 3e-3, 4e-3, 5e-3), "cpu", "wall-clock")
    plot_sweep(
        ax,
        [256, 512, 1024],
        {"fp32 (eager)": [fast, fast, fast], "bf16": [0.5, None, 2.0]},
        xlabel="size (elements)",
        ylabel="time (ms)",
        title="t",
        device="cpu",
        record="demo sweep",
    )
    got = {(r.config["series"], r.x): r for r in recording()}
    assert sorted(got) == [
        ("bf16", 256.0),
        ("bf16", 1024.0),
        ("fp32", 256.0),
        ("fp32", 512.0),
        ("fp32", 1024.0),
    ]  # each series named by its label up to " ("
    assert {(r.page, r.name, r.unit) for r in got.values()} == {
        ("plot_demo", "demo sweep", "s")
    }
    point = got["fp32", 512.0]
    assert point.value == pytest.approx(3e-3)
    assert point.spread == pytest.approx((2e-3, 4e-3))
    assert got["bf16", 1024.0].value == pytest.approx(2e-3)
    assert got["bf16", 1024.0].spread is None
    # Nothing but this run's curves is drawn.
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "fp32 (eager)",
        "bf16",
    ]


def test_plot_sweep_without_record_records_nothing(ax: plt.Axes, recording) -> None:
    plot_sweep(ax, [1.0], {"a": [1.0]}, xlabel="n (x)", ylabel="t (ms)", title="t",
               device="cpu")  # fmt: skip
    assert recording() == ()


# -- log axes: plain tick labels -------------------------------------------------------


def tick_texts(ax, which: str = "y") -> list[str]:
    """The labels matplotlib draws on ``ax``'s axis, major and minor, non-empty."""
    ax.figure.canvas.draw()
    axis = ax.yaxis if which == "y" else ax.xaxis
    ticks = axis.get_majorticklabels() + axis.get_minorticklabels()
    return [t.get_text() for t in ticks if t.get_text()]


@pytest.mark.parametrize(
    ("low", "high", "shown"),
    [
        (50, 90, {"60", "100"}),  # under a decade: minor ticks labelled, as 60
        (0.001, 2e6, {"0.01", "1", "100", "10 k", "1 M"}),
        (2e4, 9e4, {"20 k", "60 k"}),
    ],
)
def test_log_axis_labels_ticks_as_plain_numbers(low, high, shown) -> None:
    fig, ax = plt.subplots()
    ax.plot([1, 2], [low, high])
    plotting._log_axis(ax, "y")
    texts = tick_texts(ax)
    assert shown <= set(texts), texts
    assert not [t for t in texts if "times" in t or "^" in t or "e+" in t], texts
    assert ax.get_yscale() == "log"
    plt.close(fig)


def test_a_base_2_log_axis_counts_in_binary_prefixes() -> None:
    fig, ax = plt.subplots()
    ax.plot([16, 2**22], [1, 2])
    plotting._log_axis(ax, "x", base=2)
    texts = tick_texts(ax, "x")
    assert {"32", "512", "8 Ki", "2 Mi"} <= set(texts), texts
    assert not [t for t in texts if "^" in t], texts
    plt.close(fig)


def test_plot_sweep_and_a_styled_plain_log_axis_have_plain_labels() -> None:
    fig, ax = plt.subplots()
    plot_sweep(
        ax, [1024, 4096, 16384], {"copy": [60.0, 70.0, 80.0]}, xlabel="n (elements)",
        ylabel="time (ms)", title="t", device=CPU,
    )  # fmt: skip
    assert "1 Ki" in tick_texts(ax, "x")
    assert "60" in tick_texts(ax, "y")
    plt.close(fig)
    # A page's own ax.set_yscale("log") under the style: 60, not 6x10^1.
    with mpl.rc_context():
        style_axes()
        fig, ax = plt.subplots()
        ax.plot([1, 2], [50, 90])
        ax.set_yscale("log")
        texts = tick_texts(ax)
        plt.close(fig)
    assert "$\\mathdefault{60}$" in texts, texts
    assert not [t for t in texts if "times" in t], texts


def test_setup_applies_the_style_before_a_page_draws(monkeypatch) -> None:
    import gpuguide

    monkeypatch.setenv("GPUGUIDE_DEVICE", "cpu")
    with mpl.rc_context():
        mpl.rcdefaults()  # as sphinx-gallery leaves matplotlib before each page
        gpuguide.setup()
        fig, ax = plt.subplots()  # plain matplotlib, as a page draws
        assert tuple(fig.get_size_inches()) == (7.0, 4.5)
        assert not ax.spines["top"].get_visible()
        assert fig.get_layout_engine() is not None
        assert ax.xaxis.get_gridlines()[0].get_visible()
        plt.close(fig)
