"""The utilization page's plumbing (gpuguide.chapters.utilization): a figure read in
a thread while a block runs, a thread's time on a core and waiting for one, and
the profiler's occupancy weighted by kernel time."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch

from gpuguide.chapters.utilization import (
    OCCUPANCY,
    core_seconds,
    kernel_occupancy,
    sampling,
)


def test_sampling_reads_in_a_thread_until_the_block_ends():
    count = iter(range(1000))
    threads = set()

    def read():
        threads.add(threading.get_ident())
        return next(count)

    with sampling(read, every_s=0.005) as samples:
        time.sleep(0.1)
    seen = list(samples)
    time.sleep(0.05)
    assert len(seen) >= 3
    assert seen == list(range(len(seen)))  # every value, in order
    assert samples == seen  # nothing read once the block ended
    assert threading.get_ident() not in threads


def test_sampling_without_a_reader_reads_nothing():
    with sampling(None, every_s=0.001) as samples:
        time.sleep(0.02)
    assert samples == []


def test_sampling_stops_its_thread_when_the_block_raises():
    before = threading.active_count()
    with pytest.raises(RuntimeError), sampling(lambda: 1.0, every_s=0.001):
        raise RuntimeError
    assert threading.active_count() == before


def test_core_seconds_reads_running_and_waiting_from_schedstat(tmp_path):
    stats = tmp_path / "schedstat"
    stats.write_text("2500000000 500000000 42\n")
    assert core_seconds(stats) == (2.5, 0.5)


def test_core_seconds_falls_back_to_the_threads_cpu_time(tmp_path):
    running, waiting = core_seconds(tmp_path / "missing")
    assert waiting == 0.0
    assert running == pytest.approx(time.thread_time(), abs=0.05)


def test_core_seconds_grow_with_work_on_a_core():
    (run0, wait0), start = core_seconds(), time.perf_counter()
    while time.perf_counter() - start < 0.1:
        pass
    (run1, wait1), wall = core_seconds(), time.perf_counter() - start
    assert wait1 >= wait0
    assert 0.02 < run1 - run0 <= wall + 0.01


class _Profile:
    """A finished profile that exports the given trace events."""

    def __init__(self, events):
        self.events = events

    def export_chrome_trace(self, path):
        Path(path).write_text(json.dumps({"traceEvents": self.events}))


def test_kernel_occupancy_is_weighted_by_kernel_time():
    events = [
        {"cat": "kernel", "dur": 30, "args": {OCCUPANCY: 10}},
        {"cat": "kernel", "dur": 10, "args": {OCCUPANCY: 50}},
        {"cat": "cpu_op", "dur": 1000, "args": {"External id": 3}},
        {"ph": "M", "name": "process_name"},
    ]
    assert kernel_occupancy(_Profile(events)) == pytest.approx(20.0)


def test_kernel_occupancy_is_none_without_kernel_records():
    assert kernel_occupancy(_Profile([{"cat": "cpu_op", "dur": 5, "args": {}}])) is None
    cpu = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=cpu) as prof:  # operators, no kernels
        torch.ones(4).add_(1)
    assert kernel_occupancy(prof) is None
