"""Tests for gpuguide.chapters.precision: the CPU's 16-bit instructions, the TF32
switch, matmul sizes, shapes and timing, MAMF's statistic, the shape search (with a
fake timer that gives every shape a known rate), the activation-memory
helpers (the MLP, its batch, what backward runs again, a memory snapshot's events)
and the chapter's transformer block (all on a CPU)."""

from __future__ import annotations

import pickle
import sys

import pytest
import torch
from torch import nn

from gpuguide import Measurement
from gpuguide.chapters import precision
from gpuguide.chapters.precision import (
    Block,
    _flop,
    _mamf,
    _matmul_bytes,
    _matmul_shapes,
    _time_matmul,
    kept_for_backward,
    mib,
    peak_rise,
    probe_rate,
    search_matmul_shapes,
    tf32_matmuls,
)
from gpuguide.sizes import SizeBudget


def _budget(memory_bytes: int = 2**30, call_s: float = 1.0) -> SizeBudget:
    return SizeBudget(
        device="cpu", memory_bytes=memory_bytes, call_s=call_s, small=False
    )


# -- the CPU's instructions and the TF32 switch ------------------------------------


def test_cpu_instructions_follow_torch(monkeypatch) -> None:
    monkeypatch.setattr(torch.cpu, "_is_amx_fp16_supported", lambda: 1, raising=False)
    monkeypatch.setattr(
        torch.cpu, "_is_avx512_bf16_supported", lambda: 0, raising=False
    )
    assert precision.cpu_has("amx_fp16") is True
    assert precision.cpu_has("avx512_bf16") is False


def test_cpu_instructions_are_false_where_torch_cannot_tell(monkeypatch) -> None:
    monkeypatch.delattr(torch.cpu, "_is_amx_fp16_supported", raising=False)
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    assert precision.cpu_has("amx_fp16") is False
    assert precision.cpu_has("avx512_bf16") is False


@pytest.mark.parametrize("before", [False, True])
def test_tf32_switch_is_put_back_also_on_an_error(before) -> None:
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = before
    try:
        with tf32_matmuls(not before):
            assert torch.backends.cuda.matmul.allow_tf32 is (not before)
        assert torch.backends.cuda.matmul.allow_tf32 is before
        with pytest.raises(KeyError), tf32_matmuls(not before):
            raise KeyError
        assert torch.backends.cuda.matmul.allow_tf32 is before
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


# -- matmul sizes, shapes and timing ---------------------------------------------


def test_matmul_bytes_counts_both_inputs_and_the_output() -> None:
    # (2 x 4) @ (4 x 3) -> (2 x 3): 8 + 12 + 6 elements.
    assert _matmul_bytes(2, 3, 4, torch.float32) == 26 * 4
    assert _matmul_bytes(2, 3, 4, torch.bfloat16) == 26 * 2


def test_shapes_are_the_largest_levels_cheapest_first() -> None:
    shapes = _matmul_shapes(torch.float32, 1e15, _budget(), lo=32, levels=2, hi=128)
    assert len(shapes) == 8
    assert {s for shape in shapes for s in shape} == {64, 128}
    flops = [_flop(*s) for s in shapes]
    assert flops == sorted(flops)
    assert shapes[0] == (64, 64, 64)
    assert shapes[-1] == (128, 128, 128)


def test_shapes_keep_only_what_fits_memory_and_time() -> None:
    # Half of 1e9 FLOP/s over 4 ms allows 1e6 FLOP: 64**3 * 2 = 524288 fits twice,
    # (64, 64, 128) is 1048576 and does not.
    rate, call_s = 1e9, 0.004
    budget = _budget(call_s=call_s)
    shapes = _matmul_shapes(torch.float32, rate, budget, lo=32, levels=3, hi=256)
    assert shapes
    assert all(2 * _flop(*s) / rate <= call_s for s in shapes)
    tight = _budget(memory_bytes=_matmul_bytes(64, 64, 64, torch.float32))
    kept = _matmul_shapes(torch.float32, 1e15, tight, lo=32, levels=2, hi=128)
    assert all(_matmul_bytes(*s, torch.float32) <= tight.memory_bytes for s in kept)


def test_shapes_fall_back_to_the_smallest_square() -> None:
    # No combination of the two sizes fits a time budget this short.
    budget = _budget(call_s=1e-12)
    shapes = _matmul_shapes(torch.float32, 1e9, budget, lo=32, levels=2, hi=128)
    assert len(shapes) == 1
    assert shapes[0][0] == shapes[0][1] == shapes[0][2]


def test_time_matmul_times_the_product_only() -> None:
    m = _time_matmul(torch.float32, (8, 4, 16), device="cpu", label="mm", rep_ms=1.0)
    assert m.label == "mm"
    assert m.device == "cpu"
    assert m.n >= 5


def test_probe_rate_is_the_fastest_of_two_timings(monkeypatch) -> None:
    calls = iter([4.0, 2.0])

    def bench(dtype, shape, *, device, **options):
        assert shape == (64, 64, 64)
        return Measurement("mm", (next(calls), 9.0), "cpu", "wall-clock")

    monkeypatch.setattr(precision, "_time_matmul", bench)
    assert probe_rate(torch.float32, "cpu") == _flop(64, 64, 64) / 2.0
    monkeypatch.undo()
    assert probe_rate(torch.float32, "cpu") > 0


def test_mamf_is_the_five_fastest_calls_per_flop() -> None:
    m = Measurement("mm", (9.0, 1.0, 2.0, 8.0, 3.0, 4.0, 5.0), "cpu", "wall-clock")
    per_flop = _mamf(m, 2.0)
    assert sorted(per_flop.times_s) == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert per_flop.median_s == 1.5  # the median of the five fastest, per FLOP
    assert per_flop.rate(1).value == pytest.approx(1 / 1.5)


# -- the shape search ---------------------------------------------------------------


class FakeTime:
    """A time_matmul whose calls take ``flop / rate(shape)``: five at that time, six
    at twice it, so that MAMF's statistic reads exactly ``rate(shape)``. Scouting
    calls (short budgets) and full-budget ones can have different rates."""

    def __init__(self, rate, full_rate=None):
        self.rate, self.full_rate = rate, full_rate or rate
        self.calls = []

    def __call__(self, dtype, shape, *, device, label, **options):
        scout = "rep_ms" in options
        tf32 = torch.backends.cuda.matmul.allow_tf32
        self.calls.append(
            {"shape": shape, "scout": scout, "dtype": dtype, "device": device}
            | {"label": label, "tf32": tf32, **options}
        )
        best = _flop(*shape) / (self.rate if scout else self.full_rate)(shape)
        times = (best,) * 5 + (best * 2,) * 6
        return Measurement(label, times, str(device), "wall-clock")


def _search(monkeypatch, bench, *, memory=3 * 128 * 128 * 4, call_s=1.0, **kw):
    budget = _budget(memory_bytes=memory, call_s=call_s)
    monkeypatch.setattr(precision, "size_budget", lambda device: budget)
    monkeypatch.setattr(precision, "_time_matmul", bench)
    kw = {"device": "cpu", "label": "fp32"} | kw
    return search_matmul_shapes(torch.float32, kw.pop("flop_per_s", 1e10), **kw)


def _fast_at(favourite, rate=1e10, boost=2.0):
    return lambda shape: rate * (boost if shape == favourite else 1.0)


def test_search_scouts_cheapest_first_then_times_the_three_fastest(
    monkeypatch,
) -> None:
    bench = FakeTime(_fast_at((64, 64, 128)))
    shape, per_flop, scouted = _search(monkeypatch, bench, levels=3)
    assert shape == (64, 64, 128)
    assert per_flop.rate(1).value == pytest.approx(2e10)  # MAMF's rate
    assert per_flop.n == 5
    scouts = [c for c in bench.calls if c["scout"]]
    full = [c for c in bench.calls if not c["scout"]]
    assert scouted == len(scouts) == 27  # 32, 64 and 128 per dimension
    flops = [_flop(*c["shape"]) for c in scouts]
    assert flops == sorted(flops)
    assert all(
        (c["warmup_ms"], c["rep_ms"], c["max_reps"]) == (5, 20, 100) for c in scouts
    )
    assert len(full) == 3
    assert full[0]["shape"] == (64, 64, 128)  # the fastest scout first
    assert full[0]["label"] == "fp32 64x64x128"
    assert all(c["flush_l2"] is True for c in bench.calls)  # a cold L2 on CUDA
    assert all(c["tf32"] is False for c in bench.calls)


def test_the_full_budget_decides_between_close_scouts(monkeypatch) -> None:
    first, second = (128, 128, 128), (128, 64, 128)
    scout = {first: 3e10, second: 2.9e10}
    full = {first: 2.5e10, second: 2.8e10}
    bench = FakeTime(lambda s: scout.get(s, 1e10), lambda s: full.get(s, 1e10))
    shape, per_flop, _ = _search(monkeypatch, bench, levels=2)
    assert shape == second
    assert per_flop.rate(1).value == pytest.approx(2.8e10)


def test_shapes_timed_already_compete_but_are_not_scouted(monkeypatch) -> None:
    bench = FakeTime(_fast_at((64, 64, 128)))
    square = (96, 96, 96)
    flop = _flop(*square)
    fast = Measurement("fp32", (flop / 3e10,) * 7, "cpu", "wall-clock")
    slow = Measurement("fp32", (flop / 1e9,) * 7, "cpu", "wall-clock")
    shape, per_flop, scouted = _search(
        monkeypatch, bench, levels=2, timed={square: fast}
    )
    assert shape == square
    assert per_flop.rate(1).value == pytest.approx(3e10)
    assert scouted == 8
    assert square not in {c["shape"] for c in bench.calls}
    shape, _, _ = _search(monkeypatch, bench, levels=3, timed={square: slow})
    assert shape == (64, 64, 128)


def test_search_stops_when_calls_take_far_longer_than_planned(monkeypatch) -> None:
    # Planned at 1e12 FLOP/s but the device does 1e6: the first shape already takes
    # far more than twice the time per call, so no larger one is tried.
    bench = FakeTime(lambda shape: 1e6)
    shape, _, scouted = _search(
        monkeypatch, bench, flop_per_s=1e12, call_s=0.01, levels=3
    )
    assert scouted == 1
    assert shape == (32, 32, 32)


@pytest.mark.parametrize("before", [False, True])
def test_search_runs_tf32_only_when_asked_and_puts_the_switch_back(
    monkeypatch, before
) -> None:
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = before
    try:
        bench = FakeTime(lambda shape: 1e10)
        _search(monkeypatch, bench, levels=1, tf32=True)
        assert {c["tf32"] for c in bench.calls} == {True}
        assert torch.backends.cuda.matmul.allow_tf32 is before
        bench = FakeTime(lambda shape: 1e10)
        _search(monkeypatch, bench, levels=1)
        assert {c["tf32"] for c in bench.calls} == {False}
        assert torch.backends.cuda.matmul.allow_tf32 is before
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize(
    ("device", "small", "lo", "levels"),
    [
        ("cpu", False, 32, 3),
        ("cpu", True, 32, 2),
        ("cuda", False, 256, 4),
        ("cuda", True, 256, 3),
    ],
)
def test_levels_default_to_fewer_off_cuda_and_in_small_mode(
    monkeypatch, device, small, lo, levels
) -> None:
    seen = []

    def spy(dtype, flop_per_s, budget, *, lo, levels):
        seen.append((lo, levels))
        return [(lo, lo, lo)]

    budget = SizeBudget(device=device, memory_bytes=2**30, call_s=1.0, small=small)
    monkeypatch.setattr(precision, "size_budget", lambda device: budget)
    monkeypatch.setattr(precision, "_matmul_shapes", spy)
    monkeypatch.setattr(precision, "_time_matmul", FakeTime(lambda shape: 1e12))
    search_matmul_shapes(torch.float32, 1e12, device=device, label="fp32")
    search_matmul_shapes(torch.float32, 1e12, device=device, label="fp32", levels=1)
    assert seen == [(lo, levels), (lo, 1)]


def test_search_rejects_no_levels_and_no_rate() -> None:
    with pytest.raises(ValueError, match="levels must"):
        search_matmul_shapes(torch.float32, 1e9, device="cpu", label="x", levels=0)
    with pytest.raises(ValueError, match="flop_per_s must"):
        search_matmul_shapes(torch.float32, 0.0, device="cpu", label="x", levels=1)


def test_search_really_runs_on_cpu(monkeypatch) -> None:
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")
    shape, per_flop, scouted = search_matmul_shapes(
        torch.float32, 1e9, device="cpu", label="fp32", levels=1
    )
    assert scouted == 1
    assert shape[0] == shape[1] == shape[2]
    assert per_flop.rate(1).value > 1e6
    assert per_flop.label == f"fp32 {shape[0]}x{shape[0]}x{shape[0]}"


# -- activation memory ------------------------------------------------------------


def test_mib() -> None:
    assert mib({"a": 2**20, "b": 3 * 2**19}) == {"a": 1.0, "b": 1.5}


def test_peak_rise_is_the_lowest_of_its_runs(monkeypatch) -> None:
    rises = iter([300, 100, 200])

    class Tracked:
        def __enter__(self):
            self.report = type("Report", (), {"peak_increase_bytes": next(rises)})
            return self

        def __exit__(self, *exc):
            return False

    calls = []
    monkeypatch.setattr(precision, "track_memory", lambda device: Tracked())
    monkeypatch.setattr(precision, "release_host_memory", lambda: True)
    assert peak_rise(lambda: calls.append(1), "cpu") == 100
    assert len(calls) == 3


def test_kept_for_backward_counts_saved_storages_once_but_the_resident() -> None:
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(8, 16)

    def forward():
        h = x @ w  # saves x (resident), the input of w's gradient
        return (h.relu() * h).sum()  # saves h and relu(h) (relu's output, twice)

    kept = kept_for_backward(forward, resident=(w, x))
    assert kept == 2 * 8 * 16 * 4
    assert kept_for_backward(forward) == kept + 8 * 16 * 4
    with torch.no_grad():
        assert kept_for_backward(forward) == 0


def test_mlp_is_depth_blocks_of_two_linears_around_gelu() -> None:
    model = precision.mlp(8, 3)
    assert len(model) == 3
    for block in model:
        kinds = [type(m) for m in block]
        assert kinds == [nn.Linear, nn.GELU, nn.Linear]
        assert block[0].weight.shape == (32, 8)
    assert model(torch.randn(5, 8)).shape == (5, 8)


def test_mlp_batch_fits_the_memory_of_a_training_step(monkeypatch) -> None:
    width, depth = 64, 4
    params = depth * (8 * width * width + 5 * width)
    per_sample = 4 * 9 * width * depth
    seen = {}

    def budget(device, call_s):
        seen["call_s"] = call_s
        return _budget(memory_bytes=16 * params + 1000 * per_sample, call_s=1e3)

    monkeypatch.setattr("gpuguide.sizes.size_budget", budget)
    assert precision.mlp_batch(width, depth, device="cpu") == 512  # 1024 needs more
    assert seen["call_s"] == 0.05
    with pytest.raises(ValueError, match="width must be"):
        precision.mlp_batch(0, depth, device="cpu")


def test_rerun_in_backward_counts_the_layers_checkpointing_runs_again() -> None:
    model = precision.mlp(8, 3)
    x = torch.randn(4, 8)

    def checkpointed():
        h = x
        for block in model:
            h = torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False)
        return h.sum()

    assert precision.rerun_in_backward(model, checkpointed) == (3, 6)
    assert precision.rerun_in_backward(model, lambda: model(x).sum()) == (0, 6)
    assert not any(m._forward_hooks for m in model.modules())  # the hooks are gone


def test_allocated_over_events_sums_allocs_and_completed_frees(tmp_path) -> None:
    events = [
        {"action": "alloc", "size": 100},
        {"action": "free_requested", "size": 100},
        {"action": "alloc", "size": 50},
        {"action": "free_completed", "size": 100},
    ]
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps({"device_traces": [[], events]}))
    expected = [10, 110, 110, 160, 60]
    assert precision.allocated_over_events(path, "cuda:1", start=10) == expected
    assert precision.allocated_over_events(str(path), "cuda:1", start=10) == expected


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_child_stages_reads_each_stage_while_the_child_waits() -> None:
    code = (
        "import sys\n"
        "print(0, 0, 'started', flush=True)\n"
        "sys.stdin.readline()\n"
        "big = b'x' * (64 * 2**20)\n"
        "print(5, 7, 'after 64 MiB', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    stages, code_ = precision.child_stages(code, "cpu")
    assert code_ == 0
    assert [s.child for s in stages] == ["started", "after 64 MiB"]
    assert (stages[1].reserved, stages[1].allocated) == (5, 7)
    grown = stages[1].driver_used - stages[0].driver_used
    assert 60 * 2**20 < grown < 80 * 2**20  # the child's resident memory, read live


# -- the chapter's transformer block ---------------------------------------------


def test_block_classifies_sequences() -> None:
    torch.manual_seed(0)
    block = Block(16, 3)
    out = block(torch.randn(2, 5, 16))
    assert out.shape == (2, 3)
    linears = [m for m in block.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 5
    assert isinstance(block.softmax, nn.Softmax)
