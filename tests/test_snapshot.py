"""Tests for gpuguide.chapters.snapshot: synthetic snapshots, and a real one on CUDA."""

from __future__ import annotations

import pickle

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from gpuguide.chapters.snapshot import (
    MemoryTimeline,
    memory_timeline,
    plot_memory_timeline,
)

MIB = 2**20


def event(action: str, size_mib: float) -> dict:
    return {"action": action, "addr": 0, "size": int(size_mib * MIB), "stream": 0}


def block(size_mib: float, state: str) -> dict:
    return {"size": int(size_mib * MIB), "state": state, "address": 0}


@pytest.fixture
def snapshot() -> dict:
    """A 4 MiB segment; 2 MiB allocated and freed, 1 MiB still held at the end."""
    return {
        "segments": [
            {
                "device": 0,
                "total_size": 4 * MIB,
                "blocks": [block(1, "active_allocated"), block(3, "inactive")],
            }
        ],
        "device_traces": [
            [
                event("segment_alloc", 4),
                event("alloc", 2),
                event("alloc", 1),
                event("free_requested", 2),
                event("free_completed", 2),
            ]
        ],
    }


def mib(values: tuple[int, ...]) -> list[float]:
    return [v / MIB for v in values]


def test_counts_allocations_and_completed_frees(snapshot):
    timeline = memory_timeline(snapshot)
    assert timeline.trace == 0
    assert timeline.events == 5
    assert timeline.event_index == (0, 1, 2, 3, 4, 5)
    # A free that was only requested does not give memory back yet.
    assert mib(timeline.allocated_bytes) == [0, 0, 2, 3, 3, 1]
    assert mib(timeline.reserved_bytes) == [0, 4, 4, 4, 4, 4]
    assert timeline.peak_allocated_bytes == 3 * MIB
    assert timeline.peak_event == 3
    assert repr(timeline) == (
        "<MemoryTimeline trace 0: 5 events; allocated 0 B -> peak 3.00 MiB (event 3) "
        "-> 1.00 MiB; reserved up to 4.00 MiB>"
    )


def test_memory_held_before_recording_is_the_baseline(snapshot):
    # An 8 MiB tensor allocated before recording started: in the segments only.
    snapshot["segments"].append(
        {"device": 0, "total_size": 8 * MIB, "blocks": [block(8, "active_allocated")]}
    )
    timeline = memory_timeline(snapshot)
    assert mib(timeline.allocated_bytes) == [8, 8, 10, 11, 11, 9]
    assert mib(timeline.reserved_bytes) == [8, 12, 12, 12, 12, 12]


def test_blocks_awaiting_free_still_count_as_allocated(snapshot):
    snapshot["segments"][0]["blocks"] = [
        block(1, "active_allocated"),
        block(2, "active_awaiting_free"),
        block(1, "inactive"),
    ]
    snapshot["device_traces"][0].pop()  # the free has not completed
    assert mib(memory_timeline(snapshot).allocated_bytes) == [0, 0, 2, 3, 3]


def test_blocks_count_the_bytes_requested_not_the_rounded_size(snapshot):
    held = block(1.5, "active_allocated")
    held["requested_size"] = 1 * MIB  # rounded up to a 1.5 MiB block
    snapshot["segments"][0]["blocks"][0] = held
    assert mib(memory_timeline(snapshot).allocated_bytes) == [0, 0, 2, 3, 3, 1]


def test_segment_release_and_expandable_segments(snapshot):
    trace = snapshot["device_traces"][0]
    trace += [
        event("segment_map", 2),
        event("segment_unmap", 2),
        event("segment_free", 4),
    ]
    snapshot["segments"] = []  # empty_cache() returned everything
    snapshot["device_traces"][0] = [e for e in trace if e["action"] != "alloc"]
    timeline = memory_timeline(snapshot)
    assert mib(timeline.reserved_bytes) == [0, 4, 4, 4, 6, 4, 0]


def test_picks_the_first_device_with_events(snapshot):
    events = snapshot["device_traces"][0]
    snapshot["device_traces"] = [[], events]
    for segment in snapshot["segments"]:
        segment["device"] = 1
    # A segment of another device must not count.
    snapshot["segments"].append({"device": 0, "total_size": 64 * MIB, "blocks": []})
    timeline = memory_timeline(snapshot)
    assert timeline.trace == 1
    assert mib(timeline.reserved_bytes)[-1] == 4
    assert memory_timeline(snapshot, trace=0).events == 0


@pytest.mark.parametrize(
    ("snap", "trace", "match"),
    [
        ({}, None, "must have 'device_traces'"),
        ({"device_traces": [[], []]}, None, "must hold allocator events"),
        ({"device_traces": [[event("alloc", 1)]]}, 1, r"trace must be in \[0, 1\)"),
        ({"device_traces": [[event("alloc", 1)]]}, -1, r"trace must be in \[0, 1\)"),
    ],
)
def test_rejects_snapshots_without_events(snap, trace, match):
    with pytest.raises(ValueError, match=match):
        memory_timeline(snap, trace)


def test_plot_draws_both_curves_and_marks_the_peak(snapshot):
    fig, ax = plt.subplots()
    timeline = plot_memory_timeline(
        ax, snapshot, title="Peak during the step", device="cpu"
    )
    assert isinstance(timeline, MemoryTimeline)
    lines = {line.get_label(): line for line in ax.get_lines()}
    allocated = lines["allocated (tensors)"]
    reserved = lines["reserved (allocator cache)"]
    assert list(allocated.get_ydata()) == [0, 0, 2, 3, 3, 1]
    assert list(reserved.get_ydata()) == [0, 4, 4, 4, 4, 4]
    assert allocated.get_drawstyle() == "steps-post"
    assert ax.collections, "the allocated area is filled"
    assert any(t.get_text() == "peak 3.00 MiB" for t in ax.texts)
    assert ax.get_ylim()[0] == 0
    assert ax.get_ylim()[1] > 4
    assert ax.get_xlabel() == "allocator event (index)"
    assert ax.get_ylabel() == "memory (MiB)"
    assert ax.get_title() == "Peak during the step"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "allocated (tensors)",
        "reserved (allocator cache)",
    ]
    assert any(t.get_text().startswith("measured on ") for t in fig.texts)


@pytest.mark.gpu
def test_real_snapshot_matches_the_allocator(tmp_path):
    device = torch.device("cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(device)
    torch.cuda.memory._record_memory_history(
        max_entries=10_000, stacks="python", clear_history=True
    )
    try:
        a = torch.empty(8 * MIB, dtype=torch.uint8, device=device)
        b = torch.empty(4 * MIB, dtype=torch.uint8, device=device)
        del a
        torch.cuda.synchronize()
        path = tmp_path / "snapshot.pickle"
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    with path.open("rb") as f:
        snapshot = pickle.load(f)
    timeline = memory_timeline(snapshot, trace=torch.cuda.current_device())
    start = timeline.allocated_bytes[0]
    # Requested sizes: the allocator's rounding keeps memory_allocated a little higher.
    assert 0 <= start <= before
    assert timeline.peak_allocated_bytes - start == 12 * MIB  # a and b together
    assert timeline.allocated_bytes[-1] - start == 4 * MIB  # b alone
    assert timeline.reserved_bytes[-1] == torch.cuda.memory_reserved(device)
    del b
