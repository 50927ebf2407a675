"""Plumbing for the utilization page: reading a figure in a thread while a loop
runs, a thread's time on a core, and the profiler's estimate of the SM occupancy of
the kernels it recorded."""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpuguide.host import read_text

__all__ = ["OCCUPANCY", "core_seconds", "kernel_occupancy", "sampling"]

#: The field of a kernel's record, in the profiler's trace, that estimates the
#: share of the GPU's warp slots the kernel's blocks hold (from its launch shape).
OCCUPANCY = "est. achieved occupancy %"
_SCHEDSTAT = Path("/proc/thread-self/schedstat")


@contextmanager
def sampling(
    read: Callable[[], float] | None, every_s: float = 0.05
) -> Iterator[list[float]]:
    """Call ``read`` every ``every_s`` seconds in a thread while the block runs; the
    list the block gets fills with its values, in order (stays empty for None)."""
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while read is not None and not done.wait(every_s):
            samples.append(read())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield samples
    finally:
        done.set()
        sampler.join()


def core_seconds(schedstat: Path = _SCHEDSTAT) -> tuple[float, float]:
    """This thread's seconds on a core and seconds waiting for one, so far: Linux's
    ``schedstat``; elsewhere the thread's CPU time, and no wait."""
    fields = (read_text(schedstat) or "").split()
    if len(fields) < 2:  # not Linux, or not readable
        return time.thread_time(), 0.0
    return int(fields[0]) / 1e9, int(fields[1]) / 1e9


def kernel_occupancy(prof: Any) -> float | None:
    """The kernels' :data:`OCCUPANCY` in a finished ``torch.profiler.profile``,
    weighted by kernel time, in %; None where no kernel record has it (a CPU, a
    profiler without CUPTI)."""
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
    kernels = [
        (float(e.get("dur", 0)), float(e["args"][OCCUPANCY]))
        for e in events
        if isinstance(e.get("args"), dict) and OCCUPANCY in e["args"]
    ]
    time_us = sum(t for t, _ in kernels)
    return sum(t * o for t, o in kernels) / time_us if time_us > 0 else None
