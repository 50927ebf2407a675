"""Tests for gpuguide.chapters.timeline: spans, busy and overlapping time, the plot."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from gpuguide.chapters.timeline import (
    NO_OVERLAP,
    Span,
    TimelineRecorder,
    busy_s,
    overlap_s,
    plot_timeline,
    record_timeline,
    stage_overlap,
    synchronize,
)
from gpuguide.plotting import COLORS
from gpuguide.timing import Measurement

COPY, COMPUTE = "copy stream", "compute stream"


def pipeline() -> list[Span]:
    """Two chunks: copy in, compute, copy out, the second copy-in overlapping."""
    return [
        Span(COPY, "H2D", 0.000, 0.002),
        Span(COPY, "H2D", 0.002, 0.004),
        Span(COMPUTE, "compute", 0.002, 0.005),
        Span(COPY, "D2H", 0.005, 0.006),
        Span(COMPUTE, "compute", 0.005, 0.008),
        Span(COPY, "D2H", 0.008, 0.009),
    ]


# -- Span ----------------------------------------------------------------------


def test_span_duration_and_float_times() -> None:
    span = Span("lane", "work", 1, 3)
    assert span.duration_s == 2.0
    assert isinstance(span.start_s, float)
    assert isinstance(span.end_s, float)


def test_span_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Span("lane", "work", 0.0, 1.0).end_s = 2.0  # type: ignore[misc]


def test_span_allows_zero_length() -> None:
    assert Span("lane", "work", 0.5, 0.5).duration_s == 0.0


@pytest.mark.parametrize(
    ("lane", "label", "start", "end", "match"),
    [
        ("", "work", 0.0, 1.0, "lane"),
        ("lane", "", 0.0, 1.0, "label"),
        (None, "work", 0.0, 1.0, "lane"),
        ("lane", "work", math.nan, 1.0, "finite"),
        ("lane", "work", 0.0, math.inf, "finite"),
        ("lane", "work", 2.0, 1.0, "end_s must be >= start_s"),
    ],
)
def test_span_rejects(lane, label, start, end, match) -> None:
    with pytest.raises(ValueError, match=match):
        Span(lane, label, start, end)


# -- record_timeline -----------------------------------------------------------


class FakeClock:
    """Advances by one second per reading."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class FakeEvent:
    """A CUDA event stand-in: ``record`` stamps the time of a shared fake GPU."""

    gpu_ms = 0.0
    recorded: ClassVar[list[FakeEvent]] = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.ms: float | None = None

    def record(self, stream: object = None) -> None:
        FakeEvent.gpu_ms += 2.0
        self.ms = FakeEvent.gpu_ms
        FakeEvent.recorded.append(self)

    def elapsed_time(self, other: FakeEvent) -> float:
        assert self.ms is not None
        assert other.ms is not None
        return other.ms - self.ms


def test_record_on_host_reads_the_clock_after_synchronizing() -> None:
    syncs: list[float] = []
    clock = FakeClock()
    rec = TimelineRecorder(
        "cpu", clock=clock, synchronize=lambda: syncs.append(clock.now)
    )
    with rec:  # origin read at 101
        with rec.span("CPU", "copy"):  # 102 .. 103
            pass
        with rec.span("CPU", "compute"):  # 104 .. 105
            pass
    assert rec.spans == [
        Span("CPU", "copy", 1.0, 2.0),
        Span("CPU", "compute", 3.0, 4.0),
    ]
    # once on entering, before each of the four readings, once on leaving
    assert len(syncs) == 1 + 1 + 4 + 1


def test_record_on_cuda_uses_events_relative_to_the_origin() -> None:
    FakeEvent.gpu_ms, FakeEvent.recorded = 0.0, []
    syncs: list[int] = []
    rec = TimelineRecorder(
        "cuda", event_factory=FakeEvent, synchronize=lambda: syncs.append(1)
    )
    with rec:  # origin at 2 ms
        with rec.span("copy stream", "copy in"):  # 4 .. 6 ms
            pass
        with rec.span("compute stream", "compute"):  # 8 .. 10 ms
            pass
        assert rec.spans == []  # filled on leaving
    assert len(FakeEvent.recorded) == 5
    assert rec.spans[0] == Span("copy stream", "copy in", 0.002, 0.004)
    assert rec.spans[1].start_s == pytest.approx(0.006)
    assert rec.spans[1].end_s == pytest.approx(0.008)
    assert len(syncs) == 2  # entering and leaving, not per event


def test_a_disabled_recorder_records_nothing() -> None:
    calls: list[int] = []
    rec = record_timeline("cpu", enabled=False)
    rec._synchronize = lambda: calls.append(1)
    with rec.span("CPU", "work"):  # fine outside `with rec:` too
        pass
    with rec, rec.span("CPU", "work"):
        pass
    assert rec.spans == []
    assert calls == []
    assert "disabled" in repr(rec)


def test_span_outside_the_with_block_is_an_error() -> None:
    rec = record_timeline("cpu")
    with pytest.raises(RuntimeError, match="inside"), rec.span("CPU", "work"):
        pass


def test_recorder_is_reusable_and_starts_empty() -> None:
    rec = TimelineRecorder("cpu", clock=FakeClock(), synchronize=lambda: None)
    with rec, rec.span("CPU", "a"):
        pass
    with rec, rec.span("CPU", "b"):
        pass
    assert [s.label for s in rec.spans] == ["b"]
    assert "1 spans" in repr(rec)


def test_recorder_keeps_no_spans_after_an_exception() -> None:
    rec = TimelineRecorder("cpu", clock=FakeClock(), synchronize=lambda: None)

    def fail() -> None:
        with rec, rec.span("CPU", "a"):
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fail()
    assert rec.spans == []


class DeviceEvent:
    """``torch.Event`` stand-in: remembers its device, records like FakeEvent."""

    made: ClassVar[list[DeviceEvent]] = []

    def __init__(self, device: object = None, *, enable_timing: bool = False) -> None:
        assert enable_timing
        self.device, self.ms = device, None
        DeviceEvent.made.append(self)

    def record(self, stream: object = None) -> None:
        self.ms = 2.0 * len(DeviceEvent.made)

    def elapsed_time(self, other: DeviceEvent) -> float:
        return other.ms - self.ms


def test_cuda_recorder_uses_torch_event_on_the_device_where_torch_has_it(
    monkeypatch,
) -> None:
    import torch

    DeviceEvent.made = []
    monkeypatch.setattr(torch, "Event", DeviceEvent, raising=False)
    rec = TimelineRecorder("cuda:1", synchronize=lambda: None)
    with rec, rec.span("s", "work"):
        pass
    assert len(DeviceEvent.made) == 3
    assert {e.device for e in DeviceEvent.made} == {torch.device("cuda:1")}
    assert rec.spans[0].duration_s == pytest.approx(0.002)


def test_cuda_recorder_falls_back_to_torch_cuda_event(monkeypatch) -> None:
    import torch

    FakeEvent.gpu_ms, FakeEvent.recorded = 0.0, []
    monkeypatch.delattr(torch, "Event", raising=False)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    rec = TimelineRecorder("cuda", synchronize=lambda: None)
    with rec, rec.span("s", "work"):
        pass
    assert len(FakeEvent.recorded) == 3


def test_synchronize_prefers_torch_accelerator_for_a_gpu(monkeypatch) -> None:
    import torch

    calls: list[object] = []
    monkeypatch.setattr(
        torch.accelerator, "synchronize", lambda device=None: calls.append(device)
    )
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("cuda module"))
    synchronize("cuda:0")
    assert calls == [torch.device("cuda:0")]
    synchronize("cpu")  # the CPU is no accelerator: torch.cpu.synchronize
    assert calls == [torch.device("cuda:0")]


def test_synchronize_falls_back_to_the_device_module(monkeypatch) -> None:
    import torch

    calls: list[str] = []
    monkeypatch.delattr(torch.accelerator, "synchronize")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("cuda"))
    synchronize("cuda")
    assert calls == ["cuda"]


def test_recorder_synchronizes_its_device_by_default(monkeypatch) -> None:
    import torch

    calls: list[object] = []
    monkeypatch.setattr(
        torch.accelerator, "synchronize", lambda device=None: calls.append(device)
    )
    with TimelineRecorder("mps", clock=FakeClock()) as rec, rec.span("s", "w"):
        pass
    assert calls
    assert set(calls) == {torch.device("mps")}


def test_record_timeline_measures_real_cpu_work() -> None:
    import torch

    a = torch.ones(128, 128)
    with record_timeline("cpu") as rec:
        with rec.span("CPU", "matmul"):
            a @ a
        with rec.span("CPU", "add"):
            a + a
    first, second = rec.spans
    assert 0.0 <= first.start_s <= first.end_s <= second.start_s <= second.end_s


# -- busy_s and overlap_s ------------------------------------------------------


def test_busy_merges_overlapping_spans_of_a_lane() -> None:
    spans = [Span("a", "x", 0.0, 2.0), Span("a", "y", 1.0, 3.0), Span("a", "x", 5, 6)]
    assert busy_s(spans, "a") == pytest.approx(4.0)


def test_busy_of_one_lane_and_of_all() -> None:
    spans = pipeline()
    assert busy_s(spans, COPY) == pytest.approx(0.006)
    assert busy_s(spans, COMPUTE) == pytest.approx(0.006)
    assert busy_s(spans) == pytest.approx(0.009)
    assert busy_s(spans, "nobody") == 0.0


def test_overlap_of_a_pipeline() -> None:
    # copy busy [0, 4] + [5, 6] + [8, 9]; compute busy [2, 8] -> [2, 4] + [5, 6]
    spans = pipeline()
    assert overlap_s(spans, COPY, COMPUTE) == pytest.approx(0.003)
    assert overlap_s(spans, COMPUTE, COPY) == pytest.approx(0.003)


def test_overlap_of_serial_work_is_zero() -> None:
    spans = [Span("a", "x", 0.0, 1.0), Span("b", "y", 1.0, 2.0)]
    assert overlap_s(spans, "a", "b") == 0.0
    assert overlap_s(spans, "a", "nobody") == 0.0


def test_overlap_accepts_a_generator() -> None:
    spans = (s for s in [Span("a", "x", 0.0, 2.0), Span("b", "y", 1.0, 4.0)])
    assert overlap_s(spans, "a", "b") == pytest.approx(1.0)


def test_overlap_with_many_intervals_each_side() -> None:
    a = [Span("a", "x", t, t + 1.0) for t in (0.0, 2.0, 4.0)]
    b = [Span("b", "y", 0.5, 2.5), Span("b", "y", 4.5, 10.0)]
    assert overlap_s(a + b, "a", "b") == pytest.approx(0.5 + 0.5 + 0.5)


# -- stage_overlap -------------------------------------------------------------


def timed(label: str, median: float, half_iqr: float = 0.0) -> Measurement:
    """Five calls whose quartiles are ``median -/+ half_iqr`` (seconds)."""
    d = half_iqr
    times = (median - 4 * d, median - d, median, median + d, median + 4 * d)
    return Measurement(label, times, "cuda:0", "cuda-events")


COPIES, COMPUTE_ALONE = timed("copies", 10.0, 0.01), timed("compute", 8.0, 0.01)


def test_stage_overlap_is_the_share_of_the_shorter_stage_hidden() -> None:
    # 10 + 8 - 12 = 6 s saved of the shorter stage's 8 s
    o = stage_overlap(timed("pipelined", 12.0, 0.01), (COPIES, COMPUTE_ALONE))
    assert o.fraction == pytest.approx(0.75)
    assert o.low < 0.75 < o.high
    assert o.low == pytest.approx((9.99 + 7.99 - 12.01) / 8.01)
    assert o.high == pytest.approx((10.01 + 8.01 - 11.99) / 7.99)
    assert o.verdict == "overlap"
    percent, (low, high) = o.percent
    assert (percent, low, high) == pytest.approx((75.0, 100 * o.low, 100 * o.high))
    assert str(o) == "pipelined hid 75% (75% to 75%) of the shorter stage"


def test_stage_overlap_reads_the_same_whichever_stage_comes_first() -> None:
    version = timed("pipelined", 12.0, 0.5)
    a = stage_overlap(version, (COPIES, COMPUTE_ALONE))
    b = stage_overlap(version, (COMPUTE_ALONE, COPIES))
    assert (a.fraction, a.low, a.high) == pytest.approx((b.fraction, b.low, b.high))


def test_stage_overlap_of_stages_in_turn_is_no_measurable_overlap() -> None:
    o = stage_overlap(timed("serialized", 18.0, 0.1), (COPIES, COMPUTE_ALONE))
    assert o.fraction == pytest.approx(0.0, abs=1e-12)
    assert o.low < 0.0 < o.high
    assert o.verdict == NO_OVERLAP
    assert str(o).startswith(f"{NO_OVERLAP} in serialized: 0% (")


def test_stage_overlap_below_zero_is_a_version_slower_than_its_stages() -> None:
    # 2 s more than the 18 s of the stages in turn: -25% of the shorter stage
    o = stage_overlap(timed("sync per stage", 20.0, 0.01), (COPIES, COMPUTE_ALONE))
    assert o.fraction == pytest.approx(-0.25)
    assert o.low < -0.25 < o.high < 0.0
    # a negative saving is widest over the *longer* quartile of the shorter stage
    assert o.low == pytest.approx((9.99 + 7.99 - 20.01) / 7.99)
    assert o.high == pytest.approx((10.01 + 8.01 - 19.99) / 8.01)
    assert o.verdict == "slower than its stages in turn"
    assert str(o) == (
        "sync per stage took 25% (25% to 25%) of the shorter stage longer than its "
        "stages in turn"
    )


def test_stage_overlap_above_one_is_not_called_overlap() -> None:
    # 6 s for 18 s of stages: saved 12 s, more than the shorter stage's 8 s
    o = stage_overlap(timed("pageable", 6.0, 0.01), (COPIES, COMPUTE_ALONE))
    assert o.fraction == pytest.approx(1.5)
    assert o.verdict == "more than the shorter stage"
    assert "ran faster inside it than alone, which is no overlap" in str(o)


def test_stage_overlap_spread_straddling_zero_hides_a_median_gain() -> None:
    o = stage_overlap(timed("noisy", 17.0, 3.0), (COPIES, COMPUTE_ALONE))
    assert o.fraction > 0
    assert o.verdict == NO_OVERLAP


def test_stage_overlap_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="two measurements"):
        stage_overlap(COPIES, (COPIES,))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Measurement"):
        stage_overlap(1.0, (COPIES, COMPUTE_ALONE))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Measurement"):
        stage_overlap(COPIES, (COPIES, 2.0))  # type: ignore[arg-type]
    zero = Measurement("zero", (0.0, 0.0, 0.0), "cpu", "wall-clock")
    with pytest.raises(ValueError, match="0 s"):
        stage_overlap(COPIES, (zero, COPIES))


# -- plot_timeline -------------------------------------------------------------


def bars_by_label(ax: plt.Axes) -> dict[str, list]:
    found: dict[str, list] = {}
    for collection in ax.collections:
        found.setdefault(collection.get_label(), []).append(collection)
    return found


def test_plot_one_row_per_lane_top_to_bottom(ax) -> None:
    plot_timeline(ax, pipeline(), title="Copies overlap compute", device="cpu")
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert ticks == [COPY, COMPUTE]
    bottom, top = ax.get_ylim()
    assert bottom > top  # the first lane is the top row


def test_plot_bars_in_ms_at_their_lane(ax) -> None:
    plot_timeline(ax, pipeline(), title="t", device="cpu")
    rects = []
    for collection in ax.collections:
        for path in collection.get_paths():
            xs, ys = path.vertices[:, 0], path.vertices[:, 1]
            rects.append((xs.min(), xs.max(), round((ys.min() + ys.max()) / 2, 9)))
    assert len(rects) == 6
    assert (0.0, 2.0, 0.0) in [(round(a, 9), round(b, 9), c) for a, b, c in rects]
    computes = sorted(r for r in rects if r[2] == pytest.approx(1.0))
    assert [(round(a, 9), round(b, 9)) for a, b, _ in computes] == [(2, 5), (5, 8)]


def test_plot_one_colour_per_label_and_a_legend(ax) -> None:
    plot_timeline(ax, pipeline(), title="t", device="cpu")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["H2D", "compute", "D2H"]
    colours = {
        c.get_label(): mpl.colors.to_hex(c.get_facecolor()[0]) for c in ax.collections
    }
    assert colours["H2D"] == COLORS[0].lower()
    assert colours["compute"] == COLORS[1].lower()
    assert colours["D2H"] == COLORS[2].lower()


def test_plot_two_timelines_share_colours() -> None:
    fig, (top, bottom) = plt.subplots(2, 1)
    serial = [
        Span("default stream", "H2D", 0.0, 1.0),
        Span("default stream", "compute", 1.0, 2.0),
        Span("default stream", "D2H", 2.0, 3.0),
    ]
    plot_timeline(top, serial, title="serial", device="cpu")
    plot_timeline(bottom, pipeline(), title="pipelined", device="cpu")

    def colours(ax):
        return {
            c.get_label(): tuple(np.round(c.get_facecolor()[0], 6))
            for c in ax.collections
            if not c.get_label().startswith("_")
        }

    assert colours(top) == colours(bottom)
    labels = [t.get_text() for t in fig.texts if t.get_text().startswith("measured")]
    assert len(labels) == 1


def test_plot_labels_axes_and_device(ax) -> None:
    plot_timeline(ax, pipeline(), title="Copies overlap compute", device="cpu")
    assert ax.get_xlabel() == "time (ms)"
    assert ax.get_title() == "Copies overlap compute"
    assert ax.get_xlim()[0] == 0.0
    texts = [t.get_text() for t in ax.figure.texts]
    assert any(t.startswith("measured on ") for t in texts)


def test_plot_with_given_lanes_keeps_their_order(ax) -> None:
    plot_timeline(ax, pipeline(), title="t", device="cpu", lanes=[COMPUTE, COPY, "x"])
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert ticks == [COMPUTE, COPY, "x"]


def test_plot_rejects_a_lane_not_listed(ax) -> None:
    with pytest.raises(ValueError, match=r"lanes must hold every span.s lane"):
        plot_timeline(ax, pipeline(), title="t", device="cpu", lanes=[COPY])


def test_plot_rejects_no_spans(ax) -> None:
    with pytest.raises(ValueError, match="spans must hold at least one span"):
        plot_timeline(ax, [], title="t", device="cpu")


def test_plot_rejects_a_label_without_unit(ax) -> None:
    with pytest.raises(ValueError, match="must name a unit"):
        plot_timeline(ax, pipeline(), title="t", device="cpu", xlabel="time")
