"""Read and draw CUDA memory snapshots: memory in use over allocator events.

``torch.cuda.memory._record_memory_history()`` makes PyTorch's caching
allocator log every action it takes; ``torch.cuda.memory._snapshot()`` (or the
pickle that ``_dump_snapshot`` writes) returns a dict with the log in
``"device_traces"`` (one list of events per device) and the allocator's state
at the time of the snapshot in ``"segments"``. PyTorch's viewer at
https://pytorch.org/memory_viz explores such a file interactively;
:func:`plot_memory_timeline` draws its gist on a page: the bytes held by
tensors and the bytes the allocator reserved, after each event.

Each ``alloc`` event adds the bytes requested to the allocated total and its
``free_completed`` removes them (a block freed while another stream still uses
it stays counted until then); ``segment_alloc``/``segment_map`` add a
segment's size to the reserved total and ``segment_free``/``segment_unmap``
remove it. Events record the size *requested*; the allocator rounds each block
up (to 512 bytes or more), so ``torch.cuda.memory_allocated`` reads slightly
higher. Memory held before the recording started appears in ``"segments"`` but
in no event, so the timeline starts from ``state at the snapshot - net change
over the events``.

Examples
--------
>>> from gpuguide.chapters.snapshot import memory_timeline
>>> mib = 2**20
>>> snapshot = {
...     "segments": [{"device": 0, "total_size": 2 * mib,
...                   "blocks": [{"size": mib, "state": "active_allocated"}]}],
...     "device_traces": [[
...         {"action": "segment_alloc", "size": 2 * mib},
...         {"action": "alloc", "size": mib},
...     ]],
... }
>>> memory_timeline(snapshot).allocated_bytes
(0, 0, 1048576)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuguide.device import DeviceInfo
from gpuguide.plotting import COLORS, label_device, style_axes
from gpuguide.units import format_bytes

if TYPE_CHECKING:
    import torch
    from matplotlib.axes import Axes

__all__ = ["MemoryTimeline", "memory_timeline", "plot_memory_timeline"]

#: Trace actions that change the bytes held by tensors, with their sign.
_ALLOCATED = {"alloc": 1, "free_completed": -1}
#: Trace actions that change the bytes reserved from the driver, with their sign.
_RESERVED = {
    "segment_alloc": 1,
    "segment_map": 1,
    "segment_free": -1,
    "segment_unmap": -1,
}
#: Block states whose bytes still count as allocated.
_HELD = frozenset({"active_allocated", "active_awaiting_free"})

_MIB = 2**20


@dataclass(frozen=True)
class MemoryTimeline:
    """Allocated and reserved bytes of one device after each allocator event.

    Point 0 is the state before the first recorded event; point ``k`` the
    state after event ``k`` (counting from 1), so every tuple has one more
    entry than the trace has events.

    Attributes
    ----------
    trace : int
        Which of the snapshot's ``device_traces`` this is (the device index).
    event_index : tuple of int
        ``0, 1, ..., number of events``.
    allocated_bytes : tuple of int
        Bytes requested by the tensors alive (``torch.cuda.memory_allocated``
        before the allocator's rounding).
    reserved_bytes : tuple of int
        Bytes the caching allocator holds from the driver
        (``torch.cuda.memory_reserved``).
    """

    trace: int
    event_index: tuple[int, ...]
    allocated_bytes: tuple[int, ...]
    reserved_bytes: tuple[int, ...]

    @property
    def events(self) -> int:
        """Number of trace events."""
        return len(self.event_index) - 1

    @property
    def peak_allocated_bytes(self) -> int:
        """Largest number of bytes held by tensors at any point."""
        return max(self.allocated_bytes)

    @property
    def peak_event(self) -> int:
        """The first point (event index) at which the allocated peak is reached."""
        return self.allocated_bytes.index(self.peak_allocated_bytes)

    def __repr__(self) -> str:
        alloc = self.allocated_bytes
        return (
            f"<MemoryTimeline trace {self.trace}: {self.events} events; allocated "
            f"{format_bytes(alloc[0])} -> peak {format_bytes(self.peak_allocated_bytes)}"
            f" (event {self.peak_event}) -> {format_bytes(alloc[-1])}; reserved up to "
            f"{format_bytes(max(self.reserved_bytes))}>"
        )


def _choose_trace(
    traces: Sequence[Sequence[Mapping[str, Any]]], trace: int | None
) -> int:
    if trace is None:
        found = next((i for i, events in enumerate(traces) if events), None)
        if found is None:
            msg = (
                "the snapshot must hold allocator events, got none; call "
                "torch.cuda.memory._record_memory_history() before the code to record"
            )
            raise ValueError(msg)
        return found
    if not 0 <= trace < len(traces):
        msg = f"trace must be in [0, {len(traces)}), one per device, got {trace}"
        raise ValueError(msg)
    return trace


def _held_at_snapshot(
    segments: Sequence[Mapping[str, Any]], device: int
) -> tuple[int, int]:
    """(allocated, reserved) bytes of ``device`` when the snapshot was taken."""
    allocated = reserved = 0
    for segment in segments:
        if segment.get("device", device) != device:
            continue
        reserved += int(segment["total_size"])
        allocated += sum(
            int(block.get("requested_size", block["size"]))
            for block in segment.get("blocks", ())
            if block.get("state") in _HELD
        )
    return allocated, reserved


def _running(start: int, steps: Sequence[int]) -> tuple[int, ...]:
    values = [start]
    for step in steps:
        values.append(values[-1] + step)
    return tuple(values)


def memory_timeline(
    snapshot: Mapping[str, Any], trace: int | None = None
) -> MemoryTimeline:
    """Allocated and reserved bytes after each event of a memory snapshot.

    Parameters
    ----------
    snapshot : mapping
        What ``torch.cuda.memory._snapshot()`` returns, or the unpickled file
        that ``torch.cuda.memory._dump_snapshot()`` wrote.
    trace : int, optional
        The device whose trace to read; default the first device with events.

    Returns
    -------
    MemoryTimeline

    Raises
    ------
    ValueError
        If the snapshot holds no ``"device_traces"``, no trace has events, or
        ``trace`` is out of range.
    """
    traces = snapshot.get("device_traces")
    if not traces:
        msg = (
            "the snapshot must have 'device_traces', got none: was it taken with CUDA?"
        )
        raise ValueError(msg)
    index = _choose_trace(traces, trace)
    events = traces[index]
    alloc_steps = [
        _ALLOCATED.get(e.get("action"), 0) * int(e.get("size", 0)) for e in events
    ]
    reserve_steps = [
        _RESERVED.get(e.get("action"), 0) * int(e.get("size", 0)) for e in events
    ]
    end_allocated, end_reserved = _held_at_snapshot(snapshot.get("segments", ()), index)
    # Memory held before recording started is in the segments but in no event.
    allocated = _running(end_allocated - sum(alloc_steps), alloc_steps)
    reserved = _running(end_reserved - sum(reserve_steps), reserve_steps)
    return MemoryTimeline(
        trace=index,
        event_index=tuple(range(len(events) + 1)),
        allocated_bytes=allocated,
        reserved_bytes=reserved,
    )


def plot_memory_timeline(
    ax: Axes,
    snapshot: Mapping[str, Any],
    *,
    title: str,
    device: torch.device | str | DeviceInfo | None = None,
    trace: int | None = None,
) -> MemoryTimeline:
    """Draw allocated and reserved memory (MiB) over the events of a snapshot.

    The bytes held by tensors are a filled step curve, the bytes reserved by
    the caching allocator a line above it, and the allocated peak is marked.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    snapshot : mapping
        A memory snapshot (see :func:`memory_timeline`).
    title, device
        As for :func:`gpuguide.plotting.plot_sweep`: the finding, and the device
        named on the figure.
    trace : int, optional
        The device trace to draw; default the first with events.

    Returns
    -------
    MemoryTimeline
        The numbers drawn.
    """
    timeline = memory_timeline(snapshot, trace)
    x = list(timeline.event_index)
    allocated = [b / _MIB for b in timeline.allocated_bytes]
    reserved = [b / _MIB for b in timeline.reserved_bytes]
    style_axes(ax)
    ax.fill_between(x, allocated, step="post", color=COLORS[0], alpha=0.3, lw=0)
    ax.step(x, allocated, where="post", color=COLORS[0], label="allocated (tensors)")
    ax.step(
        x, reserved, where="post", color=COLORS[1], label="reserved (allocator cache)"
    )
    peak_x = timeline.peak_event
    ax.annotate(
        f"peak {format_bytes(timeline.peak_allocated_bytes)}",
        xy=(peak_x, allocated[peak_x]),
        xytext=(0, 6),
        textcoords="offset points",
        ha="center",
        va="bottom",
        fontsize="small",
    )
    ax.plot([peak_x], [allocated[peak_x]], marker="v", color=COLORS[3])
    ax.set_xlim(0, max(timeline.events, 1))
    ax.set_ylim(0, max(max(allocated), max(reserved), 1.0) * 1.15)
    ax.set_xlabel("allocator event (index)")
    ax.set_ylabel("memory (MiB)")
    ax.set_title(title)
    ax.legend(loc="lower right")
    label_device(ax.figure, device)
    return timeline
