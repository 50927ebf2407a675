"""Tests for gpuguide.chapters.timeline: spans, marks, overlap and the timeline plot."""

from __future__ import annotations

import dataclasses
import time
import warnings

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from gpuguide.chapters.timeline import (
    Marks,
    _Span,
    _Timeline,
    synchronizes,
)
from gpuguide.plotting import COLORS

COPY, COMPUTE = "copy stream", "compute stream"


def pipeline() -> list[_Span]:
    """Two chunks: copy in, compute, copy out, the second copy-in overlapping."""
    return [
        _Span(COPY, "H2D", 0.000, 0.002),
        _Span(COPY, "H2D", 0.002, 0.004),
        _Span(COMPUTE, "compute", 0.002, 0.005),
        _Span(COPY, "D2H", 0.005, 0.006),
        _Span(COMPUTE, "compute", 0.005, 0.008),
        _Span(COPY, "D2H", 0.008, 0.009),
    ]


# -- _Span ----------------------------------------------------------------------


def test_span_duration() -> None:
    assert _Span("lane", "work", 1.0, 3.0).duration_s == 2.0
    assert _Span("lane", "work", 0.5, 0.5).duration_s == 0.0


def test_span_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _Span("lane", "work", 0.0, 1.0).end_s = 2.0  # type: ignore[misc]


# -- Marks and _Timeline.overlap ----------------------------------------------


def test_overlap_share_is_the_copies_time_beside_compute() -> None:
    # copies busy 6 ms; the second H2D runs 2 ms and the first D2H 1 ms beside compute
    assert _Timeline(pipeline()).overlap(COPY, COMPUTE) == pytest.approx(0.5)
    assert _Timeline(pipeline()).overlap(COMPUTE, COPY) == pytest.approx(3 / 6)


def test_overlap_share_zero_when_stages_touch_or_the_lane_is_idle() -> None:
    serial = [_Span(COPY, "H2D", 0.0, 1.0), _Span(COMPUTE, "compute", 1.0, 2.0)]
    assert _Timeline(serial).overlap(COPY, COMPUTE) == 0.0
    assert _Timeline(serial).overlap("absent", COMPUTE) == 0.0


def test_marks_on_a_cpu_time_each_span_from_the_origin() -> None:
    marks = Marks("cpu")
    with marks.span("CPU", "sleep"):
        time.sleep(0.002)
    with marks.span("CPU", "nothing"):
        pass
    first, second = marks.spans()
    assert (first.lane, first.label, second.label) == ("CPU", "sleep", "nothing")
    assert 0.0 <= first.start_s < first.end_s <= second.start_s <= second.end_s
    assert first.duration_s >= 0.002
    assert second.duration_s < first.duration_s


@pytest.mark.gpu
def test_marks_on_cuda_bracket_work_on_each_stream() -> None:
    import torch

    x = torch.randn(2048, 2048, device="cuda")
    side = torch.cuda.Stream()
    marks = Marks("cuda")
    with marks.span("default", "matmul"):
        x @ x
    with torch.cuda.stream(side), marks.span("side", "copy"):
        x.clone()
    spans = marks.spans()
    assert [(s.lane, s.label) for s in spans] == [
        ("default", "matmul"),
        ("side", "copy"),
    ]
    assert all(s.start_s >= 0.0 and s.duration_s > 0.0 for s in spans)


# -- _Timeline.plot -----------------------------------------------------------


def bars_by_label(ax: plt.Axes) -> dict[str, list]:
    found: dict[str, list] = {}
    for collection in ax.collections:
        found.setdefault(collection.get_label(), []).append(collection)
    return found


def test_plot_one_row_per_lane_top_to_bottom(ax) -> None:
    _Timeline(pipeline()).plot(ax, title="Copies overlap compute")
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert ticks == [COPY, COMPUTE]
    bottom, top = ax.get_ylim()
    assert bottom > top  # the first lane is the top row


def test_plot_bars_in_ms_at_their_lane(ax) -> None:
    _Timeline(pipeline()).plot(ax, title="t")
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
    _Timeline(pipeline()).plot(ax, title="t")
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
        _Span("default stream", "H2D", 0.0, 1.0),
        _Span("default stream", "compute", 1.0, 2.0),
        _Span("default stream", "D2H", 2.0, 3.0),
    ]
    _Timeline(serial).plot(top, title="serial")
    _Timeline(pipeline()).plot(bottom, title="pipelined")

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
    _Timeline(pipeline()).plot(ax, title="Copies overlap compute")
    assert ax.get_xlabel() == "time (ms)"
    assert ax.get_title() == "Copies overlap compute"
    assert ax.get_xlim()[0] == 0.0
    texts = [t.get_text() for t in ax.figure.texts]
    assert any(t.startswith("measured on ") for t in texts)


def test_plot_rejects_no_spans(ax) -> None:
    with pytest.raises(ValueError, match="must hold at least one span"):
        _Timeline([]).plot(ax, title="t")


# -- synchronizes ----------------------------------------------------------------


@pytest.fixture
def sync_debug(monkeypatch):
    """torch.cuda's sync debug mode and synchronize, recorded instead of run."""
    import torch

    modes: list[str] = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    return modes


def test_synchronizes_when_the_mode_warns(sync_debug) -> None:
    def item():
        warnings.warn("called a synchronizing CUDA operation", stacklevel=1)

    assert synchronizes(item)
    assert sync_debug == ["warn", "default"]


def test_synchronizes_ignores_the_prototype_notice(sync_debug) -> None:
    def detach():
        warnings.warn("Sync debug mode is a prototype feature", stacklevel=1)

    assert not synchronizes(detach)
    assert not synchronizes(lambda: None)


def test_synchronizes_restores_the_mode_when_fn_raises(sync_debug) -> None:
    def fails():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        synchronizes(fails)
    assert sync_debug == ["warn", "default"]


@pytest.mark.gpu
def test_synchronizes_on_cuda() -> None:
    import torch

    x = torch.randn(64, device="cuda")
    assert synchronizes(lambda: x.sum().item())
    assert not synchronizes(lambda: x.sum())
