"""Tests for gpuguide.timing.

The timing logic is tested deterministically on the CPU: a fake clock for the
host path, fake CUDA events that record the order of operations for the CUDA
path. A ``gpu``-marked test times a real CUDA matmul.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import itertools
import math
import statistics
import time

import numpy as np
import pytest
import torch

from gpuguide import timing
from gpuguide.timing import (
    NOISY_RELATIVE_IQR,
    Measurement,
    StepTimes,
    _cuda_times,
    _held_times,
    _rep_count,
    _tensor_device,
    benchmark,
    first_calls_s,
    host_and_gpu_times,
)

# A step that is exact in binary floating point, so expected times are exact.
STEP_S = 2.0**-10  # ~0.977 ms


class StepClock:
    """A clock that advances by ``step`` seconds every time it is read."""

    def __init__(self, step: float = STEP_S) -> None:
        self.step = step
        self.reads = 0

    def __call__(self) -> float:
        now = self.reads * self.step
        self.reads += 1
        return now


class CostClock:
    """A clock that only advances when the timed function says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------


def make(times, **kwargs):
    fields = {"label": "op", "device": "cpu", "method": "wall-clock"}
    fields.update(kwargs)
    return Measurement(times_s=tuple(times), **fields)


def test_measurement_statistics_match_numpy_linear_quantiles():
    times = [0.005, 0.001, 0.004, 0.002, 0.010, 0.003, 0.0025]
    m = make(times)
    data = np.array(times)
    assert m.n == 7
    assert m.median_s == pytest.approx(np.median(data))
    assert m.min_s == 0.001
    assert m.max_s == 0.010
    assert m.q25_s == pytest.approx(np.quantile(data, 0.25))
    assert m.q75_s == pytest.approx(np.quantile(data, 0.75))
    assert m.iqr_s == pytest.approx(np.quantile(data, 0.75) - np.quantile(data, 0.25))
    assert m.relative_iqr == pytest.approx(m.iqr_s / np.median(data))
    # statistics.quantiles(method="inclusive") is the same definition.
    quartiles = statistics.quantiles(times, n=4, method="inclusive")
    assert [m.q25_s, m.median_s, m.q75_s] == pytest.approx(quartiles)


def test_measurement_even_count_interpolates():
    m = make([1.0, 2.0, 3.0, 4.0])
    assert m.median_s == 2.5
    assert m.q25_s == 1.75
    assert m.q75_s == 3.25
    assert m.iqr_s == 1.5


def test_measurement_single_time():
    m = make([0.002])
    assert m.n == 1
    assert m.median_s == m.min_s == m.max_s == m.q25_s == m.q75_s == 0.002
    assert m.iqr_s == 0
    assert not m.is_noisy
    assert "1 run," in repr(m)


def test_measurement_stores_tuple_and_is_frozen():
    m = Measurement("op", [0.001, 0.002], "cpu", "wall-clock")
    assert m.times_s == (0.001, 0.002)
    assert isinstance(m.times_s, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.label = "other"
    assert m == Measurement("op", (0.001, 0.002), "cpu", "wall-clock")


@pytest.mark.parametrize(
    ("times", "match"),
    [
        ((), "at least one time"),
        ((0.001, -0.001), "finite numbers >= 0"),
        ((0.001, math.nan), "finite"),
        ((math.inf,), "finite"),
    ],
)
def test_measurement_rejects_bad_times(times, match):
    with pytest.raises(ValueError, match=match):
        make(times)


def test_measurement_rejects_negative_warmup_calls():
    with pytest.raises(ValueError, match="warmup_calls must be >= 0"):
        make([0.001], warmup_calls=-1)


def test_relative_iqr_with_zero_median():
    assert make([0.0, 0.0, 0.0]).relative_iqr == 0.0
    spread = make([0.0, 0.0, 0.0, 1.0, 1.0])
    assert spread.median_s == 0.0
    assert spread.relative_iqr == math.inf
    assert spread.is_noisy
    assert str(spread) == "0 s (0.00-1.00) NOISY"


def test_is_noisy_threshold():
    assert NOISY_RELATIVE_IQR == 0.10
    # median 10, IQR exactly 1: not noisy; a little more: noisy.
    at_limit = make([9.0, 9.5, 10.0, 10.5, 11.0])
    assert at_limit.relative_iqr == 0.1
    assert not at_limit.is_noisy
    assert "NOISY" not in repr(at_limit)
    assert make([9.0, 9.5, 10.0, 10.5001, 11.0]).is_noisy


def test_repr_format():
    # The contract's example: quartiles 12.2 and 12.41 ms around 12.3 ms.
    times = [0.0122] * 11 + [0.0123] * 19 + [0.01241] * 11
    m = make(times, label="fp32 matmul 1024")
    assert m.n == 41
    assert str(m) == "12.3 ms (12.2-12.4)"  # the median with its quartiles
    assert repr(m) == (
        "<Measurement 'fp32 matmul 1024' on cpu: 12.3 ms (12.2-12.4), 41 runs, wall-clock>"
    )
    one = make([0.012])
    assert str(one) == "12.0 ms (one run)"  # a single time has no spread
    assert (
        repr(one) == "<Measurement 'op' on cpu: 12.0 ms (one run), 1 run, wall-clock>"
    )


def test_str_and_repr_flag_noisy_measurements():
    m = make([1e-6, 2e-6, 3e-6, 4e-6], device="cuda:0", method="cuda-events")
    assert m.is_noisy
    assert str(m) == "2.50 us (1.75-3.25) NOISY"
    assert (
        repr(m)
        == "<Measurement 'op' on cuda:0: 2.50 us (1.75-3.25) NOISY, 4 runs, cuda-events>"
    )


# ---------------------------------------------------------------------------
# Rates and FLOP counts
# ---------------------------------------------------------------------------


def test_rate_spans_the_quartile_calls():
    m = make((1e-3, 1e-3, 2e-3), device="cuda:0")
    rate = m.rate(2e9)
    assert str(rate) == "2.00 TFLOP/s (1.33-2.00)"
    assert (rate.unit, rate.device) == ("FLOP/s", "cuda:0")
    with pytest.raises(ValueError, match="a rate needs times > 0"):
        make((0.0, 0.0, 1.0)).rate(1.0)


# ---------------------------------------------------------------------------
# benchmark on the host clock
# ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _full_budgets(monkeypatch):
    """Tests count calls against the full budgets, whatever the environment says."""
    monkeypatch.delenv("GPUGUIDE_SMALL", raising=False)


def test_default_budgets_are_those_of_do_bench():
    m = benchmark(lambda: None, clock=StepClock())
    assert (timing.WARMUP_MS, timing.REP_MS) == (25.0, 100.0)
    assert m.warmup_calls == math.ceil(0.025 / STEP_S) == 26
    assert m.n == math.ceil(0.100 / STEP_S) == 103


@pytest.mark.parametrize(
    ("budgets", "warmup_calls", "reps"),
    [
        ({}, 3, 11),  # 2 ms and 10 ms: ceil(2 / 0.977), ceil(10 / 0.977)
        ({"warmup_ms": 25, "rep_ms": 200}, 3, 11),  # a page's budgets, capped
        ({"warmup_ms": 1, "rep_ms": 5}, 2, 6),  # smaller ones are kept
    ],
)
def test_small_mode_caps_every_budget(monkeypatch, budgets, warmup_calls, reps):
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")
    m = benchmark(lambda: None, clock=StepClock(), **budgets)
    assert (m.warmup_calls, m.n) == (warmup_calls, reps)


def test_benchmark_with_step_clock_is_exact():
    clock = StepClock()
    calls = []
    m = benchmark(
        lambda: calls.append(1), label="noop", clock=clock, warmup_ms=25, rep_ms=100
    )
    # Warm-up: one read at the start and one after each call, so k calls take
    # k steps; it stops at the first k with k * STEP_S >= 25 ms.
    assert m.warmup_calls == math.ceil(0.025 / STEP_S) == 26
    # Each warm-up call took one step, so n = ceil(100 ms / STEP_S).
    assert m.n == math.ceil(0.100 / STEP_S) == 103
    assert m.times_s == (STEP_S,) * 103
    assert len(calls) == m.warmup_calls + m.n
    assert clock.reads == 1 + m.warmup_calls + 2 * m.n
    assert m.label == "noop"
    assert m.device == "cpu"
    assert m.method == "wall-clock"
    assert m.median_s == STEP_S
    assert m.relative_iqr == 0


def test_benchmark_times_the_function_cost():
    clock = CostClock()
    costs = [0.001, 0.002, 0.003]
    seen = []

    def fn(x, *, scale):
        seen.append((x, scale))
        clock.now += costs[len(seen) % 3]

    # Warm-up calls 1..4 cost 2, 3, 1, 2 ms: 8 ms >= 7 ms after 4 calls.
    m = benchmark(
        fn, args=(7,), kwargs={"scale": 2}, clock=clock, warmup_ms=7, rep_ms=6
    )
    assert m.warmup_calls == 4
    # Estimate 2 ms per call: ceil(6 / 2) = 3 < min_reps, so 5 timed calls.
    assert m.n == 5
    # Calls 5..9 cost 3, 1, 2, 3, 1 ms.
    assert m.times_s == pytest.approx((0.003, 0.001, 0.002, 0.003, 0.001))
    assert m.median_s == pytest.approx(0.002)
    assert set(seen) == {(7, 2)}
    assert len(seen) == 9


def test_benchmark_warms_up_at_least_once():
    clock = StepClock(step=1.0)  # one call takes 1 s, far over the budget
    m = benchmark(lambda: None, clock=clock, warmup_ms=1, rep_ms=1, min_reps=3)
    assert m.warmup_calls == 1
    assert m.n == 3
    assert m.times_s == (1.0, 1.0, 1.0)


def test_benchmark_clamps_to_max_reps():
    clock = StepClock(step=1e-6)
    m = benchmark(lambda: None, clock=clock, rep_ms=100, max_reps=50)
    assert m.n == 50


def test_benchmark_stops_warmup_when_clock_does_not_advance(monkeypatch):
    monkeypatch.setattr(timing, "_MAX_WARMUP_CALLS", 40)
    m = benchmark(lambda: None, clock=lambda: 0.0, max_reps=12)
    assert m.warmup_calls == 40
    assert m.n == 12  # no time estimate: as many reps as allowed
    assert m.times_s == (0.0,) * 12


@pytest.mark.parametrize(
    ("estimate", "expected"),
    [
        (0.001, 100),  # exactly 100 ms / 1 ms, not 101
        (0.0011, 91),
        (0.1, 5),  # min_reps
        (1e-7, 1000),  # max_reps
        (0.0, 1000),
    ],
)
def test_rep_count(estimate, expected):
    assert _rep_count(estimate, 0.1, 5, 1000) == expected


def test_benchmark_real_clock_measures_sleep():
    m = benchmark(time.sleep, args=(0.002,), warmup_ms=5, rep_ms=20)
    assert m.method == "wall-clock"
    assert m.label == "sleep"
    assert 5 <= m.n <= 10
    assert m.min_s >= 0.002
    assert m.median_s < 0.1


def test_benchmark_default_label_and_device_for_tensors():
    a = torch.ones(8, 8)
    m = benchmark(torch.mm, args=(a, a), warmup_ms=1, rep_ms=1)
    assert m.label == "mm"
    assert m.device == "cpu"
    assert m.method == "wall-clock"


class _Private:
    @staticmethod
    def method():
        return None


def test_default_labels():
    def local():
        return None

    assert benchmark(local, clock=StepClock(), rep_ms=1).label.endswith(
        "test_default_labels.<locals>.local"
    )
    assert benchmark(_Private.method, clock=StepClock(), rep_ms=1).label == "method"
    partial = functools.partial(max, 1)
    assert benchmark(partial, args=(2,), clock=StepClock(), rep_ms=1).label == "partial"
    big = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(3)])
    assert benchmark(big, args=(torch.ones(2),), clock=StepClock(), rep_ms=1).label == (
        "Sequential"
    )


def test_benchmark_pauses_gc_while_timing():
    enabled = []
    assert gc.isenabled()
    benchmark(
        lambda: enabled.append(gc.isenabled()),
        clock=StepClock(),
        warmup_ms=2,
        rep_ms=5,
    )
    # The warm-up runs with the collector on, the timed calls with it off.
    # 2 ms / STEP_S -> 3 warm-up calls; 5 ms / STEP_S -> 6 timed calls.
    assert enabled == [True] * 3 + [False] * 6
    assert gc.isenabled()


def test_benchmark_restores_gc_when_fn_raises():
    count = {"calls": 0}

    def fail_when_timed():
        count["calls"] += 1
        if count["calls"] > 1:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        benchmark(fail_when_timed, clock=StepClock(), warmup_ms=0.5)
    assert gc.isenabled()


# ---------------------------------------------------------------------------
# benchmark argument checks
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"warmup_ms": 0}, ValueError, "warmup_ms must be a finite number > 0"),
        ({"warmup_ms": -5}, ValueError, "warmup_ms must be a finite number > 0"),
        ({"warmup_ms": math.inf}, ValueError, "warmup_ms must be a finite number"),
        ({"rep_ms": 0.0}, ValueError, "rep_ms must be a finite number > 0"),
        ({"rep_ms": math.nan}, ValueError, "rep_ms must be a finite number"),
        ({"rep_ms": True}, TypeError, "rep_ms must be a number"),
        ({"rep_ms": "fast"}, TypeError, "rep_ms must be a number"),
        ({"min_reps": 0}, ValueError, "min_reps must be >= 1"),
        ({"min_reps": 10, "max_reps": 9}, ValueError, "max_reps must be >= 10, got 9"),
        ({"min_reps": 2.5}, TypeError, "min_reps must be an integer"),
        ({"max_reps": True}, TypeError, "max_reps must be an integer"),
        ({"args": torch.ones(2)}, TypeError, "args must be a tuple or list"),
        ({"kwargs": [1]}, TypeError, "kwargs must be a mapping"),
        ({"device": "not-a-device"}, ValueError, "device must name a device"),
        ({"device": "meta"}, ValueError, "device type must be .*got 'meta'"),
    ],
)
def test_benchmark_rejects_bad_arguments(kwargs, error, match):
    calls = []
    with pytest.raises(error, match=match):
        benchmark(lambda *a, **k: calls.append(1), **kwargs)
    assert calls == []


def test_benchmark_rejects_non_callable():
    with pytest.raises(TypeError, match="fn must be callable"):
        benchmark(42)


# ---------------------------------------------------------------------------
# Device inference
# ---------------------------------------------------------------------------


def test_tensor_device_inference():
    cpu = torch.ones(1)
    meta = torch.empty(1, device="meta")
    assert _tensor_device(()) is None
    assert _tensor_device((1, "x", None)) is None
    assert _tensor_device((cpu, [cpu])) is None  # CPU tensors: the host clock
    # A non-CPU tensor wins over CPU tensors, wherever it is.
    assert _tensor_device((cpu, meta)) == torch.device("meta")
    assert _tensor_device(([cpu, (meta,)],)) == torch.device("meta")
    assert _tensor_device(({"w": meta},)) == torch.device("meta")
    # Three levels deep at most.
    assert _tensor_device(([[[meta]]],)) == torch.device("meta")
    assert _tensor_device(([[[[meta]]]],)) is None


def test_benchmark_infers_device_from_arguments():
    meta = torch.empty(2, device="meta")
    with pytest.raises(ValueError, match=r"device type must be .*got 'meta'"):
        benchmark(lambda x, y: None, args=(torch.ones(2), meta))
    with pytest.raises(ValueError, match=r"device type must be .*got 'meta'"):
        benchmark(lambda **k: None, kwargs={"x": [meta]})


def test_explicit_device_wins_over_tensors():
    meta = torch.empty(2, device="meta")
    m = benchmark(lambda x: None, args=(meta,), device="cpu", warmup_ms=1, rep_ms=1)
    assert m.device == "cpu"


def test_cuda_device_without_cuda_raises(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="'cuda' was asked for, but CUDA is not"):
        benchmark(lambda: None, device="cuda")
    with pytest.raises(RuntimeError, match="'cuda:1' was asked for"):
        benchmark(lambda: None, device=torch.device("cuda", 1))


def test_mps_device_without_mps_raises(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="'mps' was asked for, but the MPS backend"):
        benchmark(lambda: None, device="mps")


# ---------------------------------------------------------------------------
# The CUDA path, driven by fake events
# ---------------------------------------------------------------------------


class FakeEvents:
    """Fake ``torch.cuda.Event``s that log record/elapsed_time calls in order."""

    def __init__(self, elapsed_ms):
        self.log = []
        self.created = []
        self.streams = []
        self.elapsed_ms = list(elapsed_ms)

    def factory(self, **kwargs):
        events = self

        class Event:
            def __init__(self, index):
                self.index = index

            def record(self, stream=None):
                role = "start" if self.index % 2 == 0 else "end"
                events.log.append(f"{role}{self.index // 2}.record")
                events.streams.append(stream)

            def elapsed_time(self, end):
                assert end.index == self.index + 1
                events.log.append(f"elapsed{self.index // 2}")
                return events.elapsed_ms[self.index // 2]

        self.created.append(kwargs)
        return Event(len(self.created) - 1)

    def synchronize(self):
        self.log.append("sync")

    def call(self):
        self.log.append("fn")


class FakeBuffer:
    def __init__(self, log):
        self.log = log

    def zero_(self):
        self.log.append("flush")


def test_cuda_times_order_without_flush(fake_cuda):
    fake = fake_cuda
    fake.elapsed_ms = [1.5, 2.0, 0.25]
    times = _cuda_times(fake.call, 3)
    assert fake.created == [{"enable_timing": True}] * 6  # one pair per call
    assert fake.log == [
        *("start0.record", "fn", "end0.record"),
        *("start1.record", "fn", "end1.record"),
        *("start2.record", "fn", "end2.record"),
        "sync",  # exactly one, after all calls, before reading times
        *("elapsed0", "elapsed1", "elapsed2"),
    ]
    assert times == [0.0015, 0.002, 0.00025]  # ms -> s


def test_cuda_times_flushes_before_the_start_event(fake_cuda):
    fake = fake_cuda
    fake.elapsed_ms = [3.0, 4.0]
    times = _cuda_times(fake.call, 2, flush=True)
    assert fake.log == [
        *("flush", "start0.record", "fn", "end0.record"),
        *("flush", "start1.record", "fn", "end1.record"),
        "sync",
        *("elapsed0", "elapsed1"),
    ]
    assert times == [0.003, 0.004]


def test_cuda_times_records_on_the_current_stream(fake_cuda):
    fake = fake_cuda
    _cuda_times(fake.call, 2)
    assert fake.streams == ["stream0"] * 4


def test_cuda_times_kernel_mode_holds_the_gpu_before_each_chunk(fake_cuda, monkeypatch):
    fake = fake_cuda
    holds = []

    def hold(seconds):
        holds.append(seconds)
        fake.log.append("hold")

    monkeypatch.setattr(timing, "gpu_hold", lambda stream: hold)
    monkeypatch.setattr(timing, "_host_call_s", lambda call, estimate, sync: 10e-6)
    times = _cuda_times(fake.call, 40, kernel_estimate_s=1e-4)
    assert len(times) == 40
    chunk = timing._KERNEL_CHUNK
    assert fake.log[0] == "hold"
    assert fake.log[1 + 3 * chunk] == "hold"  # the second chunk starts held
    assert fake.log.count("hold") == 2
    assert fake.log.count("sync") == 1
    # Twice the host's time to queue each chunk (calls and their events).
    per_call = 10e-6 + timing._RECORD_S
    assert holds == pytest.approx(
        [2 * chunk * per_call + 20e-6, 2 * (40 - chunk) * per_call + 20e-6]
    )


@pytest.mark.parametrize(
    ("host_call_s", "chunk"),
    [(0.0, 32), (10e-6, 32), (200e-6, 17), (1e-3, 3), (1.0, 1)],
)
def test_kernel_chunk_keeps_the_launch_queue_from_filling(host_call_s, chunk):
    # A call of 1 ms of host time may launch ~250 kernels: 3 calls fill ~750
    # of the ~1024 queue entries.
    assert timing._kernel_chunk(host_call_s) == chunk


def test_host_call_s_times_launches_without_waiting():
    clock = StepClock(step=1e-3)  # every clock read advances 1 ms
    syncs, calls = [], []
    per_call = timing._host_call_s(
        lambda: calls.append(clock()), 1e-4, lambda: syncs.append(1), clock=clock
    )
    assert len(calls) == 8  # short calls: 8 of them, launched back to back
    assert per_call == pytest.approx(9e-3 / 8)  # 8 calls + the end read
    assert syncs == [1, 1]  # before (an empty queue) and after
    calls.clear()
    timing._host_call_s(lambda: calls.append(1), 0.5, lambda: None, clock=clock)
    assert len(calls) == 1  # a long call is launched once


def test_benchmark_rejects_an_unknown_measure():
    with pytest.raises(ValueError, match="measure must be one of 'call', 'kernel'"):
        benchmark(lambda: None, measure="launch")


@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend CUDA is available, with fake events that take 2 ms each."""
    fake = FakeEvents([2.0] * 1000)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda, "device", lambda device: contextlib.nullcontext(device)
    )
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    monkeypatch.setattr(torch.cuda, "Event", fake.factory)
    monkeypatch.setattr(timing, "_l2_flush_buffer", lambda: FakeBuffer(fake.log))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: "stream0")
    monkeypatch.setattr(
        torch.cuda, "stream", lambda stream: contextlib.nullcontext(stream)
    )
    return fake


def test_benchmark_cuda_kernel_mode(fake_cuda, monkeypatch):
    slept = []
    monkeypatch.setattr(torch.cuda, "_sleep", slept.append, raising=False)
    monkeypatch.setitem(timing._SLEEP_RATES, 0, 1e9)  # 1 GHz: cycles = ns
    m = benchmark(
        fake_cuda.call,
        device="cuda",
        measure="kernel",
        warmup_ms=0.1,
        min_reps=3,
        max_reps=3,
    )
    assert m.method == "cuda-events-queued"
    assert m.times_s == (0.002,) * 3
    assert len(slept) == 1
    assert slept[0] > 20_000
    timed = fake_cuda.log[fake_cuda.log.index("start0.record") :]
    assert timed[:3] == ["start0.record", "fn", "end0.record"]
    assert set(fake_cuda.streams) == {"stream0"}


def test_benchmark_cuda_path(fake_cuda):
    calls = []
    m = benchmark(
        lambda: calls.append(1), device="cuda", warmup_ms=0.1, rep_ms=10, max_reps=7
    )
    assert m.device == "cuda:0"
    assert m.method == "cuda-events"
    assert m.n == 7
    assert m.times_s == (0.002,) * 7
    assert len(calls) == m.warmup_calls + 7
    # Synchronize first, after every warm-up call, then once after timing.
    assert fake_cuda.log.count("sync") == 1 + m.warmup_calls + 1
    assert fake_cuda.log[-8:] == ["sync"] + [f"elapsed{i}" for i in range(7)]


def test_benchmark_cuda_path_with_flush(fake_cuda):
    a = torch.ones(2)  # CPU tensor: the explicit device decides
    m = benchmark(
        lambda x: fake_cuda.call(),
        args=(a,),
        device=torch.device("cuda"),
        flush_l2=True,
        warmup_ms=0.1,
        min_reps=2,
        max_reps=2,
    )
    assert m.method == "cuda-events"
    assert fake_cuda.log[-11:] == [
        *("flush", "start0.record", "fn", "end0.record"),
        *("flush", "start1.record", "fn", "end1.record"),
        *("sync", "elapsed0", "elapsed1"),
    ]
    assert fake_cuda.log.count("flush") == 2  # not during the warm-up


def test_benchmark_mps_path(monkeypatch):
    syncs = []
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "synchronize", lambda: syncs.append(1))
    m = benchmark(lambda: None, device="mps", clock=StepClock(), rep_ms=5)
    assert m.device == "mps"
    assert m.method == "wall-clock+sync"
    assert len(syncs) == 1 + m.warmup_calls + m.n


# ---------------------------------------------------------------------------
# A real GPU
# ---------------------------------------------------------------------------


@pytest.mark.gpu
def test_benchmark_cuda_matmul():
    a = torch.randn(2048, 2048, device="cuda")
    m = benchmark(torch.mm, args=(a, a), label="fp32 matmul 2048")
    assert m.method == "cuda-events"
    assert m.device == f"cuda:{torch.cuda.current_device()}"
    assert 5 <= m.n <= 1000
    assert m.median_s > 0
    flushed = benchmark(torch.mm, args=(a, a), flush_l2=True, rep_ms=20)
    assert flushed.method == "cuda-events"
    # A cold L2 cannot make the matmul much faster.
    assert flushed.median_s > 0.5 * m.median_s


@pytest.mark.gpu
def test_benchmark_cuda_kernel_mode_hides_the_launch():
    x = torch.zeros(1024, device="cuda")
    call = benchmark(x.add_, args=(1.0,), device="cuda", rep_ms=20)
    kernel = benchmark(x.add_, args=(1.0,), device="cuda", rep_ms=20, measure="kernel")
    # Timed on the GPU (device= names it: x.add_ carries its tensor), not on the
    # host clock.
    assert kernel.method == "cuda-events-queued"
    assert call.method == "cuda-events"
    # A 4 KiB add takes a few us of GPU time. Launching it usually takes longer,
    # but a call measure whose host got ahead reads the kernel too (3.52 us
    # against 3.55 us on an H100): the kernel measure is never measurably longer.
    assert kernel.median_s <= 1.1 * call.median_s
    assert kernel.median_s < 20e-6


@pytest.mark.gpu
def test_benchmark_cuda_times_gpu_work_not_the_launch():
    # Spin the GPU for ~1e7 cycles (several ms at ~2 GHz); the launch takes us.
    m = benchmark(torch.cuda._sleep, args=(10_000_000,), device="cuda", rep_ms=50)
    assert m.method == "cuda-events"
    assert m.median_s > 1e-3


@pytest.mark.gpu
def test_benchmark_times_a_cuda_graph_replay():
    # A chain of 64 tiny kernels: launched one by one, the host's launches set the
    # pace; replayed from a CUDA graph, one launch runs them all.
    x = torch.zeros(1024, device="cuda")

    def chain():
        y = x
        for _ in range(64):
            y = torch.sin(y)
        return y

    side = torch.cuda.Stream()  # warm up on a side stream before capturing
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chain()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain()
    x.normal_()  # the replay reads the input's new values
    graph.replay()
    torch.testing.assert_close(out, chain(), rtol=0, atol=0)
    eager = benchmark(chain, device="cuda", rep_ms=20)
    replay = benchmark(graph.replay, device="cuda", rep_ms=20)
    assert eager.method == replay.method == "cuda-events"
    # About 5 us per eager launch against 1-2 us per kernel in the graph.
    assert replay.median_s < eager.median_s


def test_a_slow_first_call_does_not_shrink_the_number_of_timed_calls():
    clock = CostClock()
    calls = []

    def op():
        # 100 ms the first time (one-time costs), 1 ms afterwards.
        clock.now += 0.1 if not calls else 0.001
        calls.append(1)

    m = benchmark(op, clock=clock, warmup_ms=105, rep_ms=20, max_reps=1000)
    assert m.warmup_calls == 6  # 100 ms + 5 x 1 ms
    assert m.n == 20  # from the 1 ms estimate, not (105 / 6) ms
    assert m.median_s == pytest.approx(0.001)


def test_gpu_hold_calibrates_the_sleep_kernel_once_per_device(monkeypatch):
    slept, streams, current = [], [], ["default stream"]

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

        def record(self, stream=None):
            streams.append(stream)

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            # ms for the 2^20 calibration cycles: the clock ramps up to 2.1 GHz.
            return elapsed.pop(0)

    @contextlib.contextmanager
    def on_stream(stream):
        current.append(stream)
        try:
            yield
        finally:
            current.pop()

    def sleep(cycles):  # torch.cuda._sleep runs on the current stream
        slept.append(cycles)
        streams.append(current[-1])

    elapsed = [1.0, 0.5, 0.6]

    monkeypatch.setattr(torch.cuda, "_sleep", sleep, raising=False)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "stream", on_stream)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 7)
    monkeypatch.setattr(timing, "_SLEEP_RATES", {})
    hold = timing.gpu_hold("stream7")
    # A warm-up spin, then three timed runs; the highest rate counts.
    assert slept == [8 << 20, 1 << 20, 1 << 20, 1 << 20]
    hold(1e-3)
    assert slept[-1] == round(1e-3 * (1 << 20) / 0.5e-3)
    # The spins and the events that time them, all on the stream given.
    assert set(streams) == {"stream7"}
    assert current == ["default stream"]
    timing.gpu_hold("stream7")(1e-6)
    assert len(slept) == 6  # no second calibration on the same device
    assert slept[-1] == max(1, round(1e-6 * (1 << 20) / 0.5e-3))


# -- where the work runs, when no device is given -------------------------------------


def test_the_device_comes_from_the_arguments_not_from_what_the_callable_carries(
    monkeypatch,
):
    x = torch.empty(4, device="meta")  # meta stands in for CUDA: any non-CPU device
    monkeypatch.setattr(timing, "pick_device", lambda device: torch.device(device))
    assert timing._resolve_device(None, (torch.ones(2), [x])) == torch.device("meta")
    # An explicit device wins; a tensor the callable closes over is not looked
    # for (pass device=): the call runs on the host clock.
    assert timing._resolve_device("cpu", (x,)) == torch.device("cpu")
    assert benchmark(lambda: x + 1, clock=StepClock(), rep_ms=1).device == "cpu"
    assert benchmark(x.add_, args=(1,), clock=StepClock(), rep_ms=1).device == "cpu"


def test_kernel_mode_refuses_the_host_clock_while_cuda_is_in_use(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(ValueError, match="pass device='cuda'"):
        benchmark(lambda: None, measure="kernel")
    # A call measure on the host clock stays allowed (CPU work on a GPU machine).
    assert benchmark(lambda: None, rep_ms=1).method == "wall-clock"


class CallClock:
    """A host clock that only calls move: each call takes the next duration of a cycle."""

    def __init__(self, durations_s):
        self.now, self.durations, self.calls = 0.0, itertools.cycle(durations_s), 0

    def __call__(self):
        return self.now

    def call(self):
        self.calls += 1
        self.now += next(self.durations)


def test_sample_ms_times_blocks_of_calls_and_keeps_the_time_per_call():
    clock = CallClock([1e-3])
    m = benchmark(clock.call, clock=clock, warmup_ms=5, rep_ms=100, sample_ms=5)
    # Blocks of ceil(5 ms / 1 ms) = 5 calls; 100 ms of repetitions is 20 blocks.
    assert m.n == 20
    assert m.times_s == pytest.approx((1e-3,) * 20)
    assert clock.calls == m.warmup_calls + 5 * 20


def test_sample_ms_steadies_a_call_that_is_sometimes_preempted():
    # One call in three is preempted for 4 ms more: call by call, the spread is
    # four times the median; in blocks of 30 calls, each block holds as many
    # preempted calls as the next.
    durations = [1e-3, 1e-3, 5e-3]
    single = CallClock(durations)
    assert benchmark(single.call, clock=single).is_noisy
    clock = CallClock(durations)
    blocked = benchmark(clock.call, clock=clock, sample_ms=30)
    assert not blocked.is_noisy
    assert blocked.median_s == pytest.approx(7e-3 / 3, rel=0.05)
    with pytest.raises(ValueError, match="sample_ms must be a finite number > 0"):
        benchmark(clock.call, clock=clock, sample_ms=0)


# ---- first calls, and a step's host and GPU times (moved from compiling) ----


def test_first_calls_s_times_that_many_calls():
    calls = []

    def slow(x):
        calls.append(x)
        time.sleep(0.01)

    seconds = first_calls_s(slow, 7, device="cpu", calls=4)
    assert calls == [7] * 4
    assert 0.04 <= seconds < 1.0


class _FakeGPU:
    """Events, a hold and a clock for _held_times: the GPU takes ``gpu_s`` per call,
    the host ``host_s[i]`` for call ``i``."""

    def __init__(self, host_s, gpu_s):
        self.host_s, self.gpu_s = list(host_s), gpu_s
        self.now, self.holds, self.calls, self.syncs = 0.0, [], 0, 0

    def clock(self):
        return self.now

    def call(self):
        self.now += self.host_s[self.calls % len(self.host_s)]
        self.calls += 1

    def hold(self, seconds):
        self.holds.append(seconds)

    def synchronize(self):
        self.syncs += 1

    def event(self, enable_timing):
        assert enable_timing
        gpu_s = self.gpu_s

        class Event:
            def record(self):
                pass

            def elapsed_time(self, end):
                return gpu_s * 1e3  # ms, as CUDA events

        return Event()


def _held(fake, n, hold_s):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda, "Event", fake.event)
        patch.setattr(torch.cuda, "synchronize", fake.synchronize)
        return _held_times(fake.call, n, fake.hold, hold_s, clock=fake.clock)


def test_held_times_pairs_host_and_gpu_times_of_each_call():
    fake = _FakeGPU(host_s=[1e-3], gpu_s=0.25e-3)
    host, gpu = _held(fake, 4, hold_s=3e-3)
    assert host == pytest.approx([1e-3] * 4)
    assert gpu == pytest.approx([0.25e-3] * 4)
    assert fake.holds == [3e-3] * 4  # one hold per call
    assert fake.syncs == 8  # before each hold, and before reading the events


def test_held_times_grows_a_hold_the_host_outlasted_and_drops_that_gpu_time():
    fake = _FakeGPU(host_s=[1e-3, 5e-3, 1e-3, 1e-3], gpu_s=2e-3)
    host, gpu = _held(fake, 4, hold_s=3e-3)
    # The second call ended after its hold: neither of its times is kept (its
    # host time includes waiting for the hold), and the hold grows.
    assert host == pytest.approx([1e-3] * 4)
    assert len(gpu) == 4
    assert fake.holds == pytest.approx([3e-3, 3e-3, 10e-3, 10e-3, 10e-3])


def test_held_times_gives_no_gpu_times_for_a_call_that_waits_for_the_gpu():
    fake = _FakeGPU(host_s=[1.0], gpu_s=1e-3)  # e.g. .item(): waits out the hold

    def hold(seconds):  # the host waits for the hold to end, however long
        fake.holds.append(seconds)
        fake.host_s = [seconds + 1e-3]

    fake.hold = hold
    host, gpu = _held(fake, 5, hold_s=1e-3)
    assert len(host) == 5
    assert gpu == []
    # It stops holding after three misses in a row, instead of doubling the
    # hold for every call (which would grow without bound).
    assert len(fake.holds) == 3


def test_held_times_finishes_a_step_that_waits_for_the_gpu_every_other_call():
    # Like a step that calls .item() every other call: the odd calls wait out the
    # hold, the even ones return at once. Misses that are not in a row count too,
    # and the hold never grows past its bound.
    fake = _FakeGPU(host_s=[1e-3], gpu_s=1e-3)
    waits = []

    def hold(seconds):
        fake.holds.append(seconds)
        waits.append(seconds)

    def call():
        fake.now += (waits[-1] + 1e-3) if fake.calls % 2 else 1e-3
        fake.calls += 1

    fake.hold, fake.call = hold, call
    host, gpu = _held(fake, 50, hold_s=2e-3)
    assert len(host) == 50
    assert gpu == []  # holding cannot hide launches that wait for the GPU
    assert fake.calls < 60
    assert max(fake.holds) <= timing._MAX_HOLD_S


def test_held_times_bounds_the_hold_and_pauses_the_garbage_collector():
    fake = _FakeGPU(host_s=[2.0, 1e-3, 1e-3], gpu_s=1e-3)  # one call of 2 s
    enabled = []
    call = fake.call

    def watched():
        enabled.append(gc.isenabled())
        call()

    fake.call = watched
    host, gpu = _held(fake, 3, hold_s=1e-3)
    assert len(host) == 3
    assert len(gpu) == 3
    assert max(fake.holds) == timing._MAX_HOLD_S
    assert not any(enabled)
    assert gc.isenabled()


def _m(label, center, spread=0.01):
    return Measurement(
        label, (center * (1 - spread), center, center * (1 + spread)), "cuda:0", "x"
    )


@pytest.mark.parametrize(
    ("host_s", "gpu_s", "bound", "words"),
    [
        (2e-3, 0.5e-3, "host", "host-bound (the GPU idles 75% of a step)"),
        (0.5e-3, 2e-3, "GPU", "GPU-bound (the host runs ahead)"),
        (1e-3, 1.005e-3, "neither", "no measurable difference between the two"),
    ],
)
def test_step_times_names_the_side_that_is_measurably_slower(
    host_s, gpu_s, bound, words
):
    times = StepTimes(host=_m("step", host_s), gpu=_m("step", gpu_s))
    assert times.bound == bound
    assert str(times).startswith("host ")
    assert str(times).endswith(words)


def test_step_times_marks_a_noisy_time_and_reads_the_cpu_as_the_host():
    noisy = StepTimes(host=_m("step", 1e-3, spread=0.3), gpu=_m("step", 0.1e-3))
    assert "NOISY" in str(noisy).split(", GPU")[0]
    cpu = StepTimes(host=_m("step", 1e-3), gpu=None)
    assert cpu.bound == "host"
    assert str(cpu).endswith("per call (the host does the work)")
    waited = StepTimes(host=_m("step", 1e-3), gpu=None, waits=True)
    assert str(waited).endswith("per call, waiting for the GPU inside the call")


def test_host_and_gpu_times_on_the_cpu_times_the_call():
    calls = []
    times = host_and_gpu_times(
        lambda: calls.append(time.sleep(1e-3)), device="cpu", label="nap"
    )
    assert times.gpu is None
    assert times.host.label == "nap"
    assert times.host.n >= 5
    assert times.host.median_s >= 1e-3
    assert len(calls) >= times.host.n
