"""Tests for gpuguide.chapters.profiling: phase times, verdicts, profiles, torch's messages."""

from __future__ import annotations

import logging
import os
import random
import warnings
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from gpuguide.chapters import profiling
from gpuguide.chapters.profiling import (
    PhaseTimer,
    PhaseTimes,
    kernel_time_s,
    operator_table,
    time_phases,
    time_steps,
    torch_messages,
)
from gpuguide.timing import Measurement

# -- fakes ---------------------------------------------------------------------


class FakeGpu:
    """A stream whose clock the test moves: an event records the current time."""

    def __init__(self) -> None:
        self.ms = 0.0
        self.events: list[FakeGpu.Event] = []

    def run(self, ms: float) -> None:
        """Work of ``ms`` milliseconds on the stream."""
        self.ms += ms

    def factory(self, enable_timing: bool = False) -> FakeGpu.Event:
        assert enable_timing
        return FakeGpu.Event(self)

    class Event:
        def __init__(self, gpu: FakeGpu) -> None:
            self.gpu, self.ms = gpu, None

        def record(self, stream: object = None) -> None:
            self.ms = self.gpu.ms
            self.gpu.events.append(self)

        def elapsed_time(self, other: FakeGpu.Event) -> float:
            assert self.ms is not None
            assert other.ms is not None
            return other.ms - self.ms


def cuda_timer(gpu: FakeGpu, syncs: list[int] | None = None) -> PhaseTimer:
    sink = syncs if syncs is not None else []
    return PhaseTimer(
        "cuda", event_factory=gpu.factory, synchronize=lambda: sink.append(1)
    )


def m(label: str, times_ms: list[float]) -> Measurement:
    return Measurement(label, tuple(t / 1e3 for t in times_ms), "cuda:0", "cuda-events")


# -- PhaseTimer ----------------------------------------------------------------


def test_phases_on_cuda_are_event_intervals_on_the_stream() -> None:
    gpu, syncs = FakeGpu(), []
    timer = cuda_timer(gpu, syncs)
    with timer:
        for normalise_ms in (10.0, 12.0, 14.0):
            with timer.step():
                with timer.phase("normalise"):
                    gpu.run(normalise_ms)
                with timer.phase("forward"):
                    gpu.run(1.0)
    times = timer.times
    assert times is not None
    assert times.names == ("normalise", "forward")
    assert times["normalise"].times_s == pytest.approx((0.010, 0.012, 0.014))
    assert times["forward"].median_s == pytest.approx(0.001)
    assert times.step.times_s == pytest.approx((0.011, 0.013, 0.015))
    assert times.phase_sum.times_s == pytest.approx(times.step.times_s)
    assert times.step.method == "cuda-events"
    assert len(gpu.events) == 1 + 3 * 6  # origin, then 2 per step and per phase
    assert len(syncs) == 2  # entering and leaving only: the steps run unhindered
    assert times.adds_up
    assert times.unaccounted_s == pytest.approx(0.0)
    assert times.share("normalise") == pytest.approx(36 / 39)  # of all steps' time


def test_time_between_phases_beyond_the_spread_is_reported() -> None:
    gpu = FakeGpu()
    timer = cuda_timer(gpu)
    with timer:
        for _ in range(5):
            with timer.step():
                with timer.phase("a"):
                    gpu.run(1.0)
                gpu.run(3.0)  # outside every phase
                with timer.phase("b"):
                    gpu.run(1.0)
    times = timer.times
    assert times is not None
    assert not times.adds_up
    assert times.unaccounted_s == pytest.approx(0.003)
    assert "do not account for the whole step" in times.check()
    assert "3.00 ms" in times.check()


def test_check_says_the_phases_account_for_the_step_within_the_spread() -> None:
    step = m("step", [10.0, 10.5, 11.0, 11.5, 12.0])
    total = m("all phases", [9.9, 10.4, 10.9, 11.4, 11.9])
    times = PhaseTimes(phases=(total,), step=step, phase_sum=total)
    assert times.adds_up
    assert "within the spread" in times.check()


def test_phases_on_the_host_read_the_clock_after_synchronizing() -> None:
    now, syncs = [0.0], []

    def clock() -> float:
        return now[0]

    timer = PhaseTimer("cpu", clock=clock, synchronize=lambda: syncs.append(now[0]))
    with timer, timer.step():
        with timer.phase("p"):
            now[0] += 2.0
        now[0] += 0.5
    times = timer.times
    assert times is not None
    assert times["p"].median_s == 2.0
    assert times.step.median_s == 2.5
    assert times.step.method == "wall-clock"
    assert len(syncs) == 1 + 1 + 4 + 1  # entering, origin, each reading, leaving


def test_a_phase_twice_in_a_step_adds_up_and_a_missing_one_is_zero() -> None:
    gpu = FakeGpu()
    timer = cuda_timer(gpu)
    with timer:
        with timer.step():
            for _ in range(2):
                with timer.phase("micro-batch"):
                    gpu.run(2.0)
        with timer.step(), timer.phase("other"):
            gpu.run(1.0)
    times = timer.times
    assert times is not None
    assert times["micro-batch"].times_s == pytest.approx((0.004, 0.0))
    assert times["other"].times_s == pytest.approx((0.0, 0.001))


def stray_phase_first(timer: PhaseTimer, gpu: FakeGpu) -> None:
    with timer:
        with timer.phase("stray"):
            gpu.run(1.0)
        with timer.step():
            gpu.run(1.0)


def stray_phase_last(timer: PhaseTimer, gpu: FakeGpu) -> None:
    with timer:
        with timer.step():
            gpu.run(1.0)
        with timer.phase("late"):
            gpu.run(1.0)


def test_a_phase_outside_a_step_is_an_error() -> None:
    gpu = FakeGpu()
    with pytest.raises(ValueError, match="inside a step"):
        stray_phase_first(cuda_timer(gpu), gpu)
    with pytest.raises(ValueError, match="after the last step"):
        stray_phase_last(cuda_timer(gpu), gpu)


def test_unknown_phase_name_is_a_key_error() -> None:
    times = PhaseTimes(
        phases=(m("a", [1.0]),), step=m("step", [1.0]), phase_sum=m("s", [1.0])
    )
    with pytest.raises(KeyError, match="one of"):
        times["b"]


def test_a_disabled_timer_times_nothing() -> None:
    gpu = FakeGpu()
    timer = PhaseTimer("cuda", enabled=False, event_factory=gpu.factory)
    with timer, timer.step(), timer.phase("p"):
        gpu.run(1.0)
    assert timer.times is None
    assert gpu.events == []
    assert "disabled" in repr(timer)


def test_no_steps_give_no_times() -> None:
    timer = cuda_timer(FakeGpu())
    with timer:
        pass
    assert timer.times is None
    assert "0 steps" in repr(timer)


def test_time_phases_measures_real_cpu_work() -> None:
    a = torch.ones(128, 128)
    timer = time_phases("cpu")
    with timer:
        for _ in range(3):
            with timer.step():
                with timer.phase("matmul"):
                    a @ a
                with timer.phase("add"):
                    a + a
    times = timer.times
    assert times is not None
    assert times.step.n == 3
    for name in times.names:
        assert 0 < times[name].median_s <= times.step.median_s


def test_no_share_is_above_100_percent() -> None:
    rng = random.Random(0)
    gpu = FakeGpu()
    timer = cuda_timer(gpu)
    with timer:
        for _ in range(25):
            with timer.step():
                for name in ("a", "b", "c"):
                    with timer.phase(name):
                        gpu.run(rng.uniform(0.1, 10.0))
                    gpu.run(rng.uniform(0.0, 0.01))
    times = timer.times
    assert times is not None
    shares = [times.share(name) for name in times.names]
    assert all(0 < share <= 1 for share in shares)
    assert 0.99 < sum(shares) <= 1  # the rest is the small gaps between phases
    printed = [row["of the step"] for row in times.rows() if row["of the step"] != "-"]
    assert sum(float(str(s).rstrip("%")) for s in printed) <= 100 + len(printed) * 0.5


def test_shares_add_up_where_the_medians_do_not() -> None:
    times = PhaseTimes(
        phases=(m("a", [9, 1, 10]), m("b", [1, 9, 10])),
        step=m("step", [10, 10, 20]),
        phase_sum=m("all phases", [10, 10, 20]),
    )
    assert times["a"].median_s + times["b"].median_s > times.step.median_s
    assert times.share("a") == pytest.approx(0.5)
    assert times.share("a") + times.share("b") == pytest.approx(1.0)


# -- largest and rows ----------------------------------------------------------


def test_largest_needs_a_gap_beyond_the_spreads() -> None:
    clear = PhaseTimes(
        phases=(m("loop", [10, 11, 12, 13]), m("forward", [1, 2, 3, 4])),
        step=m("step", [12, 13, 14, 15]),
        phase_sum=m("all", [11, 13, 15, 17]),
    )
    assert clear.largest() == "loop"
    close = PhaseTimes(
        phases=(m("a", [5, 6, 7, 8]), m("b", [4, 5, 6, 7])),
        step=m("step", [10, 11, 13, 15]),
        phase_sum=m("all", [9, 11, 13, 15]),
    )
    assert close.largest() is None


def test_rows_hold_every_phase_their_sum_and_the_step() -> None:
    times = PhaseTimes(
        phases=(m("a", [1, 1, 1]), m("b", [0.001, 0.001, 0.001])),
        step=m("step", [1.001, 1.001, 1.001]),
        phase_sum=m("all phases", [1.001, 1.001, 1.001]),
    )
    rows = times.rows()
    assert [r["phase"] for r in rows] == ["a", "b", "all phases", "step (one span)"]
    assert rows[0]["of the step"] == "100%"
    assert rows[1]["of the step"] == "0.1%"
    assert rows[0]["time per step"] is times["a"]
    assert (
        repr(times)
        == "<PhaseTimes: 3 steps of 1.00 ms (median); a 1.00 ms (100%), b 1.00 us (0.1%)>"
    )


# -- time_steps ----------------------------------------------------------------


def test_time_steps_interleaves_the_variants_after_a_warmup() -> None:
    gpu, order = FakeGpu(), []

    def variant(name: str, ms: float):
        def run(timer: PhaseTimer) -> None:
            order.append((name, timer.enabled))
            with timer.phase("work"):
                gpu.run(ms)

        return run

    original = profiling.PhaseTimer

    def fake_timer(device=None, *, enabled=True):
        return original(
            device, enabled=enabled, event_factory=gpu.factory, synchronize=lambda: None
        )

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profiling, "PhaseTimer", fake_timer)
        results = time_steps(
            {"slow": variant("slow", 5.0), "fast": variant("fast", 1.0)},
            steps=3,
            warmup_steps=1,
            device="cuda",
        )
    assert (
        order
        == [("slow", False), ("fast", False)] + [("slow", True), ("fast", True)] * 3
    )
    assert results["slow"].step.times_s == pytest.approx((0.005,) * 3)
    assert results["fast"]["work"].times_s == pytest.approx((0.001,) * 3)


@pytest.mark.parametrize(
    ("variants", "steps", "warmup", "match"),
    [
        ({}, 3, 1, "at least one"),
        ({"a": lambda t: None}, 0, 1, "steps"),
        ({"a": lambda t: None}, 3, -1, "warmup_steps"),
    ],
)
def test_time_steps_rejects(variants, steps, warmup, match) -> None:
    with pytest.raises(ValueError, match=match):
        time_steps(variants, steps=steps, warmup_steps=warmup, device="cpu")


# -- operator_table and kernel_time_s -----------------------------------------


def event(key: str, device: DeviceType, annotation: bool, self_device_us: float = 0.0):
    return SimpleNamespace(
        key=key,
        device_type=device,
        is_user_annotation=annotation,
        self_device_time_total=self_device_us,
    )


class FakeAverages(list):
    """``key_averages()``'s EventList: a list with a ``table`` method."""

    def table(self, sort_by: str, row_limit: int) -> str:
        return f"{sort_by} {row_limit}: " + ", ".join(e.key for e in self)


class FakeProfile:
    def __init__(self, events: list) -> None:
        self.events = events

    def key_averages(self) -> FakeAverages:
        return FakeAverages(self.events)


def gpu_profile() -> FakeProfile:
    return FakeProfile(
        [
            event("normalise", DeviceType.CUDA, annotation=True, self_device_us=36_000),
            event("normalise", DeviceType.CPU, annotation=True),
            event("aten::std", DeviceType.CPU, annotation=False, self_device_us=1_100),
            event(
                "reduce_kernel", DeviceType.CUDA, annotation=False, self_device_us=1_100
            ),
            event("Memcpy HtoD", DeviceType.CUDA, annotation=False, self_device_us=100),
        ]
    )


def test_operator_table_leaves_out_the_ranges_device_rows_only() -> None:
    text = operator_table(gpu_profile(), sort_by="self_device_time_total", row_limit=5)
    assert text == (
        "self_device_time_total 5: normalise, aten::std, reduce_kernel, Memcpy HtoD"
    )


def test_kernel_time_counts_each_kernel_once_and_no_range() -> None:
    assert kernel_time_s(gpu_profile()) == pytest.approx(1_200e-6)


def test_kernel_time_of_a_cpu_profile_is_zero() -> None:
    cpu_only = FakeProfile([event("aten::mm", DeviceType.CPU, annotation=False)])
    assert kernel_time_s(cpu_only) == 0.0


def test_operator_table_of_a_real_cpu_profile_keeps_the_ranges() -> None:
    from torch.profiler import ProfilerActivity, profile, record_function

    with (
        torch_messages(),
        profile(activities=[ProfilerActivity.CPU]) as prof,
        record_function("my_range"),
    ):
        torch.ones(32, 32) @ torch.ones(32, 32)
    text = operator_table(prof, sort_by="self_cpu_time_total", row_limit=20)
    assert "my_range" in text
    assert "aten::mm" in text
    assert kernel_time_s(prof) == 0.0


# -- torch_messages ------------------------------------------------------------


def test_warnings_are_collected_not_raised() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch_messages(stderr=False) as said:
            warnings.warn(
                "Profiler clears events (Triggered internally at /x/y.cpp:1.)",
                UserWarning,
                stacklevel=1,
            )
    assert said.lines == ["Profiler clears events"]
    assert said.summary() == "torch said meanwhile: Profiler clears events"


def test_torch_log_records_are_collected_and_handlers_restored() -> None:
    owner = logging.getLogger("torch")  # has its own handler; children propagate
    child = logging.getLogger("torch.gpuguide_test_child")
    before = owner.handlers[:], owner.propagate
    printed: list[str] = []

    class Spy(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            printed.append(record.getMessage())

    spy = Spy()
    owner.addHandler(spy)
    try:
        with torch_messages(stderr=False) as said:
            child.warning("parse timed out after %d s", 3)
            owner.warning("a  two-line\nmessage")
        child.warning("after the block")
    finally:
        owner.removeHandler(spy)
    assert said.lines == ["parse timed out after 3 s", "a two-line message"]
    assert printed == ["after the block"]
    assert (owner.handlers, owner.propagate) == before


def test_stderr_lines_are_collected_and_kineto_noise_dropped(capfd) -> None:
    with torch_messages() as said:
        os.write(
            2,
            b"USDT:2026-11-23 03:30:34 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n",
        )
        os.write(2, b"WARNING: CUPTI initialization failed\n\n")
        os.write(
            2,
            b"ERROR:2026-11-23 03:41:56 1:1 DeviceProperties.cpp:48] "
            b"gpuGetDeviceCount failed with code 35\n",
        )
        os.write(
            2,
            b"USDT:2026-11-23 03:30:34 1:1 SyncActivityProfilerHandler.cpp:59] profiler_stop\n",
        )
    os.write(2, b"after\n")
    assert said.lines == ["WARNING: CUPTI initialization failed"]
    assert said.dropped == 3
    assert capfd.readouterr().err == "after\n"


def test_messages_are_kept_and_state_restored_when_the_block_raises() -> None:
    owner = logging.getLogger("torch")
    before = owner.handlers[:]
    said = None

    def fail() -> None:
        nonlocal said
        with torch_messages() as said:
            warnings.warn("first", UserWarning, stacklevel=1)
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fail()
    assert said is not None
    assert said.lines == ["first"]
    assert owner.handlers == before


def test_a_real_cpu_profile_says_nothing_that_matters() -> None:
    from torch.profiler import profile

    with torch_messages() as said, profile():
        torch.ones(3) + 1
    assert said.summary() == ""
    assert "0 lines" in repr(said)


def test_summary_is_one_short_line() -> None:
    said = profiling.TorchMessages()
    said.lines = ["x" * 500, "second"]
    text = said.summary()
    assert "\n" not in text
    assert len(text) < 220
    assert text.endswith("(and 1 more)")
