"""Tests for gpuguide.memory: a fake CUDA/MPS allocator, and real CPU allocations."""

from __future__ import annotations

import sys

import pytest
import torch

from gpuguide import memory
from gpuguide.memory import MemoryReport, rss_bytes, track_memory
from gpuguide.memory import _Tracker as MemoryTracker

MiB = 2**20
# 200 MB of float32, written (torch.ones) so that the pages are resident.
BIG_NUMEL = 50_000_000


class FakeCuda:
    """Mimics the torch.cuda memory functions with a counter per device."""

    def __init__(self, allocated: int = 0, current: int = 0) -> None:
        self.current = current
        self.allocated: dict[int, int] = {}
        self.peak: dict[int, int] = {}
        self.reserved_peak: dict[int, int] = {}
        self.calls: list[tuple[str, int]] = []
        self.alloc(allocated, current)

    def alloc(self, nbytes: int, device: int = 0) -> None:
        now = self.allocated.get(device, 0) + nbytes
        self.allocated[device] = now
        self.peak[device] = max(self.peak.get(device, 0), now)
        # The caching allocator reserves in larger blocks and keeps them.
        self.reserved_peak[device] = max(self.reserved_peak.get(device, 0), 2 * now)

    def free(self, nbytes: int, device: int = 0) -> None:
        self.allocated[device] -= nbytes

    def current_device(self) -> int:
        return self.current

    def synchronize(self, device: int | None = None) -> None:
        self.calls.append(("synchronize", device))

    def reset_peak_memory_stats(self, device: int | None = None) -> None:
        self.calls.append(("reset_peak_memory_stats", device))
        self.peak[device] = self.allocated.get(device, 0)
        self.reserved_peak[device] = self.allocated.get(device, 0)

    def memory_allocated(self, device: int | None = None) -> int:
        return self.allocated.get(device, 0)

    def max_memory_allocated(self, device: int | None = None) -> int:
        return self.peak.get(device, 0)

    def max_memory_reserved(self, device: int | None = None) -> int:
        return self.reserved_peak.get(device, 0)


class FakeMPS:
    def __init__(self, allocated: int = 0) -> None:
        self.allocated = allocated
        self.synchronized = 0

    def synchronize(self) -> None:
        self.synchronized += 1

    def current_allocated_memory(self) -> int:
        return self.allocated


# -- CUDA logic with a fake allocator ------------------------------------------


def test_cuda_report_from_allocator_counters() -> None:
    fake = FakeCuda(allocated=100 * MiB)
    with MemoryTracker("cuda", backend=fake) as tracker:
        assert tracker.report is None
        fake.alloc(300 * MiB)
        fake.free(200 * MiB)
    report = tracker.report
    assert report is not None
    assert tracker.method == "cuda-allocator"
    assert report.start_bytes == 100 * MiB
    assert report.end_bytes == 200 * MiB
    assert report.net_bytes == 100 * MiB
    assert report.peak_bytes == 400 * MiB
    assert report.peak_increase_bytes == 300 * MiB
    # Synchronized before reading at both ends; peak reset at the start.
    names = [name for name, _ in fake.calls]
    assert names == ["synchronize", "reset_peak_memory_stats", "synchronize"]


def test_cuda_explicit_index_is_passed_through() -> None:
    fake = FakeCuda(current=0)
    with MemoryTracker(torch.device("cuda", 1), backend=fake) as tracker:
        fake.alloc(10 * MiB, device=1)
    assert {device for _, device in fake.calls} == {1}
    assert tracker.report is not None
    assert tracker.report.peak_increase_bytes == 10 * MiB


def test_cuda_default_index_is_the_current_device() -> None:
    fake = FakeCuda(current=2)
    with MemoryTracker("cuda", backend=fake):
        fake.alloc(MiB, device=2)
    assert {device for _, device in fake.calls} == {2}


def test_report_is_set_when_the_block_raises() -> None:
    fake = FakeCuda()
    tracker = MemoryTracker("cuda:0", backend=fake)
    assert tracker.report is None

    def run_block() -> None:
        with tracker:
            fake.alloc(64 * MiB)
            raise RuntimeError("CUDA out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        run_block()
    assert tracker.report is not None
    assert tracker.report.end_bytes == 64 * MiB


def test_mps_report_has_no_peak() -> None:
    fake = FakeMPS(allocated=8 * MiB)
    with MemoryTracker("mps", backend=fake) as tracker:
        fake.allocated += 32 * MiB
    report = tracker.report
    assert report is not None
    assert tracker.method == "mps-allocator"
    assert report.net_bytes == 32 * MiB
    assert report.peak_bytes is None
    assert report.peak_increase_bytes is None
    assert fake.synchronized == 2


def test_real_backends_are_the_default() -> None:
    assert MemoryTracker("cuda:0")._api is torch.cuda
    assert MemoryTracker("mps")._api is torch.mps


def test_unsupported_device_type() -> None:
    with pytest.raises(ValueError, match="meta"):
        MemoryTracker("meta")


# -- MemoryReport --------------------------------------------------------------


def test_report_properties() -> None:
    report = MemoryReport(start_bytes=1 * MiB, end_bytes=4 * MiB, peak_bytes=9 * MiB)
    assert report.net_bytes == 3 * MiB
    assert report.peak_increase_bytes == 8 * MiB
    shrink = MemoryReport(4 * MiB, 1 * MiB, None)
    assert shrink.net_bytes == -3 * MiB
    assert shrink.peak_increase_bytes is None
    with pytest.raises(AttributeError):
        report.start_bytes = 0  # type: ignore[misc]


# -- CPU: real allocations -----------------------------------------------------


def test_rss_bytes_sees_a_resident_tensor() -> None:
    before = rss_bytes()
    x = torch.ones(BIG_NUMEL)
    after = rss_bytes()
    assert after - before >= 150 * MiB
    del x


def test_cpu_kept_tensor_shows_net_and_peak() -> None:
    with track_memory("cpu") as tracker:
        x = torch.ones(BIG_NUMEL)
    report = tracker.report
    assert report is not None
    assert tracker.method == "process-rss"
    assert report.net_bytes >= 150 * MiB
    assert report.peak_increase_bytes is not None
    assert report.peak_increase_bytes >= 150 * MiB
    del x


def test_cpu_freed_tensor_shows_peak_but_little_net() -> None:
    with track_memory("cpu") as tracker:
        x = torch.ones(BIG_NUMEL)
        del x
    report = tracker.report
    assert report is not None
    assert report.peak_increase_bytes is not None
    assert report.peak_increase_bytes >= 150 * MiB
    assert report.net_bytes < 50 * MiB


def test_cpu_peak_is_unknown_where_the_high_water_mark_stays(monkeypatch, tmp_path):
    # Resetting the high-water mark is refused: no peak rather than a stale one.
    monkeypatch.setattr(memory, "_CLEAR_REFS", str(tmp_path / "missing" / "x"))
    with track_memory("cpu") as tracker:
        x = torch.ones(BIG_NUMEL)
        del x
    report = tracker.report
    assert report is not None
    assert report.peak_bytes is None


def test_cpu_without_proc(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    missing = str(tmp_path / "missing")
    monkeypatch.setattr(memory, "_STATM", missing)
    monkeypatch.setattr(memory, "_STATUS", missing)
    assert rss_bytes() == memory._maxrss_bytes() > 0
    assert memory._reset_hwm() is False
    with track_memory("cpu") as tracker:
        pass
    report = tracker.report
    assert report is not None
    assert report.peak_bytes is None


def test_high_water_mark_parsing(monkeypatch, tmp_path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmPeak:\t  3060 kB\nVmHWM:\t  1620 kB\n")
    monkeypatch.setattr(memory, "_STATUS", str(status))
    assert memory._hwm_bytes() == 1620 * 1024
    status.write_text("Name:\tpython\nVmRSS:\t 1620 kB\n")
    assert memory._hwm_bytes() is None


def test_default_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUGUIDE_DEVICE", "cpu")
    with track_memory() as tracker:
        pass
    assert tracker.method == "process-rss"
    assert tracker.report is not None


# -- real CUDA -----------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_real_allocations() -> None:
    nbytes = 256 * MiB
    with track_memory("cuda") as kept:
        x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    with track_memory("cuda") as freed:
        y = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        del y
    for tracker in (kept, freed):
        assert tracker.report is not None
        assert tracker.report.peak_increase_bytes is not None
        assert tracker.report.peak_increase_bytes >= nbytes
    assert kept.report is not None
    assert freed.report is not None
    assert kept.report.net_bytes >= nbytes
    assert freed.report.net_bytes == 0
    del x


def test_release_host_memory_trims_on_glibc(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "_malloc_trim", lambda: calls.append)
    assert memory.release_host_memory() is True
    assert calls == [0]
    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)
    assert memory.release_host_memory() is False


def test_cpu_tracker_trims_before_it_starts(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "release_host_memory", lambda: calls.append(1))
    with memory.track_memory("cpu"):
        assert calls == [1]


def test_malloc_trim_is_found_on_linux_only():
    # The guide's build machines run glibc; elsewhere there is nothing to call.
    assert (memory._malloc_trim() is not None) == sys.platform.startswith("linux")
